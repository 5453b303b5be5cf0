"""A replayed request is compared with the fresh one exactly, on both databases, for every JSON
value (V4): what is hashed and shown is what the database gives back."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any

import pytest
from django.test import override_settings
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from runtime import Agent, ToolContext, jsonvalues, submit, tool
from runtime.agents import ListDigest, digest
from runtime.errors import InvalidInput
from runtime.jsonvalues import checked, normalized
from runtime.llm import (
    ModelResponse,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
)
from runtime.models import EventKind, Operation, RunStatus
from runtime.testing import SimulatedCrash, crash_at, recover, run_until_idle
from tests.runtime.edge_support import Recorder, reply, text, use

# Every JSON value a tool or a model may produce that both databases can store.
numbers = st.one_of(
    st.integers(min_value=-(2**63) + 1, max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1e20, -0.0, 0.0, 1.0, 1.5e-07, 5e-324, 1.7976931348623157e308, 1e16, 2.5]),
)
strings = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
documents = st.recursive(
    st.one_of(st.none(), st.booleans(), numbers, strings),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(strings, inner, max_size=4)
    ),
    max_leaves=12,
)


def _exact(value: Any) -> str:
    # Type-exact: 1, 1.0 and True print differently, as they hash differently.
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(value=documents)
def test_v4_every_json_value_reads_back_exactly_as_normalized(value, stored_operation):
    # Inside an object, as every stored result and input is (a bare None would be SQL NULL).
    canonical = normalized({"value": value})
    assert _exact(normalized(canonical)) == _exact(canonical)  # a fixed point
    Operation.objects.filter(pk=stored_operation.pk).update(result=canonical, input=canonical)
    back = Operation.objects.values_list("result", "input").get(pk=stored_operation.pk)
    assert _exact(back[0]) == _exact(canonical)
    assert digest(back[1]) == digest(canonical)


# Anything json.dumps accepts: NaN, huge integers, lone surrogates, str and int subclasses.
anything = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(),
        st.sampled_from(list(EventKind)),
        st.sampled_from(list(HTTPStatus)),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.one_of(st.text(), st.sampled_from(list(EventKind))), inner, max_size=4),
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(value=anything)
@example(value={"b": [1e16, -0.0, float("nan"), float("inf")], "a": "\x00\u2028\ud800é😀"})
def test_v4_the_encoders_built_once_write_what_json_dumps_writes(value):
    """A digest's canonical form, a stored value and a result shown to the model: the same text
    as json.dumps with the same options (a digest logged before keeps matching)."""
    assert jsonvalues.dumps(value) == json.dumps(value)
    assert jsonvalues.canonical(value) == json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    assert jsonvalues.shown(value) == json.dumps(value, sort_keys=True, ensure_ascii=False)


def test_v4_the_encoders_built_once_refuse_what_json_dumps_refuses():
    for encode in (jsonvalues.dumps, jsonvalues.canonical, jsonvalues.shown):
        with pytest.raises(TypeError, match="Object of type bytes is not JSON serializable"):
            encode({"a": [b"raw"]})
        with pytest.raises(TypeError, match="keys must be str, int, float, bool or None"):
            encode({("a",): 1})


names = strings.filter(lambda name: 0 < len(name) <= 100)
blocks = st.one_of(
    st.builds(TextBlock, text=strings),
    st.builds(
        ToolUseBlock, id=names, name=names, input=st.dictionaries(strings, documents, max_size=3)
    ),
    st.builds(ThinkingBlock, thinking=strings, signature=strings),
    st.builds(RedactedThinkingBlock, data=strings),
)
responses = st.builds(
    ModelResponse,
    content=st.lists(blocks, max_size=4),
    stop_reason=st.sampled_from([None, "end_turn", "tool_use", "max_tokens", "pause_turn"]),
    usage=st.builds(Usage, input_tokens=st.integers(0, 10**9), output_tokens=st.integers(0, 10**9)),
    model=strings,
)


@settings(max_examples=150, deadline=None)
@given(response=responses)
def test_v4_a_model_response_is_stored_as_the_engine_validated_it(response):
    """The engine stores the checked dump it validated its response from, not a second dump of
    that response: the two are the same JSON, type for type, for every response."""
    dumped = checked(response.model_dump(mode="json"), what="model output")
    again = ModelResponse.model_validate(dumped).model_dump(mode="json")
    assert _exact(again) == _exact(dumped)
    assert _exact(dumped["usage"]) == _exact(response.usage.model_dump())


@settings(max_examples=150, deadline=None)
@given(value=documents)
def test_v4_the_engine_checks_and_normalizes_in_one_walk(value):
    # What the engine stores of a result or a model's output: as normalized gives it.
    assert _exact(checked({"value": value})) == _exact(normalized({"value": value}))


def _texts(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from _texts(item)


# Any text, ASCII or not, NULs and lone surrogates included, as keys and values.
any_text = st.text(st.sampled_from(["a", "\x00", "é", "\ud800", "\udfff", "\U0001f600", "\x1f"]))
texts = st.recursive(
    any_text,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(any_text, inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(value=texts)
def test_v4_text_is_refused_exactly_when_a_database_cannot_store_it(value):
    storable = all(
        "\x00" not in text and not any("\ud800" <= c <= "\udfff" for c in text)
        for text in _texts(value)
    )
    if storable:
        assert checked(value) == value
    else:
        with pytest.raises(InvalidInput, match=r"NUL character|unpaired surrogate"):
            checked(value)


@settings(max_examples=300, deadline=None)
@given(value=documents, limit=st.integers(0, 400))
@example(value="\x01" * 20, limit=100)  # escaped: 6 bytes a character
@example(value={"\U0001f600" * 10: ["é" * 30, '"\\' * 10]}, limit=120)  # 4, 2, 2 bytes
@example(value=[-1.7976931348623157e308, -(2**63) + 1, None, False], limit=60)
def test_v4_a_value_is_refused_as_too_large_exactly_when_its_json_is(value, limit):
    # The walk's bound spares the encoding of a value known to be small: it must never spare a
    # value that is too large, nor refuse one that is not.
    exact = len(json.dumps(value, ensure_ascii=False).encode("utf-8"))
    with override_settings(AGENTOPS_MAX_JSON_BYTES=limit):
        if exact > limit:
            with pytest.raises(InvalidInput, match=f"larger than {limit} bytes"):
                checked(value)
        else:
            assert _exact(checked(value)) == _exact(normalized(value))


# How a run's messages change between two model requests: a message appended, the last one
# replaced (transcript.append merges a message into the last of its role), or the whole list
# replaced from some index on (a fork's edit). As long as a list.
changes = st.lists(
    st.one_of(
        st.tuples(st.just("append"), documents),
        st.tuples(st.just("replace last"), documents),
        st.tuples(st.just("replace from"), st.integers(0, 6), st.lists(documents, max_size=3)),
    ),
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(changes=changes)
def test_v4_a_growing_lists_digest_is_the_whole_lists(changes):
    # A model request's saved input hashes its messages; the digest, kept as they grow, must be
    # the one a replay computes from the whole list at once, or every replay is a mismatch.
    messages: list[Any] = []
    kept = ListDigest()
    assert kept.of(messages) == digest(messages) == digest([])
    for change in changes:
        if change[0] == "append":
            messages.append(change[1])
        elif change[0] == "replace last" and messages:
            messages[-1] = change[1]
        elif change[0] == "replace from":
            messages[change[1] :] = change[2]
        assert kept.of(messages) == digest(messages)
    assert ListDigest().of(messages) == digest(messages)


@pytest.fixture
def stored_operation(define):
    llm = Recorder(reply(text("hi")))
    agent = define(Agent(name="json", version="1", model="claude-test", instructions="", llm=llm))
    run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    return Operation.objects.get(run=run, key="step-1/model")


class Measure(BaseModel):
    value: float
    values: list[float]


@tool(recovery="safe")
def measure(args: Measure, ctx: ToolContext) -> Measure:
    """Echo the numbers back."""
    return args


NUMBERS = {"value": 1e20, "values": [-0.0, 1.5e-07, 1.0, 1.7976931348623157e308, 123456.789]}


def test_v4_a_run_with_numbers_jsonb_rewrites_replays_without_a_mismatch(define):
    llm = Recorder(
        reply(use("measure", args=NUMBERS), stop="tool_use"),
        reply(use("measure", "toolu_2", args=NUMBERS), stop="tool_use"),
        reply(text("measured")),
    )
    agent = define(
        Agent(
            name="json", version="1", model="claude-test", instructions="", tools=[measure], llm=llm
        )
    )
    run = submit(agent.name, "measure", actor="alice")
    # Die after the second tool's outcome: the replay rebuilds both requests from the log.
    with crash_at("after_outcome", tool="measure", times=2), pytest.raises(SimulatedCrash):
        run_until_idle(run.pk)
    with crash_at("after_outcome", tool="measure"), pytest.raises(SimulatedCrash):
        recover(run.pk)
    run = recover(run.pk)
    assert run.attention_reason == ""
    assert run.status == RunStatus.COMPLETED
    assert run.output == "measured"
    # The model was shown the same numbers on the first pass as the log gives back.
    shown = llm.requests[1].messages[-1]["content"][0]["content"]
    assert json.loads(shown) == normalized(NUMBERS)
