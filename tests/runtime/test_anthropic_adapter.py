"""The Anthropic adapter, driven through the real SDK against a local fake Messages API."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from runtime.errors import ModelError, PromptTooLong
from runtime.llm import (
    ModelRequest,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolSpec,
    ToolUseBlock,
)
from runtime.llm.anthropic import STREAMING_MAX_TOKENS, AnthropicModel, close_clients
from tests.fakes.anthropic_server import (
    FakeAnthropicServer,
    RecordedRequest,
    error_body,
    message_body,
    redacted_thinking_block,
    text_block,
    thinking_block,
    tool_use_block,
)

API_KEY = "test-key"
MODEL = "claude-test-model"
EPHEMERAL = {"type": "ephemeral"}

WEATHER_TOOL = ToolSpec(
    name="get_weather",
    description="The current weather in a city.",
    input_schema={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)

# Environment variables through which the SDK could find credentials or another endpoint.
SDK_ENVIRONMENT = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_PROFILE",
    "ANTHROPIC_CONFIG_DIR",
    "ANTHROPIC_CUSTOM_HEADERS",
    "ANTHROPIC_IDENTITY_TOKEN",
    "ANTHROPIC_IDENTITY_TOKEN_FILE",
    "ANTHROPIC_FEDERATION_RULE_ID",
    "ANTHROPIC_ORGANIZATION_ID",
)


@pytest.fixture(autouse=True)
def _no_ambient_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[None]:
    # A developer's own key or profile must neither leak into these tests nor change them.
    for name in SDK_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    yield
    close_clients()


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The SDK's in-process retry sleeps, recorded instead of slept."""
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    return slept


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer(api_key=API_KEY) as fake:
        yield fake


@pytest.fixture
def model(server: FakeAnthropicServer) -> AnthropicModel:
    return AnthropicModel(api_key=API_KEY, base_url=server.url, timeout=5.0)


@pytest.fixture
def no_retries(server: FakeAnthropicServer) -> AnthropicModel:
    return AnthropicModel(api_key=API_KEY, base_url=server.url, timeout=5.0, max_retries=0)


def ask(text: str = "What is the weather in Paris?", **fields: Any) -> ModelRequest:
    defaults: dict[str, Any] = {
        "model": MODEL,
        "system": "You are a terse assistant.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
        "tools": [WEATHER_TOOL],
        "max_tokens": 256,
    }
    return ModelRequest(**{**defaults, **fields})


def after_tool_use(assistant_content: list[dict[str, Any]], **fields: Any) -> ModelRequest:
    """The request that answers the assistant's tool call toolu_01."""
    messages = [
        *ask().messages,
        {"role": "assistant", "content": assistant_content},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01",
                    "content": [{"type": "text", "text": '{"temp_c": 21}'}],
                }
            ],
        },
    ]
    return ask(messages=messages, **fields)


def sent_key(request: RecordedRequest) -> str | None:
    """The API key as the SDK sent it: `x-api-key`, or a bearer token in newer SDKs."""
    if "x-api-key" in request.headers:
        return request.headers["x-api-key"]
    return request.headers.get("authorization", "").removeprefix("Bearer ") or None


def without_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_cache_control(item) for item in value]
    return value


# --- requests and responses ------------------------------------------------------------------


def test_it_maps_a_text_answer_and_marks_the_cache_breakpoints(
    model: AnthropicModel, server: FakeAnthropicServer
) -> None:
    server.reply_message(
        [text_block("It is sunny in Paris.")],
        model="claude-test-model-20990101",
        input_tokens=42,
        output_tokens=7,
        cache_creation_input_tokens=1500,
        cache_read_input_tokens=0,
    )

    response = model.complete(ask(), operation_id="op-1")

    assert response.content == [TextBlock(text="It is sunny in Paris.")]
    assert response.stop_reason == "end_turn"
    assert response.usage.input_tokens == 42
    assert response.usage.output_tokens == 7
    assert response.usage.cache_creation_input_tokens == 1500
    assert response.usage.cache_read_input_tokens == 0
    assert response.model == "claude-test-model-20990101"

    [seen] = server.requests
    assert seen.path == "/v1/messages"
    assert sent_key(seen) == API_KEY
    assert seen.body == {
        "model": MODEL,
        "system": [
            {"type": "text", "text": "You are a terse assistant.", "cache_control": EPHEMERAL}
        ],
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "text",
                        "text": "What is the weather in Paris?",
                        "cache_control": EPHEMERAL,
                    }
                ],
            }
        ],
        "tools": [
            {
                "name": "get_weather",
                "description": "The current weather in a city.",
                "input_schema": WEATHER_TOOL.input_schema,
                "cache_control": EPHEMERAL,
            }
        ],
        "max_tokens": 256,
    }


