"""Reconciliation: an operator supplies the verified result of an uncertain operation."""

from __future__ import annotations

import pytest

from runtime import InvalidInput, NotBlocked, NotFound, resolve, submit
from runtime.models import Event, Operation, OperationStatus, Run, RunStatus
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
    event = Event.objects.get(kind="operation_resolved")
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
