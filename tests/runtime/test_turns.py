"""The turn loop: sessions, tool errors as outcomes, model mistakes, the step budget, cancel."""

from __future__ import annotations

import json

import pytest

from runtime import (
    InvalidInput,
    InvalidTransition,
    NotFound,
    SessionBusy,
    ToolContext,
    cancel,
    submit,
    tool,
)
from runtime.models import Event, EventKind, Interaction, Operation, Run, RunStatus
from runtime.testing import run_until_idle
from tests.conftest import ARGS, Lookup, OrderInfo, call, make_agent, one_call, say


def tool_results(run: Run) -> list[dict]:
    return [
        json.loads(block["content"]) | {"is_error": block["is_error"]}
        for message in run.transcript
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
    ]


def test_it_completes_with_the_final_answer_and_two_writes_per_call(define, effects):
    agent = define(make_agent(one_call("get_order")))
    run = run_until_idle(submit(agent.name, "where is A1?", actor="alice").pk)
    assert (run.status, run.output, run.steps) == (RunStatus.COMPLETED, "done", 2)
    kinds = list(Event.objects.filter(run=run).order_by("id").values_list("kind", flat=True))
    assert kinds == [
        "submitted",
        "claimed",
        "intent",
        "outcome",
        "intent",
        "outcome",
        "intent",
        "outcome",
        "completed",
    ]
    assert [m["role"] for m in run.transcript] == ["user", "assistant", "user", "assistant"]


def test_it_passes_the_operation_id_to_the_tool(define, effects):
    agent = define(make_agent(one_call("open_ticket")))
    run = run_until_idle(submit(agent.name, "ticket", actor="alice").pk)
    assert list(effects.effects) == [f"{run.pk}:step-1/tool/toolu_01_0"]


def test_it_continues_the_session_transcript(define, effects):
    agent = define(make_agent([say("first answer"), say("second answer")]))
    first = run_until_idle(submit(agent.name, "one", actor="alice").pk)
    second = run_until_idle(submit(agent.name, "two", actor="alice", session=first.session_id).pk)
    assert (second.seq, second.output) == (2, "second answer")
    request_messages = [m["content"] for m in first.transcript + second.transcript]
    assert request_messages[0] == "one" and request_messages[2] == "two"


def test_it_refuses_a_message_while_the_session_has_an_unfinished_run(define, effects):
    agent = define(make_agent(one_call("refund")))
    first = run_until_idle(submit(agent.name, "one", actor="alice").pk)
    with pytest.raises(SessionBusy, match=str(first.pk)):
        submit(agent.name, "two", actor="alice", session=first.session_id)
    assert Run.objects.count() == 1


@pytest.mark.parametrize("message", ["", "   ", "a\x00b", "x" * 20_001])
def test_it_refuses_an_unusable_message(define, message):
    agent = define(make_agent([say("hi")]))
    with pytest.raises(InvalidInput):
        submit(agent.name, message, actor="alice")
    assert (Run.objects.count(), Event.objects.count()) == (0, 1)  # only the registration


def test_it_refuses_an_unknown_agent_or_session(define):
    define(make_agent([say("hi")]))
    with pytest.raises(NotFound, match="agent 'ghost'"):
        submit("ghost", "hi", actor="alice")
    with pytest.raises(NotFound):
        submit("clerk", "hi", actor="alice", session="00000000-0000-4000-8000-000000000000")
    with pytest.raises(NotFound):
        submit("clerk", "hi", actor="alice", version="9")
    assert Run.objects.count() == 0


def test_a_tool_error_is_an_outcome_the_model_sees(define, effects):
    @tool(recovery="safe")
    def broken(args: Lookup, ctx: ToolContext) -> OrderInfo:
        """Always fails."""
        raise ConnectionError("payments API unreachable")

    agent = make_agent([call(("broken", {"order_id": "A1"}), step=1), say("sorry")])
    agent = define(type(agent)(**{**agent.__dict__, "tools": (*agent.tools, broken)}))
    run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    assert run.status == RunStatus.COMPLETED
    assert tool_results(run) == [
        {"error": "payments API unreachable", "type": "ConnectionError", "is_error": True}
    ]
    assert Operation.objects.get(run=run, name="broken").attempts == 1


def test_the_models_mistakes_come_back_to_it_without_running_anything(define, effects):
    script = [
        call(("no_such_tool", {}), ("charge", {"order_id": "A1"}), step=1),
        say("I will fix that"),
    ]
    agent = define(make_agent(script))
    run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    assert run.status == RunStatus.COMPLETED
    errors = [r["error"] for r in tool_results(run)]
    assert errors[0] == "unknown tool 'no_such_tool'"
    assert errors[1].startswith("invalid arguments for charge: amount_cents: Field required")
    assert effects.total == 0


def test_it_fails_when_the_step_budget_is_exhausted(define, effects):
    loop = [call(("get_order", ARGS["get_order"]), step=i) for i in range(1, 10)]
    agent = define(make_agent(loop, max_steps=3))
    run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    assert run.status == RunStatus.FAILED
    assert run.error == "step budget exhausted: 3 model requests without a final answer"


def test_cancel_stops_a_waiting_run_and_closes_its_interaction(define, effects):
    agent = define(make_agent(one_call("refund")))
    run = run_until_idle(submit(agent.name, "refund", actor="alice").pk)
    cancel(run.pk, actor="ops", reason="customer withdrew")
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert Interaction.objects.get().status == "cancelled"
    assert Event.objects.get(kind=EventKind.CANCELLED).data == {
        "previous_status": "waiting",
        "reason": "customer withdrew",
    }
    with pytest.raises(InvalidTransition, match="only unfinished runs"):
        cancel(run.pk, actor="ops")
    assert run_until_idle(run.pk).status == RunStatus.CANCELLED


def test_model_output_the_database_cannot_store_is_a_model_error(define, effects):
    agent = define(make_agent([say("bad\x00text")]))
    run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    assert run.status == RunStatus.FAILED
    assert "model output contains a NUL character" in run.error


def test_a_tool_result_the_database_cannot_store_is_an_error_outcome(define, effects):
    @tool(recovery="safe")
    def leaky(args: Lookup, ctx: ToolContext) -> OrderInfo:
        """Returns a NUL."""
        return OrderInfo(order_id="\x00", status="?")

    agent = make_agent([call(("leaky", {"order_id": "A1"}), step=1), say("ok")])
    agent = define(type(agent)(**{**agent.__dict__, "tools": (*agent.tools, leaky)}))
    run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    assert run.status == RunStatus.COMPLETED
    assert tool_results(run) == [
        {"error": "the result of leaky contains a NUL character", "is_error": True}
    ]