def test_it_reads_cache_hits_and_null_cache_counts(
    model: AnthropicModel, server: FakeAnthropicServer
) -> None:
    server.reply_message([text_block("hit")], cache_read_input_tokens=1500)
    server.reply_message(
        [text_block("no cache")], cache_creation_input_tokens=None, cache_read_input_tokens=None
    )

    hit = model.complete(ask(), operation_id="op-1")
    unused = model.complete(ask(), operation_id="op-2")

    assert (hit.usage.cache_read_input_tokens, hit.usage.cache_creation_input_tokens) == (1500, 0)
    assert (unused.usage.cache_read_input_tokens, unused.usage.cache_creation_input_tokens) == (
        0,
        0,
    )


def test_it_sends_no_breakpoints_when_caching_is_off(
    model: AnthropicModel, server: FakeAnthropicServer
) -> None:
    server.reply_message([text_block("Hello.")])

    model.complete(ask("Hi", system="", tools=[], cache=False), operation_id="op-1")

    assert server.requests[0].body == {
        "model": MODEL,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
        "max_tokens": 256,
    }


def test_it_marks_string_content_and_never_changes_the_request_it_was_given(
    model: AnthropicModel, server: FakeAnthropicServer
) -> None:
    server.reply_message([text_block("ok")])
    request = ask(messages=[{"role": "user", "content": "Plain text"}])
    before = copy.deepcopy(request.model_dump())

    model.complete(request, operation_id="op-1")

    assert request.model_dump() == before
    assert server.requests[0].body["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Plain text", "cache_control": EPHEMERAL}],
        }
    ]


def test_it_keeps_within_four_breakpoints_when_the_transcript_has_its_own(
    model: AnthropicModel, server: FakeAnthropicServer
) -> None:
    marked = [
        {
            "role": "user",
            "content": [{"type": "text", "text": f"doc {n}", "cache_control": EPHEMERAL}],
        }
        if n % 2 == 0
        else {"role": "assistant", "content": [{"type": "text", "text": f"read {n}"}]}
        for n in range(5)
    ]
    server.reply_message([text_block("ok")])

    model.complete(ask(messages=marked), operation_id="op-1")

    body = server.requests[0].body
    assert str(body).count("cache_control") == 4  # three of the caller's, then the system's
    assert body["system"][0]["cache_control"] == EPHEMERAL
    assert "cache_control" not in body["tools"][-1]


def test_it_does_not_send_the_operation_id(
    model: AnthropicModel, server: FakeAnthropicServer
) -> None:
    server.reply_message([text_block("ok")])

    model.complete(ask(), operation_id="op-secret-looking-123")

    [seen] = server.requests
    assert "op-secret-looking-123" not in str(seen.headers)
    assert "op-secret-looking-123" not in str(seen.body)


def test_it_runs_a_tool_use_round(model: AnthropicModel, server: FakeAnthropicServer) -> None:
    server.reply_message(
        [text_block("Let me check."), tool_use_block("toolu_01", "get_weather", {"city": "Paris"})],
        stop_reason="tool_use",
    )
    server.reply_message([text_block("It is 21°C and sunny in Paris.")])

    first = model.complete(ask(), operation_id="op-1")
    assert first.stop_reason == "tool_use"
    assert first.tool_uses == [
        ToolUseBlock(id="toolu_01", name="get_weather", input={"city": "Paris"})
    ]

    assistant = [block.model_dump() for block in first.content]
    second = model.complete(after_tool_use(assistant), operation_id="op-2")

    assert second.text == "It is 21°C and sunny in Paris."
    sent = server.requests[1].body["messages"]
    assert sent[1] == {"role": "assistant", "content": assistant}
    [tool_result] = sent[2]["content"]
    assert tool_result["tool_use_id"] == "toolu_01"
    assert tool_result["cache_control"] == EPHEMERAL  # the end of the transcript is cached


