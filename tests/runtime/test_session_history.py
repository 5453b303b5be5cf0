"""A session's later run sees what its earlier runs did, failed and cancelled ones included (S4)."""

from __future__ import annotations

import json

import pytest

from runtime import cancel, submit
from runtime.agents import AgentDefinitionError
from runtime.models import RunStatus
from runtime.testing import SimulatedCrash, crash_at, recover, run_until_idle
from tests.runtime.edge_support import (
    Recorder,
    assert_valid_messages,
    edge_agent,
    reply,
    text,
    use,
)


def _results(messages) -> list[dict]:
    return [
        json.loads(block["content"])
        for message in messages
        if isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] == "tool_result"
    ]


def _texts(messages) -> str:
    return " ".join(
        block["text"] if isinstance(block, dict) else block
        for message in messages
        for block in (
            message["content"] if isinstance(message["content"], list) else [message["content"]]
        )
        if isinstance(block, str) or block["type"] == "text"
    )


def test_s4_a_later_run_sees_the_charge_of_a_run_that_hit_its_step_budget(define, effects):
    llm = Recorder(reply(use("charge"), stop="tool_use"), reply(text("Nothing new.")))
    agent = define(edge_agent(llm, max_steps=1))
    first = run_until_idle(submit(agent.name, "charge A1", actor="alice").pk)
    assert first.status == RunStatus.FAILED
    assert effects.total == 1

    second = run_until_idle(
        submit(agent.name, "did you charge me?", actor="alice", session=first.session_id).pk
    )
    sent = llm.requests[1].messages
    assert_valid_messages(sent)
    assert sent[1]["content"][0]["name"] == "charge"
    receipt = next(iter(effects.receipts.values()))
    assert {"receipt_id": receipt} in _results(sent)
    assert "it failed: step budget exhausted" in _texts(sent)
    assert second.status == RunStatus.COMPLETED


def test_s4_a_cancelled_run_shows_its_unfinished_calls_answered(define, effects):
    """Cancelled while blocked on a call whose outcome is unknown, before the next call ran."""
    llm = Recorder(
        reply(use("charge", "toolu_a"), use("refund", "toolu_b"), stop="tool_use"),
        reply(text("Let me check the charge first.")),
    )
    agent = define(edge_agent(llm))
    first = submit(agent.name, "charge then refund", actor="alice")
    with crash_at("after_handler", tool="charge"), pytest.raises(SimulatedCrash):
        run_until_idle(first.pk)
    assert recover(first.pk).status == RunStatus.NEEDS_ATTENTION
    cancel(first.pk, actor="ops", reason="customer called")

    run_until_idle(submit(agent.name, "status?", actor="alice", session=first.session_id).pk)
    sent = llm.requests[1].messages
    assert_valid_messages(sent)
    charge, refund = _results(sent)
    assert charge["kind"] == "tool-durability-error"  # it may have run: the model must check
    assert charge["toolName"] == "charge"
    assert refund == {"error": "not run: the run was cancelled before this call ran"}
    assert "an operator cancelled it: customer called" in _texts(sent)


def test_s4_history_runs_bounds_how_many_earlier_runs_are_sent(define):
    llm = Recorder(*[reply(text(f"answer {i}")) for i in range(4)])
    agent = define(edge_agent(llm, history_runs=1))
    session = None
    for i in range(3):
        run = run_until_idle(submit(agent.name, f"question {i}", actor="alice", session=session).pk)
        session = run.session_id
    sent = llm.requests[2].messages
    assert_valid_messages(sent)
    assert [m["content"] for m in sent] == [
        "question 1",
        [{"type": "text", "text": "answer 1"}],
        "question 2",
    ]


def test_s4_compact_history_replaces_what_is_sent(define):
    def summary(history):
        return [{"role": "user", "content": f"(summary of {len(history)} earlier messages)"}]

    llm = Recorder(reply(text("first")), reply(text("second")))
    agent = define(edge_agent(llm, compact_history=summary))
    first = run_until_idle(submit(agent.name, "one", actor="alice").pk)
    run_until_idle(submit(agent.name, "two", actor="alice", session=first.session_id).pk)
    assert llm.requests[1].messages == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "(summary of 2 earlier messages)"},
                {"type": "text", "text": "two"},
            ],
        }
    ]


def test_s4_history_bounds_are_validated_at_definition():
    with pytest.raises(AgentDefinitionError, match="history_runs"):
        edge_agent(Recorder(), history_runs=-1)
    with pytest.raises(AgentDefinitionError, match="compact_history"):
        edge_agent(Recorder(), compact_history="summarize")
