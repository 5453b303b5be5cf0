"""Nothing loops unbounded: crash loops (C13), attempt budgets after crashes (C14), and the
operator's "it did not run" (R4, the engine's half)."""

from __future__ import annotations

import pytest
from django.db import OperationalError

from runtime import Agent, ask_operator, faults, retry, store, submit, tool
from runtime.models import (
    AttentionReason,
    Event,
    EventKind,
    Operation,
    OperationStatus,
    Run,
    RunStatus,
)
from runtime.testing import SimulatedCrash, crash_at, expire_lease, recover, run_until_idle
from tests.conftest import Amount, Receipt
from tests.runtime.edge_support import Recorder, edge_agent, reply, text, use

SECRET = "sk-ant-api03-not-a-real-key-0123456789"


def _predicate_that_raises(args: Amount) -> bool:
    raise ValueError(f"approval rules unavailable (key {SECRET})")


@tool(recovery="manual", requires_approval=_predicate_that_raises)
def guarded_refund(args: Amount, ctx) -> Receipt:
    """Refund behind a rule that raises."""
    return Receipt(receipt_id="never")


def _raising_agent() -> Agent:
    llm = Recorder(*[reply(use("guarded_refund", args={"order_id": "A1", "amount_cents": 5}))] * 9)
    return Agent(
        name="raising",
        version="1",
        model="claude-test",
        instructions="Refund.",
        tools=[guarded_refund, ask_operator],
        llm=llm,
    )


def test_c13_an_exception_outside_any_handler_never_leaves_the_run_running(
    define, monkeypatch, caplog
):
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    agent = define(_raising_agent())
    run = submit(agent.name, "refund A1", actor="alice")
    run = run_until_idle(run.pk, limit=1)
    # One crashed claim: recorded, and the run waits to be taken again (not `running`).
    assert run.status == RunStatus.RETRY_WAIT
    assert run.crashed_claims == 1
    assert run.last_crash.startswith("ValueError: approval rules unavailable")
    assert SECRET not in run.last_crash
    assert "[redacted]" in run.last_crash

    run = run_until_idle(run.pk)
    assert run.status == RunStatus.NEEDS_ATTENTION
    assert run.attention_reason == AttentionReason.CRASH_LOOP
    assert run.attention_detail["claims"] == 3
    assert "ValueError: approval rules unavailable" in run.attention_detail["message"]
    assert SECRET not in str(run.attention_detail)
    assert Event.objects.filter(run=run, kind=EventKind.CLAIMED).count() == 3
    assert "could not record the crash" not in caplog.text  # every crash was recorded


def test_c13_the_number_of_claims_is_a_setting(define, settings):
    settings.AGENTOPS_CRASH_LOOP_CLAIMS = 5
    agent = define(_raising_agent())
    run = run_until_idle(submit(agent.name, "refund A1", actor="alice").pk)
    assert run.attention_reason == AttentionReason.CRASH_LOOP
    assert Event.objects.filter(run=run, kind=EventKind.CLAIMED).count() == 5


def test_c13_a_database_error_at_a_checkpoint_counts_as_a_crash(define, effects):
    agent = define(edge_agent(Recorder(reply(use("get_order"), stop="tool_use"))))
    run = submit(agent.name, "A1?", actor="alice")

    def failing_checkpoint(window, run_, key, name):
        if window == "after_handler":
            raise OperationalError("could not write: connection reset")

    previous, faults.handler = faults.handler, failing_checkpoint
    try:
        run = run_until_idle(run.pk, limit=1)
    finally:
        faults.handler = previous
    assert run.status == RunStatus.RETRY_WAIT
    assert run.last_crash == "OperationalError: could not write: connection reset"
    # A clean claim afterwards resets the count (get_order is safe: it runs again).
    run = run_until_idle(run.pk)
    assert run.status == RunStatus.COMPLETED
    assert run.crashed_claims == 0


def test_c13_workers_that_keep_dying_end_in_a_crash_loop(define):
    agent = define(edge_agent(Recorder(reply(text("hi")))))
    run = submit(agent.name, "hi", actor="alice")
    for _ in range(3):
        with crash_at("before_intent", tool="model"), pytest.raises(SimulatedCrash):
            recover(run.pk)
    assert Run.objects.get(pk=run.pk).crashed_claims == 3
    run = recover(run.pk)
    assert run.status == RunStatus.NEEDS_ATTENTION
    assert run.attention_reason == AttentionReason.CRASH_LOOP
    assert "lease expired" in run.attention_detail["message"]
    assert not Operation.objects.filter(run=run).exists()  # nothing was ever asked
    # The operator's retry starts a fresh count, and the run finishes.
    retry(run.pk, actor="ops")
    run = run_until_idle(run.pk)
    assert run.status == RunStatus.COMPLETED
    assert run.crashed_claims == 0