# --- stop reasons (S1, S2, S3) ---------------------------------------------------------------

STOP_REASONS = [
    "end_turn",
    "stop_sequence",
    "tool_use",
    "max_tokens",
    "pause_turn",
    "refusal",
    "model_context_window_exceeded",
]


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("stop_reason", STOP_REASONS)
def test_s2_every_stop_reason_is_passed_through_exactly(
    model: AnthropicModel, server: FakeAnthropicServer, stop_reason: str, streamed: bool
) -> None:
    content = [text_block("...")]
    if stop_reason == "tool_use":
        content.append(tool_use_block("toolu_01", "get_weather", {"city": "Paris"}))
    server.reply_message(content, stop_reason=stop_reason)
    max_tokens = STREAMING_MAX_TOKENS + 1 if streamed else 256

    response = model.complete(ask(max_tokens=max_tokens), operation_id="op-1")

    assert response.stop_reason == stop_reason
    assert server.requests[0].body.get("stream", False) is streamed


def test_s2_an_unknown_stop_reason_is_a_model_error(
    no_retries: AnthropicModel, server: FakeAnthropicServer
) -> None:
    server.reply_message([text_block("...")], stop_reason="a_reason_from_the_future")

    with pytest.raises(ModelError) as caught:
        no_retries.complete(ask(), operation_id="op-1")

    assert "failed validation" in caught.value.message
    assert not caught.value.transient


def test_s1_a_max_tokens_response_keeps_its_unfinished_tool_use_as_is(
    model: AnthropicModel, server: FakeAnthropicServer
) -> None:
    server.reply_message(
        [text_block("Checking"), tool_use_block("toolu_01", "get_weather", {"ci": "Par"})],
        stop_reason="max_tokens",
    )

    response = model.complete(ask(), operation_id="op-1")

    assert response.stop_reason == "max_tokens"
    assert response.tool_uses == [
        ToolUseBlock(id="toolu_01", name="get_weather", input={"ci": "Par"})
    ]


def test_s1_a_max_tokens_response_cut_mid_text(
    model: AnthropicModel, server: FakeAnthropicServer
) -> None:
    server.reply_message([text_block("The weather in Par")], stop_reason="max_tokens")

    response = model.complete(ask(), operation_id="op-1")

    assert (response.stop_reason, response.text) == ("max_tokens", "The weather in Par")


def test_s3_empty_content_after_tool_results_is_a_valid_response(
    model: AnthropicModel, server: FakeAnthropicServer
) -> None:
    server.reply_message([], stop_reason="end_turn", output_tokens=2)
    assistant = [tool_use_block("toolu_01", "get_weather", {"city": "Paris"})]

    response = model.complete(after_tool_use(assistant), operation_id="op-1")

    assert response.content == []
    assert response.stop_reason == "end_turn"


def test_s3_the_api_refuses_a_transcript_holding_an_empty_assistant_message(
    model: AnthropicModel, server: FakeAnthropicServer
) -> None:
    messages = [
        *ask().messages,
        {"role": "assistant", "content": []},
        {"role": "user", "content": [{"type": "text", "text": "Go on."}]},
    ]

    with pytest.raises(ModelError) as caught:
        model.complete(ask(messages=messages), operation_id="op-1")

    assert caught.value.reason == "invalid_request"
    assert not caught.value.transient
    assert "non-empty content" in caught.value.message
    assert len(server.requests) == 1  # a 400 is never retried


