"""The fake Messages API refuses what the documented API refuses, and answers in its shapes.

The adapter's tests lean on these checks (an empty message, an altered thinking block), so the
fake's rules are tested here on their own, over plain HTTP.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.fakes.anthropic_server import (
    FakeAnthropicServer,
    text_block,
    thinking_block,
    tool_use_block,
)

HEADERS = {"x-api-key": "k", "anthropic-version": "2023-06-01", "content-type": "application/json"}
EPHEMERAL = {"type": "ephemeral"}


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as fake:
        yield fake


def post(
    server: FakeAnthropicServer, body: Any, headers: dict[str, str] = HEADERS
) -> tuple[int, dict[str, str], bytes]:
    address = urlsplit(server.url)
    connection = http.client.HTTPConnection(address.hostname or "", address.port, timeout=5)
    try:
        connection.request("POST", "/v1/messages", body=json.dumps(body), headers=headers)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def body_with(messages: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return {"model": "claude-test-model", "max_tokens": 4096, "messages": messages, **fields}


def user(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks)}


def text(value: str, **extra: Any) -> dict[str, Any]:
    return {"type": "text", "text": value, **extra}


def result(tool_use_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": "ok"}


USE = tool_use_block("toolu_01", "get_weather", {"city": "Paris"})

REFUSED = {
    "empty-user-message": (body_with([user(text("Hi")), assistant(text("Yes?")), user()]), {}),
    "empty-assistant-message": (
        body_with([user(text("Hi")), assistant(), user(text("Again"))]),
        {},
    ),
    "empty-text-block": (body_with([user(text(""))]), {}),
    "unknown-tool-result": (
        body_with([user(text("Hi")), assistant(USE), user(result("toolu_99"))]),
        {},
    ),
    "unanswered-tool-use": (
        body_with([user(text("Hi")), assistant(USE), user(text("never mind"))]),
        {},
    ),
    "tool-result-after-text": (
        body_with([user(text("Hi")), assistant(USE), user(text("here:"), result("toolu_01"))]),
        {},
    ),
    "thinking-budget-under-1024": (
        body_with([user(text("Hi"))], thinking={"type": "enabled", "budget_tokens": 1000}),
        {},
    ),
    "thinking-budget-not-under-max-tokens": (
        body_with([user(text("Hi"))], thinking={"type": "enabled", "budget_tokens": 4096}),
        {},
    ),
    "five-breakpoints": (
        body_with([user(*(text(f"doc {n}", cache_control=EPHEMERAL) for n in range(5)))]),
        {},
    ),
    "cache-control-on-thinking": (
        body_with(
            [
                user(text("Hi")),
                assistant({**thinking_block("hmm"), "cache_control": EPHEMERAL}, USE),
                user(result("toolu_01")),
            ]
        ),
        {},
    ),
    "no-anthropic-version": (
        body_with([user(text("Hi"))]),
        {"anthropic-version": None},
    ),
}


@pytest.mark.parametrize("case", REFUSED.values(), ids=REFUSED.keys())
def test_it_refuses_what_the_api_refuses(
    server: FakeAnthropicServer, case: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    body, header_changes = case
    headers = {k: v for k, v in {**HEADERS, **header_changes}.items() if v is not None}
    server.reply_message([text_block("should not be used")])

    status, response_headers, raw = post(server, body, headers)

    assert status == 400
    error = json.loads(raw)
    assert error["type"] == "error"
    assert error["error"]["type"] == "invalid_request_error"
    assert error["error"]["message"]
    assert error["request_id"] == response_headers["request-id"]
    assert server.pending_replies == 1  # refused before any scripted answer was used
    assert len(server.requests) == 1  # and still recorded


def test_it_refuses_a_missing_or_wrong_key_with_401(server: FakeAnthropicServer) -> None:
    keyed = FakeAnthropicServer(api_key="right").start()
    try:
        wrong, _, raw = post(keyed, body_with([user(text("Hi"))]), {**HEADERS, "x-api-key": "bad"})
    finally:
        keyed.stop()
    missing, _, _ = post(server, body_with([user(text("Hi"))]), {"anthropic-version": "x"})

    assert (wrong, missing) == (401, 401)
    assert json.loads(raw)["error"]["type"] == "authentication_error"


def test_it_combines_consecutive_turns_of_one_role_as_documented(
    server: FakeAnthropicServer,
) -> None:
    server.reply_message([text_block("fine")])
    messages = [
        user(text("Hi")),
        user(text("Are you there?")),
        assistant(USE),
        user(result("toolu_01")),
    ]

    status, _, _ = post(server, body_with(messages))

    assert status == 200


def test_it_accepts_an_empty_final_assistant_message(server: FakeAnthropicServer) -> None:
    server.reply_message([text_block("fine")])

    status, _, _ = post(server, body_with([user(text("Hi")), assistant()]))

    assert status == 200


def test_it_streams_the_documented_event_sequence(server: FakeAnthropicServer) -> None:
    server.reply_message([thinking_block("plan"), text_block("Hello"), USE], stop_reason="tool_use")

    status, headers, raw = post(server, body_with([user(text("Hi"))], stream=True))

    assert status == 200
    assert headers["content-type"] == "text/event-stream"
    events = [
        line.removeprefix("event: ")
        for line in raw.decode().splitlines()
        if line.startswith("event: ")
    ]
    kinds = [event for event in events if event != "ping"]
    assert kinds[0] == "message_start"
    assert kinds[-2:] == ["message_delta", "message_stop"]
    per_block = kinds[1:-2]
    assert per_block.count("content_block_start") == per_block.count("content_block_stop") == 3
    data = [
        json.loads(line.removeprefix("data: "))
        for line in raw.decode().splitlines()
        if line.startswith("data: ")
    ]
    assert data[0]["message"]["stop_reason"] is None  # known only at message_delta
    [delta] = [event for event in data if event["type"] == "message_delta"]
    assert delta["delta"]["stop_reason"] == "tool_use"
    deltas = {event["delta"]["type"] for event in data if event["type"] == "content_block_delta"}
    assert deltas == {"thinking_delta", "signature_delta", "text_delta", "input_json_delta"}


def test_it_records_every_request(server: FakeAnthropicServer) -> None:
    server.reply_message([text_block("one")])

    post(server, body_with([user(text("Hi"))]))
    post(server, body_with([user(text(""))]))

    assert [request.body["messages"][0]["content"][0]["text"] for request in server.requests] == [
        "Hi",
        "",
    ]
