"""Reconciliation: an operator supplies the verified result of an uncertain operation."""

from __future__ import annotations

import datetime as dt

import pytest

from runtime import InvalidInput, NotBlocked, NotFound, resolve, submit
from runtime.clock import frozen
from runtime.models import Event, EventKind, Operation, OperationStatus, Run, RunStatus
from runtime.testing import SimulatedCrash, crash_at, recover
from tests.conftest import TOOLS, make_agent, one_call

KEY = "step-1/tool/toolu_01_0"


def blocked_run(define, effects) -> Run:
    agent = define(make_agent(one_call("charge")))
    run = submit(agent.name, "charge A1", actor="alice")
    with crash_at("after_handler", tool="charge"), pytest.raises(SimulatedCrash):
        recover(run.pk)
    run = recover(run.pk)
    assert run.status == RunStatus.NEEDS_ATTENTION
    assert effects.total == 1
    return run


def unchanged(run: Run) -> tuple:
    run.refresh_from_db()
    op = Operation.objects.get(run=run, key=KEY)
    return (run.status, run.blocked_operation, op.status, op.result, Event.objects.count())


def test_it_continues_with_the_verified_result_without_calling_the_tool_again(define, effects):
    run = blocked_run(define, effects)
    operation_id = f"{run.pk}:{KEY}"
    found = TOOLS["charge"].look_up(operation_id)
    assert found == {"receipt_id": effects.receipts[operation_id]}
    resolve(run.pk, KEY, found, evidence="receipt rcpt-1 in the payments console", actor="rita")
    run = recover(run.pk)
    assert run.status == RunStatus.COMPLETED
    assert effects.total == 1
    assert sum(effects.calls.values()) == 1
    op = Operation.objects.get(run=run, key=KEY)
    assert op.status == OperationStatus.COMPLETED
    assert op.result == found
    event = Event.objects.get(kind=EventKind.OPERATION_RESOLVED)
    assert event.actor == "rita"
    assert event.data["evidence"] == "receipt rcpt-1 in the payments console"
    assert event.data["operation_id"] == operation_id


def test_it_refuses_a_result_that_fails_the_output_schema(define, effects):
    run = blocked_run(define, effects)
    before = unchanged(run)
    with pytest.raises(InvalidInput, match="output schema") as error:
        resolve(run.pk, KEY, {"receipt": 42}, evidence="checked", actor="rita")
    assert error.value.errors
    assert unchanged(run) == before


@pytest.mark.parametrize("evidence", ["", "   ", "nul\x00"])
def test_it_requires_evidence(define, effects, evidence):
    run = blocked_run(define, effects)
    before = unchanged(run)
    with pytest.raises(InvalidInput):
        resolve(run.pk, KEY, {"receipt_id": "rcpt-1"}, evidence=evidence, actor="rita")
    assert unchanged(run) == before


def test_it_refuses_an_operation_the_run_is_not_blocked_on(define, effects):
    run = blocked_run(define, effects)
    before = unchanged(run)
    with pytest.raises(NotBlocked, match="blocked on step-1/tool/toolu_01_0"):
        resolve(run.pk, "step-1/model", {"receipt_id": "x"}, evidence="e", actor="rita")
    assert unchanged(run) == before


def test_it_refuses_a_run_that_is_not_blocked(define, effects):
    agent = define(make_agent(one_call("get_order")))
    run = recover(submit(agent.name, "hi", actor="alice").pk)
    with pytest.raises(NotBlocked, match="completed"):
        resolve(run.pk, KEY, {"receipt_id": "x"}, evidence="e", actor="rita")


def test_it_refuses_malformed_json_results(define, effects):
    run = blocked_run(define, effects)
    before = unchanged(run)
    for bad in ({"receipt_id": float("nan")}, {"receipt_id": "a\x00"}, {"x": [[[[1]]]] * 10**5}):
        with pytest.raises(InvalidInput):
            resolve(run.pk, KEY, bad, evidence="checked", actor="rita")
    assert unchanged(run) == before