def test_it_keeps_thinking_and_drops_unknown_blocks(
    model: AnthropicModel, server: FakeAnthropicServer
) -> None:
    thought = thinking_block("The user wants weather.")
    redacted = redacted_thinking_block("hidden")
    server.reply_message(
        [
            thought,
            redacted,
            {"type": "a_block_from_the_future", "payload": {"x": 1}},
            text_block("Sunny."),
        ],
    )

    response = model.complete(ask(), operation_id="op-1")

    assert response.content == [
        ThinkingBlock(thinking=thought["thinking"], signature=thought["signature"]),
        RedactedThinkingBlock(data=redacted["data"]),
        TextBlock(text="Sunny."),
    ]


@pytest.mark.parametrize(
    "block",
    [
        {"type": "tool_use", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "", "name": "get_weather", "input": {}},
        {"type": "tool_use", "id": "toolu_01", "input": {}},
        {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": "Paris"},
        {"type": "text"},
        {"type": "thinking", "thinking": "no signature"},
    ],
    ids=["no-id", "empty-id", "no-name", "input-not-an-object", "text-without-text", "unsigned"],
)
def test_it_rejects_a_malformed_block(
    no_retries: AnthropicModel, server: FakeAnthropicServer, block: dict[str, Any]
) -> None:
    server.reply_message([block], stop_reason="tool_use")

    with pytest.raises(ModelError) as caught:
        no_retries.complete(ask(), operation_id="op-1")

    assert "failed validation" in caught.value.message


@pytest.mark.parametrize(
    "body",
    [
        b"this is not json",
        [1, 2, 3],
        {"content": "not a list of blocks"},
        {**message_body([text_block("hi")]), "usage": None},
    ],
    ids=["not-json", "a-list", "content-not-a-list", "usage-null"],
)
def test_it_rejects_a_success_body_that_is_not_a_message(
    model: AnthropicModel, server: FakeAnthropicServer, body: Any
) -> None:
    server.reply(200, body)

    with pytest.raises(ModelError) as caught:
        model.complete(ask(), operation_id="op-1")

    assert not caught.value.transient
    assert len(server.requests) == 1


# --- extended thinking (S6) --------------------------------------------------------------------


def test_s6_thinking_blocks_go_back_unchanged_with_their_signatures(
    model: AnthropicModel, server: FakeAnthropicServer
) -> None:
    server.reply_message(
        [
            thinking_block("Paris: call the weather tool."),
            redacted_thinking_block("something sensitive"),
            tool_use_block("toolu_01", "get_weather", {"city": "Paris"}),
        ],
        stop_reason="tool_use",
    )
    server.reply_message([thinking_block("21 degrees."), text_block("21°C in Paris.")])

    first = model.complete(ask(max_tokens=4096, thinking_budget=2048), operation_id="op-1")
    assistant = [block.model_dump() for block in first.content]
    second = model.complete(
        after_tool_use(assistant, max_tokens=4096, thinking_budget=2048), operation_id="op-2"
    )

    assert second.text == "21°C in Paris."
    assert server.requests[0].body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert server.requests[1].body["messages"][1]["content"] == assistant
    assert [block["type"] for block in assistant] == ["thinking", "redacted_thinking", "tool_use"]
    assert len(server.requests) == 2  # the fake checked the signatures and accepted them


@pytest.mark.parametrize(
    ("alter", "expected"),
    [
        (lambda blocks: blocks[0].update(thinking="Edited."), "Invalid `signature`"),
        (lambda blocks: blocks[0].update(signature=""), "signature: Field required"),
        (lambda blocks: blocks.pop(0), "must start with a thinking block"),
    ],
    ids=["altered", "signature-emptied", "dropped"],
)
def test_s6_the_api_refuses_thinking_that_did_not_come_back_unchanged(
    model: AnthropicModel, server: FakeAnthropicServer, alter: Any, expected: str
) -> None:
    assistant = [
        thinking_block("Paris: call the weather tool."),
        tool_use_block("toolu_01", "get_weather", {"city": "Paris"}),
    ]
    alter(assistant)

    with pytest.raises(ModelError) as caught:
        model.complete(
            after_tool_use(assistant, max_tokens=4096, thinking_budget=2048), operation_id="op-1"
        )

    assert expected in caught.value.message
    assert (caught.value.reason, caught.value.transient) == ("invalid_request", False)
    assert len(server.requests) == 1


@pytest.mark.parametrize(("budget", "max_tokens"), [(1023, 4096), (4096, 4096), (5000, 4096)])
def test_it_refuses_a_thinking_budget_the_api_would_refuse_before_sending_it(
    model: AnthropicModel, server: FakeAnthropicServer, budget: int, max_tokens: int
) -> None:
    with pytest.raises(ModelError) as caught:
        model.complete(ask(max_tokens=max_tokens, thinking_budget=budget), operation_id="op-1")

    assert "at least 1024 tokens and less than max_tokens" in caught.value.message
    assert (caught.value.reason, caught.value.transient) == ("invalid_request", False)
    assert server.requests == []


# --- errors and retries (T9) -------------------------------------------------------------------

ERROR_CASES = [
    # status, error type or raw body, headers, reason, transient, retry_after
    (429, "rate_limit_error", {"retry-after": "7"}, "rate_limited", True, 7.0),
    (429, "rate_limit_error", {"retry-after-ms": "1500"}, "rate_limited", True, 1.5),
    (529, "overloaded_error", {}, "overloaded", True, None),
    (500, "api_error", {}, "server_error", True, None),
    (502, b"<html><body>Bad gateway</body></html>", {}, "server_error", True, None),
    (503, "api_error", {"retry-after": "2"}, "server_error", True, 2.0),
    (504, "timeout_error", {}, "timeout", True, None),
    (400, "invalid_request_error", {}, "invalid_request", False, None),
    (401, "authentication_error", {}, "authentication", False, None),
    (403, "permission_error", {}, "permission", False, None),
    (404, "not_found_error", {}, "not_found", False, None),
    (413, "request_too_large", {}, "request_too_large", False, None),
]


@pytest.mark.parametrize("case", ERROR_CASES, ids=[f"{case[0]}-{case[3]}" for case in ERROR_CASES])
def test_t9_each_provider_error_is_mapped_transient_or_permanent(
    no_retries: AnthropicModel, server: FakeAnthropicServer, case: tuple[Any, ...]
) -> None:
    status, error, headers, reason, transient, retry_after = case
    body = error if isinstance(error, bytes) else error_body(error, f"detail of {error}")
    server.reply(status, body, headers=headers)

    with pytest.raises(ModelError) as caught:
        no_retries.complete(ask(), operation_id="op-1")

    failure = caught.value
    assert (failure.status, failure.reason, failure.transient) == (status, reason, transient)
    assert failure.retry_after == retry_after
    assert str(status) in failure.message
    assert "req_fake" in failure.message  # the provider's request id, for support tickets
    if isinstance(error, str):
        assert f"detail of {error}" in failure.message
    assert len(server.requests) == 1


def test_t9_a_spend_limit_429_is_permanent(
    no_retries: AnthropicModel, server: FakeAnthropicServer
) -> None:
    body = error_body("rate_limit_error", "You have reached your spend limit.")
    body["error"]["details"] = {"error_code": "enforced_spend_limit_reached"}
    server.reply(429, body)

    with pytest.raises(ModelError) as caught:
        no_retries.complete(ask(), operation_id="op-1")

    assert (caught.value.reason, caught.value.transient) == ("spend_limit", False)


def test_t9_a_prompt_over_the_context_window_is_prompt_too_long(
    model: AnthropicModel, server: FakeAnthropicServer
) -> None:
    server.reply_prompt_too_long()

    with pytest.raises(PromptTooLong) as caught:
        model.complete(ask(), operation_id="op-1")

    assert caught.value.code == "prompt_too_long"
    assert (caught.value.status, caught.value.transient) == (400, False)
    assert "210000 tokens > 200000 maximum" in caught.value.message
    assert len(server.requests) == 1


def test_t9_a_429_with_retry_after_then_200_succeeds_within_one_attempt(
    model: AnthropicModel, server: FakeAnthropicServer, waits: list[float]
) -> None:
    server.reply_error(429, "rate_limit_error", "slow down", headers={"retry-after": "3"})
    server.reply_message([text_block("made it")])

    response = model.complete(ask(), operation_id="op-1")

    assert response.text == "made it"
    assert len(server.requests) == 2
    assert [r.headers["x-stainless-retry-count"] for r in server.requests] == ["0", "1"]
    assert waits == [3.0]  # the provider's wait, exactly


def test_t9_retry_after_ms_is_honoured_in_process(
    model: AnthropicModel, server: FakeAnthropicServer, waits: list[float]
) -> None:
    server.reply_error(529, "overloaded_error", "Overloaded", headers={"retry-after-ms": "250"})
    server.reply_message([text_block("made it")])

    assert model.complete(ask(), operation_id="op-1").text == "made it"
    assert waits == [0.25]


def test_t9_with_retries_set_to_0_a_429_is_a_transient_error(
    server: FakeAnthropicServer, settings: Any, waits: list[float]
) -> None:
    settings.AGENTOPS_MODEL_RETRIES = 0
    server.reply_error(429, "rate_limit_error", "slow down", headers={"retry-after": "3"})
    server.reply_message([text_block("a retry would have got this")])

    with pytest.raises(ModelError) as caught:
        AnthropicModel(api_key=API_KEY, base_url=server.url).complete(ask(), operation_id="op-1")

    assert (caught.value.transient, caught.value.retry_after) == (True, 3.0)
    assert len(server.requests) == 1
    assert waits == []


def test_t9_a_wait_longer_than_the_cap_is_left_to_the_persisted_backoff(
    model: AnthropicModel, server: FakeAnthropicServer, waits: list[float]
) -> None:
    server.reply_error(429, "rate_limit_error", "slow down", headers={"retry-after": "120"})
    server.reply_message([text_block("a retry would have got this")])

    with pytest.raises(ModelError) as caught:
        model.complete(ask(), operation_id="op-1")

    assert (caught.value.transient, caught.value.retry_after) == (True, 120.0)
    assert len(server.requests) == 1
    assert waits == []


def test_t9_transient_errors_exhaust_the_default_in_process_retries(
    model: AnthropicModel, server: FakeAnthropicServer, waits: list[float]
) -> None:
    for _ in range(3):
        server.reply_error(529, "overloaded_error", "Overloaded")
    server.reply_message([text_block("a fourth request would have got this")])

    with pytest.raises(ModelError) as caught:
        model.complete(ask(), operation_id="op-1")

    assert (caught.value.reason, caught.value.transient) == ("overloaded", True)
    assert len(server.requests) == 3  # the first request and 2 retries
    assert len(waits) == 2


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413])
def test_t9_a_permanent_error_is_never_retried(
    server: FakeAnthropicServer, status: int, waits: list[float]
) -> None:
    adapter = AnthropicModel(api_key=API_KEY, base_url=server.url, max_retries=5)
    server.reply_error(status, "invalid_request_error", "no")
    server.reply_message([text_block("a retry would have got this")])

    with pytest.raises(ModelError):
        adapter.complete(ask(), operation_id="op-1")

    assert len(server.requests) == 1
    assert waits == []


