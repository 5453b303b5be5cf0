"""Agent settings reach the model request; thinking blocks go back unchanged (S6); and the
settings that change what a run means are in the fingerprint, the others are not."""

from __future__ import annotations

import pytest

from runtime import Agent, ModelRetry, ToolDurabilityError, submit
from runtime.agents import AgentDefinitionError, spec_differences
from runtime.llm import ThinkingBlock
from runtime.models import RunStatus
from runtime.testing import SimulatedCrash, crash_at, recover, run_until_idle
from tests.runtime.edge_support import Recorder, edge_agent, reply, text, use

THOUGHT = ThinkingBlock(thinking="The customer wants the order status.", signature="EqQBCgIYAh…sig")


def test_the_agent_settings_are_passed_into_the_request(define):
    llm = Recorder(reply(text("hi")))
    agent = define(
        edge_agent(llm, max_tokens=4000, thinking_budget=2048, timeout=12.5, prompt_caching=False)
    )
    run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    request = llm.requests[0]
    assert (request.max_tokens, request.thinking_budget, request.timeout, request.cache) == (
        4000,
        2048,
        12.5,
        False,
    )


def test_s6_thinking_blocks_go_back_unchanged_while_tool_use_goes_on(define, effects):
    llm = Recorder(
        reply(THOUGHT, use("get_order"), stop="tool_use"),
        reply(text("Order A1 is paid.")),
    )
    agent = define(edge_agent(llm, max_tokens=4000, thinking_budget=2048))
    run = submit(agent.name, "A1?", actor="alice")
    with crash_at("after_outcome", tool="get_order"), pytest.raises(SimulatedCrash):
        run_until_idle(run.pk)
    run = recover(run.pk)  # the thinking block comes back from the log this time
    assert run.status == RunStatus.COMPLETED
    sent_back = llm.requests[1].messages[1]["content"][0]
    assert sent_back == {
        "type": "thinking",
        "thinking": "The customer wants the order status.",
        "signature": "EqQBCgIYAh…sig",
    }


def test_settings_validation():
    for bad, match in [
        ({"max_tokens": 0}, "max_tokens"),
        ({"thinking_budget": 1024}, "thinking_budget"),  # not below the default max_tokens
        ({"thinking_budget": 0}, "thinking_budget"),
        ({"timeout": 0}, "timeout"),
    ]:
        with pytest.raises(AgentDefinitionError, match=match):
            edge_agent(Recorder(), **bad)


def _plain(**settings) -> Agent:
    return Agent(name="fp", version="1", model="m", instructions="i", **settings)


def test_settings_at_their_defaults_leave_the_fingerprint_as_it_was():
    assert "settings" not in _plain().spec()
    assert _plain(max_tokens=1024, prompt_caching=True).fingerprint == _plain().fingerprint


def test_what_the_model_produces_or_is_shown_changes_the_fingerprint():
    base = _plain()
    for changed in (
        {"max_tokens": 2048},
        {"max_tokens": 4000, "thinking_budget": 1000},
        {"history_runs": 2},
        {"compact_history": lambda history: history[-2:]},
    ):
        assert _plain(**changed).fingerprint != base.fingerprint, changed
    parts = spec_differences(base.spec(), _plain(max_tokens=2048).spec())
    assert parts == [{"part": "settings.max_tokens", "saved": None, "current": 2048}]


def test_limits_and_transport_settings_leave_the_fingerprint_alone():
    base = _plain().fingerprint
    for changed in (
        {"max_steps": 3},
        {"model_retry": ModelRetry(max_attempts=5)},
        {"timeout": 5.0},
        {"prompt_caching": False},
    ):
        assert _plain(**changed).fingerprint == base, changed


def test_c11_the_durability_error_type_is_exported_and_shapes_the_result(define, effects):
    llm = Recorder(reply(use("notify"), stop="tool_use"), reply(text("I will check first.")))
    agent = define(edge_agent(llm))
    run = submit(agent.name, "notify", actor="alice")
    with crash_at("after_handler", tool="notify"), pytest.raises(SimulatedCrash):
        run_until_idle(run.pk)
    run = recover(run.pk)
    result = run.operations.get(key="step-1/tool/toolu_1").result
    assert set(result) == {"kind", "error", "toolName", "toolCallId"}
    error = ToolDurabilityError.from_result(result)
    assert error is not None
    assert (error.tool_name, error.tool_call_id) == ("notify", "toolu_1")
    assert error.to_result() == result
    assert ToolDurabilityError.from_result({"receipt_id": "r1"}) is None