@pytest.mark.parametrize("tool_name", ["get_order", "open_ticket"])
def test_c14_a_call_rerun_after_crashes_stops_at_its_budget(define, effects, settings, tool_name):
    settings.AGENTOPS_CRASH_LOOP_CLAIMS = 50  # the operation's budget speaks first
    agent = define(edge_agent(Recorder(reply(use(tool_name), stop="tool_use"), reply(text("ok")))))
    run = submit(agent.name, "go", actor="alice")
    for _ in range(3):
        with crash_at("in_handler", tool=tool_name), pytest.raises(SimulatedCrash):
            recover(run.pk)
    run = recover(run.pk)
    assert run.status == RunStatus.NEEDS_ATTENTION
    assert run.attention_reason == AttentionReason.ATTEMPTS_EXHAUSTED
    key = "step-1/tool/toolu_1"
    assert run.blocked_operation == key
    assert run.attention_detail["name"] == tool_name
    assert run.attention_detail["operation_id"] == f"{run.pk}:{key}"
    calls = effects.calls[f"{run.pk}:{key}"]
    assert calls == 3  # three attempts, each interrupted; no fourth
    # A person's retry gives the operation a fresh budget.
    retry(run.pk, actor="ops")
    run = run_until_idle(run.pk)
    assert run.status == RunStatus.COMPLETED
    assert effects.calls[f"{run.pk}:{key}"] == 4


def test_c14_the_budget_is_a_setting(define, effects, settings):
    settings.AGENTOPS_CRASH_LOOP_CLAIMS = 50
    settings.AGENTOPS_OPERATION_ATTEMPTS = 1
    agent = define(edge_agent(Recorder(reply(use("get_order"), stop="tool_use"))))
    run = submit(agent.name, "go", actor="alice")
    with crash_at("after_intent", tool="get_order"), pytest.raises(SimulatedCrash):
        run_until_idle(run.pk)
    run = recover(run.pk)
    assert run.attention_reason == AttentionReason.ATTEMPTS_EXHAUSTED
    assert effects.total == 0


def test_r4_an_operation_verified_as_not_run_runs_again_with_the_same_id(define, effects):
    agent = define(edge_agent(Recorder(reply(use("charge"), stop="tool_use"), reply(text("ok")))))
    run = submit(agent.name, "charge A1", actor="alice")
    with crash_at("after_intent", tool="charge"), pytest.raises(SimulatedCrash):
        run_until_idle(run.pk)
    run = recover(run.pk)
    key = "step-1/tool/toolu_1"
    assert run.blocked_operation == key  # manual: blocked
    # resolve's side (the verbs): the operator verified that it did not happen, run it again.
    Operation.objects.filter(run=run, key=key).update(status=OperationStatus.NOT_RUN)
    Run.objects.filter(pk=run.pk).update(
        status=RunStatus.QUEUED, blocked_operation="", attention_reason="", attention_detail={}
    )
    run = run_until_idle(run.pk)
    assert run.status == RunStatus.COMPLETED
    op = Operation.objects.get(run=run, key=key)
    assert op.status == OperationStatus.COMPLETED
    assert op.attempts == 2
    assert effects.effects == {f"{run.pk}:{key}": 1}  # once, under the same operation id
    rerun = Event.objects.filter(run=run, kind=EventKind.INTENT, operation_key=key).last()
    assert rerun.data["rerun"] == "an operator verified that it did not run"


def test_c13_a_lost_lease_mid_claim_is_not_recorded_as_a_crash(define, effects):
    """A takeover is the new owner's business: the old worker writes nothing, not even a crash."""
    llm = Recorder(reply(use("get_order"), stop="tool_use"), reply(text("ok")))
    agent = define(edge_agent(llm))
    run = submit(agent.name, "go", actor="alice")

    def taken_over(window, run_, key, name):
        if window == "after_intent" and name == "get_order":
            expire_lease(run_.pk)
            store.claim(run_.pk, "another-worker")

    previous, faults.handler = faults.handler, taken_over
    try:
        run_until_idle(run.pk, limit=1)
    finally:
        faults.handler = previous
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    assert run.lease_owner == "another-worker"
    # What the takeover noted about the worker it replaced; the old worker wrote no crash.
    assert run.last_crash == (
        "the worker test-worker lost the run: its lease expired (it died or stalled)"
    )
    assert run.crashed_claims == 2  # the takeover's claim and the old one: neither ended yet