def test_t9_the_server_can_forbid_a_retry(
    model: AnthropicModel, server: FakeAnthropicServer, waits: list[float]
) -> None:
    server.reply_error(500, "api_error", "boom", headers={"x-should-retry": "false"})

    with pytest.raises(ModelError) as caught:
        model.complete(ask(), operation_id="op-1")

    assert caught.value.transient  # still worth a persisted retry later
    assert len(server.requests) == 1


def test_t9_a_reset_connection_is_retried(
    model: AnthropicModel, server: FakeAnthropicServer, waits: list[float]
) -> None:
    server.reset_connection()
    server.reply_message([text_block("second time lucky")])

    assert model.complete(ask(), operation_id="op-1").text == "second time lucky"
    assert len(server.requests) == 2


def test_t9_connections_reset_every_time_are_a_transient_error(
    model: AnthropicModel, server: FakeAnthropicServer, waits: list[float]
) -> None:
    for _ in range(3):
        server.reset_connection()

    with pytest.raises(ModelError) as caught:
        model.complete(ask(), operation_id="op-1")

    assert (caught.value.reason, caught.value.transient) == ("connection", True)
    assert len(server.requests) == 3


def test_t9_an_unreachable_server_is_a_transient_error(waits: list[float]) -> None:
    with FakeAnthropicServer() as server:
        url = server.url
    adapter = AnthropicModel(api_key=API_KEY, base_url=url)

    with pytest.raises(ModelError) as caught:
        adapter.complete(ask(), operation_id="op-1")

    assert "could not reach the Anthropic API" in caught.value.message
    assert url in caught.value.message
    assert (caught.value.reason, caught.value.transient) == ("connection", True)


