"""Pause and resume, in process: at every kind of boundary, nothing lost, back where it was."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from pydantic import BaseModel

from runtime import (
    Agent,
    InvalidInput,
    InvalidTransition,
    ModelRetry,
    SessionBusy,
    ToolContext,
    pause,
    respond,
    resume,
    submit,
    tool,
)
from runtime.clock import frozen
from runtime.llm.scripted import ScriptedModel, call, say
from runtime.models import Event, EventKind, Interaction, Operation, Run, RunStatus
from runtime.testing import SimulatedCrash, crash_at, recover, run_until_idle
from tests.conftest import EFFECTS, make_agent, one_call


def _kinds(run_id: Any) -> list[str]:
    return list(Event.objects.filter(run_id=run_id).order_by("id").values_list("kind", flat=True))


def _snapshot(run_id: Any) -> tuple[Any, ...]:
    return (
        list(Run.objects.filter(pk=run_id).values()),
        list(Event.objects.filter(run_id=run_id).order_by("id").values_list("id", flat=True)),
        list(Operation.objects.filter(run_id=run_id).order_by("pk").values()),
    )


class PauseDuringModel:
    """A script whose first model request asks to pause its own run while it is in flight."""

    def __init__(self, turns: list[Any]) -> None:
        self.turns, self.requests = turns, 0

    def __call__(self, request: Any) -> Any:
        self.requests += 1
        if self.requests == 1:
            run = Run.objects.get(status=RunStatus.RUNNING)
            pause(run.pk, actor="alice", reason="bad prompt shipped")
        return self.turns[sum(1 for m in request.messages if m["role"] == "assistant")]


def test_it_pauses_after_the_model_request_in_flight_and_resumes_exactly(define, effects):
    script = PauseDuringModel(one_call("get_order"))
    agent = define(make_agent(script))
    run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    assert run.status == RunStatus.PAUSED
    assert run.paused_from == RunStatus.QUEUED
    assert (run.pause_requested_by, run.pause_reason) == ("alice", "bad prompt shipped")
    # The request in flight finished and was recorded; the next call did not start.
    assert list(run.operations.values_list("key", "status")) == [("step-1/model", "completed")]
    assert effects.total == 0
    assert _kinds(run.pk)[-3:] == ["pause_requested", "outcome", "paused"]
    assert run_until_idle(run.pk).status == RunStatus.PAUSED  # never claimed while paused

    resume(run.pk, actor="bob")
    run = run_until_idle(run.pk)
    assert run.status == RunStatus.COMPLETED
    assert script.requests == 2  # the first request was replayed, not asked again
    assert effects.total == 1
    resumed = Event.objects.get(run=run, kind=EventKind.RESUMED)
    assert (resumed.actor, resumed.data) == ("bob", {"status": "queued"})


class Lookup(BaseModel):
    order_id: str


class Seen(BaseModel):
    seen: str


@tool(recovery="safe")
def pausing_lookup(args: Lookup, ctx: ToolContext) -> Seen:
    """A read during which an operator pauses the run."""
    pause(ctx.run_id, actor="alice")
    EFFECTS.apply(ctx.operation_id)
    return Seen(seen=args.order_id)


def test_it_pauses_after_the_tool_call_in_flight(define, effects):
    agent = define(
        Agent(
            name="pausing",
            version="1",
            model="claude-test",
            instructions="Look it up.",
            tools=[pausing_lookup],
            llm=ScriptedModel([call(("pausing_lookup", {"order_id": "A1"}), step=1), say("ok")]),
        )
    )
    run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    assert run.status == RunStatus.PAUSED
    ops = dict(run.operations.values_list("key", "status"))
    assert ops == {"step-1/model": "completed", "step-1/tool/toolu_01_0": "completed"}
    assert effects.total == 1
    resume(run.pk, actor="alice")
    assert run_until_idle(run.pk).status == RunStatus.COMPLETED
    assert effects.total == 1  # the recorded call was replayed, never re-run


def test_a_waiting_run_pauses_at_once_and_its_answer_moves_it_only_after_resume(define, effects):
    agent = define(make_agent(one_call("refund")))
    run = run_until_idle(submit(agent.name, "refund it", actor="alice").pk)
    assert run.status == RunStatus.WAITING
    run = pause(run.pk, actor="alice", reason="checking the refunds")
    assert (run.status, run.paused_from) == (RunStatus.PAUSED, RunStatus.WAITING)
    interaction = Interaction.objects.get(run=run)
    respond(interaction.pk, {"approved": True}, actor="bob")  # still answerable
    interaction.refresh_from_db()
    assert interaction.status == "answered"
    run = run_until_idle(run.pk)
    assert run.status == RunStatus.PAUSED
    assert effects.total == 0
    run = resume(run.pk, actor="alice")
    assert run.status == RunStatus.QUEUED  # answered meanwhile: it goes on
    assert run_until_idle(run.pk).status == RunStatus.COMPLETED
    assert effects.total == 1


def test_a_waiting_run_resumes_waiting_when_nobody_answered(define):
    agent = define(make_agent(one_call("refund")))
    run = run_until_idle(submit(agent.name, "refund it", actor="alice").pk)
    pause(run.pk, actor="alice")
    run = resume(run.pk, actor="alice")
    assert run.status == RunStatus.WAITING
    assert Interaction.objects.get(run=run).status == "pending"


def test_a_paused_runs_timer_does_not_fire_until_resume(define):
    class Flaky:
        calls = 0

        def __call__(self, request: Any) -> Any:
            Flaky.calls += 1
            return RuntimeError("overloaded") if Flaky.calls == 1 else say("hi")

    policy = ModelRetry(max_attempts=3, initial_delay=10, max_delay=10, jitter=False)
    agent = define(make_agent(Flaky(), model_retry=policy))
    with frozen(dt.datetime(2026, 1, 1, tzinfo=dt.UTC)) as clock:
        run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
        due = run.next_attempt_at
        assert run.status == RunStatus.RETRY_WAIT
        run = pause(run.pk, actor="alice")
        clock.advance(60)
        assert run_until_idle(run.pk).status == RunStatus.PAUSED
        assert Flaky.calls == 1
        run = resume(run.pk, actor="alice")
        assert (run.status, run.next_attempt_at) == (RunStatus.RETRY_WAIT, due)
        assert run_until_idle(run.pk).status == RunStatus.COMPLETED
    assert Flaky.calls == 2


def test_a_blocked_run_resumes_blocked_on_the_same_operation(define, effects):
    agent = define(make_agent(one_call("charge")))
    run = submit(agent.name, "charge", actor="alice")
    with crash_at("after_intent", tool="charge"), pytest.raises(SimulatedCrash):
        recover(run.pk)
    run = recover(run.pk)
    assert run.status == RunStatus.NEEDS_ATTENTION
    pause(run.pk, actor="alice")
    run = resume(run.pk, actor="alice")
    assert (run.status, run.blocked_operation) == (
        RunStatus.NEEDS_ATTENTION,
        "step-1/tool/toolu_01_0",
    )


def test_resume_before_the_boundary_withdraws_the_pause(define, effects):
    class Withdraw(PauseDuringModel):
        def __call__(self, request: Any) -> Any:
            turn = super().__call__(request)
            if self.requests == 1:
                resume(Run.objects.get(status=RunStatus.RUNNING).pk, actor="bob")
            return turn

    agent = define(make_agent(Withdraw(one_call("get_order"))))
    run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    assert run.status == RunStatus.COMPLETED
    assert "pause_withdrawn" in _kinds(run.pk)
    assert "paused" not in _kinds(run.pk)


def test_a_pause_requested_when_the_run_stops_to_wait_takes_effect_there(define):
    agent = define(make_agent(PauseDuringModel(one_call("refund"))))
    run = run_until_idle(submit(agent.name, "refund", actor="alice").pk)
    # The boundary before asking for approval came first: paused, nothing asked yet.
    assert run.status == RunStatus.PAUSED
    assert not Interaction.objects.filter(run=run).exists()
    resume(run.pk, actor="alice")
    assert run_until_idle(run.pk).status == RunStatus.WAITING


def test_a_pause_requested_during_the_last_request_is_dropped_when_the_run_completes(define):
    agent = define(make_agent(PauseDuringModel([say("done")])))
    run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    # No intent came after the request that asked: the claim's end settles the pause.
    assert run.status == RunStatus.COMPLETED
    assert (run.pause_requested_by, run.pause_reason) == ("", "")
    dropped = Event.objects.get(run=run, kind=EventKind.PAUSE_DROPPED)
    assert dropped.data["requested_by"] == "alice"
    assert dropped.data["reason"] == "bad prompt shipped"


def test_a_paused_run_holds_its_session(define):
    agent = define(make_agent([say("hi"), say("again")]))
    run = submit(agent.name, "hi", actor="alice")
    pause(run.pk, actor="alice")
    with pytest.raises(SessionBusy):
        submit(agent.name, "more", actor="alice", session=run.session_id)


@pytest.mark.parametrize(
    ("state", "message"),
    [("completed", "only unfinished runs"), ("paused", "already paused")],
)
def test_it_refuses_to_pause_and_changes_nothing(define, state, message):
    agent = define(make_agent([say("hi")]))
    run = submit(agent.name, "hi", actor="alice")
    if state == "completed":
        run_until_idle(run.pk)
    else:
        pause(run.pk, actor="alice")
    before = _snapshot(run.pk)
    with pytest.raises(InvalidTransition, match=message):
        pause(run.pk, actor="bob")
    assert _snapshot(run.pk) == before


def test_it_refuses_to_resume_a_run_that_is_not_paused(define):
    agent = define(make_agent([say("hi")]))
    run = submit(agent.name, "hi", actor="alice")
    before = _snapshot(run.pk)
    with pytest.raises(InvalidTransition, match="not paused"):
        resume(run.pk, actor="bob")
    assert _snapshot(run.pk) == before


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"actor": " "}, "actor is required"), ({"actor": "a", "reason": 5}, "reason must be text")],
)
def test_it_checks_its_arguments_first(define, kwargs, message):
    agent = define(make_agent([say("hi")]))
    run = submit(agent.name, "hi", actor="alice")
    before = _snapshot(run.pk)
    with pytest.raises(InvalidInput, match=message):
        pause(run.pk, **kwargs)
    assert _snapshot(run.pk) == before