def test_it_says_an_unknown_run_does_not_exist(db):
    with pytest.raises(NotFound):
        resolve("00000000-0000-4000-8000-000000000000", KEY, {}, evidence="e", actor="rita")


def test_a_second_resolve_is_refused(define, effects):
    run = blocked_run(define, effects)
    resolve(run.pk, KEY, {"receipt_id": "rcpt-1"}, evidence="checked", actor="rita")
    with pytest.raises(NotBlocked):
        resolve(run.pk, KEY, {"receipt_id": "rcpt-2"}, evidence="checked", actor="sam")
    assert Operation.objects.get(run=run, key=KEY).result == {"receipt_id": "rcpt-1"}


def test_it_records_that_the_call_did_not_happen_and_queues_it_to_run_again(define, effects):
    run = blocked_run(define, effects)
    op = resolve(
        run.pk,
        KEY,
        evidence="no charge for this operation id in the payments console",
        actor="rita",
        outcome="not_run_again",
    )
    assert op.status == OperationStatus.NOT_RUN
    assert op.result is None
    run.refresh_from_db()
    assert (run.status, run.blocked_operation, run.attention_reason) == (RunStatus.QUEUED, "", "")
    event = Event.objects.get(kind=EventKind.OPERATION_RESOLVED)
    assert event.actor == "rita"
    assert event.operation_key == KEY
    assert event.data["outcome"] == "not_run_again"
    assert event.data["evidence"] == "no charge for this operation id in the payments console"
    assert event.data["operation_id"] == f"{run.pk}:{KEY}"
    assert "result" not in event.data
    assert effects.total == 1  # nothing ran from the verb itself


def test_it_tells_the_model_a_call_did_not_happen_with_the_evidence(define, effects):
    run = blocked_run(define, effects)
    resolve(
        run.pk, KEY, evidence="ledger shows no charge", actor="rita", outcome="not_run_tell_model"
    )
    op = Operation.objects.get(run=run, key=KEY)
    assert (op.status, op.is_error) == (OperationStatus.COMPLETED, True)
    assert op.result["kind"] == "tool-not-run"
    assert "did not happen" in op.result["error"]
    assert "ledger shows no charge" in op.result["error"]
    run = recover(run.pk)
    assert run.status == RunStatus.COMPLETED
    assert effects.total == 1  # not run again
    # The model's next request carried the error result for that call.
    seen = [
        block
        for message in run.transcript
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
    assert len(seen) == 1
    assert seen[0]["tool_use_id"] == "toolu_01_0"
    assert seen[0]["is_error"] is True
    assert "ledger shows no charge" in str(seen[0]["content"])
    event = Event.objects.get(kind=EventKind.OPERATION_RESOLVED)
    assert (event.actor, event.data["outcome"]) == ("rita", "not_run_tell_model")
    assert event.data["result"] == op.result


@pytest.mark.parametrize(
    ("outcome", "how"),
    [
        ("result", "with a verified result"),
        ("not_run_again", "as not run, to run once more"),
        ("not_run_tell_model", "as not run, telling the model"),
    ],
)
def test_a_second_resolve_names_who_settled_it_and_when(define, effects, outcome, how):
    run = blocked_run(define, effects)
    result = {"receipt_id": "rcpt-1"} if outcome == "result" else None
    with frozen(dt.datetime(2026, 3, 1, 9, 30, tzinfo=dt.UTC)):
        resolve(run.pk, KEY, result, evidence="checked", actor="rita", outcome=outcome)
    before = unchanged(run)
    for second in ("result", "not_run_again", "not_run_tell_model"):
        again = {"receipt_id": "rcpt-2"} if second == "result" else None
        with pytest.raises(NotBlocked) as error:
            resolve(run.pk, KEY, again, evidence="me too", actor="sam", outcome=second)
        assert error.value.message == (
            f"{KEY} of run {run.pk} was already resolved {how} by rita at 2026-03-01 09:30:00 UTC"
        )
    assert unchanged(run) == before