def test_t9_a_timeout_is_a_transient_error(server: FakeAnthropicServer) -> None:
    adapter = AnthropicModel(api_key=API_KEY, base_url=server.url, timeout=0.3, max_retries=0)
    server.reply(200, message_body([text_block("too late")]), delay=10)

    with pytest.raises(ModelError) as caught:
        adapter.complete(ask(), operation_id="op-1")

    assert "timed out" in caught.value.message
    assert (caught.value.reason, caught.value.transient) == ("timeout", True)
    assert len(server.requests) == 1


def test_a_request_timeout_overrides_the_adapter_default(
    no_retries: AnthropicModel, server: FakeAnthropicServer
) -> None:
    server.reply(200, message_body([text_block("too late")]), delay=10)

    with pytest.raises(ModelError) as caught:
        no_retries.complete(ask(timeout=0.3), operation_id="op-1")

    assert caught.value.reason == "timeout"
    assert server.requests[0].headers["x-stainless-read-timeout"] == "0.3"


# --- streaming -----------------------------------------------------------------------------------


def test_it_streams_above_the_threshold_and_assembles_the_final_message(
    model: AnthropicModel, server: FakeAnthropicServer
) -> None:
    thought = thinking_block("A long think about Paris weather.")
    redacted = redacted_thinking_block("hidden")
    server.reply_message(
        [
            thought,
            redacted,
            text_block("Let me look that up for you."),
            tool_use_block("toolu_01", "get_weather", {"city": "Paris", "units": "metric"}),
        ],
        stop_reason="tool_use",
        input_tokens=120,
        output_tokens=4000,
        cache_read_input_tokens=100,
    )
    request = ask(max_tokens=STREAMING_MAX_TOKENS + 1, thinking_budget=16_000)

    response = model.complete(request, operation_id="op-1")

    assert server.requests[0].body["stream"] is True
    assert response.content == [
        ThinkingBlock(thinking=thought["thinking"], signature=thought["signature"]),
        RedactedThinkingBlock(data=redacted["data"]),
        TextBlock(text="Let me look that up for you."),
        ToolUseBlock(id="toolu_01", name="get_weather", input={"city": "Paris", "units": "metric"}),
    ]
    assert response.stop_reason == "tool_use"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (120, 4000)
    assert response.usage.cache_read_input_tokens == 100


