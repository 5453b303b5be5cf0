"""The Anthropic adapter, driven through the real SDK against a local fake Messages API."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from runtime.errors import ModelError
from runtime.llm import ModelRequest, TextBlock, ToolSpec, ToolUseBlock
from runtime.llm.anthropic import AnthropicModel
from tests.fakes.anthropic_server import (
    FakeAnthropicServer,
    RecordedRequest,
    error_body,
    message_body,
    text_block,
    tool_use_block,
)

API_KEY = "test-key"
MODEL = "claude-test-model"

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
def _no_ambient_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    # A developer's own key or profile must neither leak into these tests nor change them.
    for name in SDK_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as fake:
        yield fake


@pytest.fixture
def model(server: FakeAnthropicServer) -> Iterator[AnthropicModel]:
    adapter = AnthropicModel(api_key=API_KEY, base_url=server.url, timeout=5.0)
    yield adapter
    adapter.close()


def ask(text: str = "What is the weather in Paris?", **fields: Any) -> ModelRequest:
    defaults: dict[str, Any] = {
        "model": MODEL,
        "system": "You are a terse assistant.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
        "tools": [WEATHER_TOOL],
        "max_tokens": 256,
    }
    return ModelRequest(**{**defaults, **fields})


def sent_key(request: RecordedRequest) -> str | None:
    """The API key as the SDK sent it: `x-api-key`, or a bearer token in newer SDKs."""
    if "x-api-key" in request.headers:
        return request.headers["x-api-key"]
    return request.headers.get("authorization", "").removeprefix("Bearer ") or None


def test_it_maps_a_text_answer(model: AnthropicModel, server: FakeAnthropicServer) -> None:
    server.reply_message(
        [text_block("It is sunny in Paris.")],
        model="claude-test-model-20990101",
        input_tokens=42,
        output_tokens=7,
    )

    response = model.complete(ask(), operation_id="op-1")

    assert response.content == [TextBlock(text="It is sunny in Paris.")]
    assert response.text == "It is sunny in Paris."
    assert response.stop_reason == "end_turn"
    assert response.usage.input_tokens == 42
    assert response.usage.output_tokens == 7
    assert response.model == "claude-test-model-20990101"

    [seen] = server.requests
    assert seen.method == "POST"
    assert seen.path == "/v1/messages"
    assert sent_key(seen) == API_KEY
    assert "anthropic-version" in seen.headers
    assert seen.body == {
        "model": MODEL,
        "system": "You are a terse assistant.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "What is the weather in Paris?"}]}
        ],
        "tools": [
            {
                "name": "get_weather",
                "description": "The current weather in a city.",
                "input_schema": WEATHER_TOOL.input_schema,
            }
        ],
        "max_tokens": 256,
    }


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
        [
            text_block("Let me check."),
            tool_use_block("toolu_01", "get_weather", {"city": "Paris"}),
        ],
        stop_reason="tool_use",
    )
    server.reply_message([text_block("It is 21°C and sunny in Paris.")])

    first = model.complete(ask(), operation_id="op-1")

    assert first.stop_reason == "tool_use"
    assert first.text == "Let me check."
    assert first.tool_uses == [
        ToolUseBlock(id="toolu_01", name="get_weather", input={"city": "Paris"})
    ]

    transcript = [
        *ask().messages,
        {"role": "assistant", "content": [block.model_dump() for block in first.content]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01",
                    "content": [{"type": "text", "text": '{"temp_c": 21, "sky": "sunny"}'}],
                }
            ],
        },
    ]
    second = model.complete(ask(messages=transcript), operation_id="op-2")

    assert second.stop_reason == "end_turn"
    assert second.text == "It is 21°C and sunny in Paris."
    assert second.tool_uses == []

    assert len(server.requests) == 2
    sent = server.requests[1].body["messages"]
    assert sent[1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me check."},
            {
                "type": "tool_use",
                "id": "toolu_01",
                "name": "get_weather",
                "input": {"city": "Paris"},
            },
        ],
    }
    [tool_result] = sent[2]["content"]
    assert sent[2]["role"] == "user"
    assert tool_result["type"] == "tool_result"
    assert tool_result["tool_use_id"] == "toolu_01"
    assert tool_result["content"] == [{"type": "text", "text": '{"temp_c": 21, "sky": "sunny"}'}]


@pytest.mark.parametrize("stop_reason", ["end_turn", "stop_sequence", "refusal", "pause_turn"])
def test_it_keeps_the_stop_reason_as_given(
    model: AnthropicModel, server: FakeAnthropicServer, stop_reason: str
) -> None:
    server.reply_message([text_block("...")], stop_reason=stop_reason)

    assert model.complete(ask(), operation_id="op-1").stop_reason == stop_reason


def test_it_returns_a_max_tokens_answer_with_an_unfinished_tool_use_as_is(
    model: AnthropicModel, server: FakeAnthropicServer
) -> None:
    server.reply_message(
        [text_block("Checking"), tool_use_block("toolu_01", "get_weather", {})],
        stop_reason="max_tokens",
    )

    response = model.complete(ask(), operation_id="op-1")

    assert response.stop_reason == "max_tokens"
    assert response.tool_uses == [ToolUseBlock(id="toolu_01", name="get_weather", input={})]


def test_it_drops_thinking_and_unknown_blocks(
    model: AnthropicModel, server: FakeAnthropicServer
) -> None:
    server.reply_message(
        [
            {"type": "thinking", "thinking": "The user wants weather.", "signature": "sig"},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "a_block_from_the_future", "payload": {"x": 1}},
            text_block("Sunny."),
            tool_use_block("toolu_01", "get_weather", {"city": "Paris"}),
        ],
        stop_reason="tool_use",
    )

    response = model.complete(ask(), operation_id="op-1")

    assert response.content == [
        TextBlock(text="Sunny."),
        ToolUseBlock(id="toolu_01", name="get_weather", input={"city": "Paris"}),
    ]


def test_it_omits_an_empty_system_prompt_and_no_tools(
    model: AnthropicModel, server: FakeAnthropicServer
) -> None:
    server.reply_message([text_block("Hello.")])

    model.complete(ask("Hi", system="", tools=[]), operation_id="op-1")

    [seen] = server.requests
    assert "system" not in seen.body
    assert "tools" not in seen.body
    assert seen.body == {
        "model": MODEL,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
        "max_tokens": 256,
    }


def test_it_turns_overloaded_into_a_model_error_without_sdk_retries(
    model: AnthropicModel, server: FakeAnthropicServer
) -> None:
    server.reply(529, error_body("overloaded_error", "Overloaded"))
    server.reply_message([text_block("a retry would have got this")])

    with pytest.raises(ModelError) as caught:
        model.complete(ask(), operation_id="op-1")

    assert "529" in caught.value.message
    assert "overloaded_error" in caught.value.message
    assert "Overloaded" in caught.value.message
    assert caught.value.code == "model_error"
    assert len(server.requests) == 1
    assert server.requests[0].headers["x-stainless-retry-count"] == "0"
    assert server.pending_replies == 1


@pytest.mark.parametrize(
    ("status", "error_type", "detail"),
    [
        (400, "invalid_request_error", "messages: roles must alternate"),
        (401, "authentication_error", "invalid x-api-key"),
        (429, "rate_limit_error", "Number of request tokens has exceeded your rate limit"),
        (500, "api_error", "Internal server error"),
    ],
)
def test_it_turns_a_provider_error_into_a_model_error(
    model: AnthropicModel,
    server: FakeAnthropicServer,
    status: int,
    error_type: str,
    detail: str,
) -> None:
    server.reply(status, error_body(error_type, detail), headers={"retry-after": "0"})

    with pytest.raises(ModelError) as caught:
        model.complete(ask(), operation_id="op-1")

    assert str(status) in caught.value.message
    assert error_type in caught.value.message
    assert detail in caught.value.message
    assert "req_fake" in caught.value.message  # the provider's request id, for support tickets
    assert len(server.requests) == 1


def test_it_reports_an_error_body_that_is_not_json(
    model: AnthropicModel, server: FakeAnthropicServer
) -> None:
    server.reply(
        502, b"<html><body>Bad gateway</body></html>", headers={"Content-Type": "text/html"}
    )

    with pytest.raises(ModelError) as caught:
        model.complete(ask(), operation_id="op-1")

    assert "502" in caught.value.message
    assert "Bad gateway" in caught.value.message
    assert len(server.requests) == 1


def test_it_turns_an_unreachable_server_into_a_model_error() -> None:
    with FakeAnthropicServer() as server:
        url = server.url
    adapter = AnthropicModel(api_key=API_KEY, base_url=url, timeout=5.0)

    with pytest.raises(ModelError) as caught:
        adapter.complete(ask(), operation_id="op-1")

    assert "could not reach the Anthropic API" in caught.value.message
    assert url in caught.value.message


def test_it_turns_a_timeout_into_a_model_error(server: FakeAnthropicServer) -> None:
    adapter = AnthropicModel(api_key=API_KEY, base_url=server.url, timeout=0.3)
    server.reply(200, message_body([text_block("too late")]), delay=10)

    with pytest.raises(ModelError) as caught:
        adapter.complete(ask(), operation_id="op-1")

    assert "timed out" in caught.value.message
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "block",
    [
        {"type": "tool_use", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "", "name": "get_weather", "input": {}},
        {"type": "tool_use", "id": "toolu_01", "input": {}},
        {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": "Paris"},
        {"type": "text"},
    ],
    ids=["no-id", "empty-id", "no-name", "input-not-an-object", "text-without-text"],
)
def test_it_rejects_a_malformed_block(
    model: AnthropicModel, server: FakeAnthropicServer, block: dict[str, Any]
) -> None:
    server.reply_message([block], stop_reason="tool_use")

    with pytest.raises(ModelError) as caught:
        model.complete(ask(), operation_id="op-1")

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

    with pytest.raises(ModelError):
        model.complete(ask(), operation_id="op-1")


def test_it_keeps_the_api_key_out_of_error_messages(server: FakeAnthropicServer) -> None:
    key = "sk-ant-test-0123456789-SECRET"
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

    server.stop()
    with pytest.raises(ModelError) as unreachable:
        adapter.complete(ask(), operation_id="op-2")
    assert key not in unreachable.value.message


def test_it_reads_the_key_and_base_url_from_the_environment(
    server: FakeAnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "env-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    server.reply_message([text_block("from the environment")])

    response = AnthropicModel().complete(ask(), operation_id="op-1")

    assert response.text == "from the environment"
    assert sent_key(server.requests[0]) == "env-key"


def test_it_reports_missing_credentials_as_a_model_error(server: FakeAnthropicServer) -> None:
    adapter = AnthropicModel(base_url=server.url)

    with pytest.raises(ModelError) as caught:
        adapter.complete(ask(), operation_id="op-1")

    assert "ANTHROPIC_API_KEY" in caught.value.message
    assert server.requests == []


def test_it_turns_sdk_retries_off_on_a_passed_client(server: FakeAnthropicServer) -> None:
    client = anthropic.Anthropic(api_key=API_KEY, base_url=server.url, max_retries=3)
    adapter = AnthropicModel(client=client)
    server.reply(503, error_body("api_error", "Service unavailable"), headers={"retry-after": "0"})
    server.reply_message([text_block("a retry would have got this")])

    with pytest.raises(ModelError) as caught:
        adapter.complete(ask(), operation_id="op-1")

    assert "503" in caught.value.message
    assert len(server.requests) == 1
    client.close()


def test_it_refuses_a_client_together_with_a_key() -> None:
    client = anthropic.Anthropic(api_key=API_KEY, base_url="http://127.0.0.1:9", max_retries=0)

    with pytest.raises(ValueError, match="either a client"):
        AnthropicModel(api_key=API_KEY, client=client)
    client.close()


def test_it_builds_no_client_until_first_used(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_client(*args: object, **kwargs: object) -> None:
        raise AssertionError("the SDK client was built eagerly")

    monkeypatch.setattr(anthropic, "Anthropic", no_client)

    AnthropicModel(api_key=API_KEY, base_url="http://127.0.0.1:9")