def test_it_does_not_stream_at_the_threshold(
    model: AnthropicModel, server: FakeAnthropicServer
) -> None:
    server.reply_message([text_block("short")])

    model.complete(ask(max_tokens=STREAMING_MAX_TOKENS), operation_id="op-1")

    assert "stream" not in server.requests[0].body


def test_t9_an_error_event_in_a_stream_is_mapped(
    model: AnthropicModel, server: FakeAnthropicServer
) -> None:
    server.reply_stream_error([text_block("Partial answer")], "overloaded_error", "Overloaded")

    with pytest.raises(ModelError) as caught:
        model.complete(ask(max_tokens=STREAMING_MAX_TOKENS + 1), operation_id="op-1")

    assert (caught.value.reason, caught.value.transient) == ("overloaded", True)
    assert "Overloaded" in caught.value.message


def test_t9_a_stream_cut_midway_is_a_transient_error(
    no_retries: AnthropicModel, server: FakeAnthropicServer
) -> None:
    server.reply_stream_cut([text_block("Partial answer"), text_block("never sent")])

    with pytest.raises(ModelError) as caught:
        no_retries.complete(ask(max_tokens=STREAMING_MAX_TOKENS + 1), operation_id="op-1")

    assert (caught.value.reason, caught.value.transient) == ("connection", True)


# --- the client ----------------------------------------------------------------------------------


def test_one_client_serves_every_request_of_a_configuration(
    server: FakeAnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[anthropic.Anthropic] = []
    real = anthropic.Anthropic

    def counting(*args: Any, **kwargs: Any) -> anthropic.Anthropic:
        built.append(real(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(anthropic, "Anthropic", counting)
    for _ in range(8):
        server.reply_message([text_block("ok")])
    first = AnthropicModel(api_key=API_KEY, base_url=server.url)
    second = AnthropicModel(api_key=API_KEY, base_url=server.url)

    threads = [
        threading.Thread(target=adapter.complete, args=(ask(),), kwargs={"operation_id": "op"})
        for adapter in (first, second) * 3
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(server.requests) == 6
    assert len(built) == 1
    assert first.client is second.client is built[0]
    other = AnthropicModel(api_key=API_KEY, base_url=server.url, max_retries=0)
    assert other.client is not first.client


def test_it_builds_no_client_until_first_used(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_client(*args: object, **kwargs: object) -> None:
        raise AssertionError("the SDK client was built eagerly")

    monkeypatch.setattr(anthropic, "Anthropic", no_client)

    AnthropicModel(api_key=API_KEY, base_url="http://127.0.0.1:9")


@pytest.mark.parametrize(
    "arguments",
    [{"max_retries": -1}, {"timeout": 0}, {"retry_max_wait": -1.0}],
    ids=["retries", "timeout", "max-wait"],
)
def test_it_refuses_a_nonsensical_configuration(arguments: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="must be"):
        AnthropicModel(api_key=API_KEY, **arguments)


def test_it_keeps_the_api_key_out_of_error_messages(waits: list[float]) -> None:
    key = "sk-ant-test-0123456789-SECRET"
    with FakeAnthropicServer(api_key=key) as server:
        adapter = AnthropicModel(api_key=key, base_url=server.url, timeout=5.0)
        # A misbehaving proxy that echoes the credential back in its error.
        server.reply(401, error_body("authentication_error", f"invalid x-api-key: {key}"))

        with pytest.raises(ModelError) as caught:
            adapter.complete(ask(), operation_id="op-1")

        assert sent_key(server.requests[0]) == key
    assert "401" in caught.value.message
    assert "authentication_error" in caught.value.message
    assert key not in caught.value.message
    assert key not in str(caught.value)
    assert key not in repr(caught.value)
    # Nor through the exception chain, which a logged traceback would print.
    assert caught.value.__cause__ is None or key not in str(caught.value.__cause__)
    assert key not in repr(adapter)

    with pytest.raises(ModelError) as unreachable:
        adapter.complete(ask(), operation_id="op-2")
    assert key not in unreachable.value.message


def test_it_reads_the_key_and_base_url_from_the_environment(
    server: FakeAnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    server.reply_message([text_block("from the environment")])

    response = AnthropicModel().complete(ask(), operation_id="op-1")

    assert response.text == "from the environment"
    assert sent_key(server.requests[0]) == API_KEY


def test_a_changed_environment_gets_its_own_client(
    server: FakeAnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "an-old-key")
    before = AnthropicModel().client
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    server.reply_message([text_block("new key")])

    assert AnthropicModel().complete(ask(), operation_id="op-1").text == "new key"
    assert AnthropicModel().client is not before


def test_it_reports_missing_credentials_as_a_model_error(server: FakeAnthropicServer) -> None:
    adapter = AnthropicModel(base_url=server.url)

    with pytest.raises(ModelError) as caught:
        adapter.complete(ask(), operation_id="op-1")

    assert "ANTHROPIC_API_KEY" in caught.value.message
    assert server.requests == []
