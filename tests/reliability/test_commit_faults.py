"""Database faults at commit points: the write landed, but its caller saw an error.

A connection that drops after the server committed (or a commit whose acknowledgement is lost)
leaves the caller with an exception for a write that is in the database. Each test makes that
happen at one commit point (the intent, the outcome, the run's last transition, the claim, and
the respond/resolve/retry/cancel verbs), lets the caller fail as it would, then does what the
system does next (the broker redelivers, the lease expires, the operator clicks again) and
checks that nothing was written twice and no effect happened twice. Real commits: these tests
run outside the test transaction, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import OperationalError, connection

from runtime import (
    InteractionConflict,
    InvalidTransition,
    NotBlocked,
    RetryRejected,
    cancel,
    engine,
    resolve,
    respond,
    retry,
    store,
    submit,
)
from runtime.llm import ModelRequest
from runtime.llm.scripted import assistant_turns
from runtime.models import Event, Interaction, Operation, OperationStatus, Run, RunStatus
from runtime.testing import SimulatedCrash, crash_at, expire_lease, recover, run_until_idle
from tests.conftest import make_agent, one_call, say

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "step-1/tool/toolu_01_0"
POLICY_TOOLS = {"manual": "charge", "safe": "get_order", "idempotent": "open_ticket"}
POLICY_TOOLS["report"] = "notify"


class LostAcknowledgement(OperationalError):
    """The server committed; the client saw its connection drop before the answer came."""


def _drop() -> None:
    # A dropped connection, as the caller finds it. (SQLite: only its error, since closing an
    # in-memory test database would delete it.)
    if connection.vendor == "postgresql":
        connection.close()
    raise LostAcknowledgement("server closed the connection unexpectedly (after the commit)")


@contextmanager
def failing_after(
    name: str, when: Callable[..., bool] = lambda *a, **k: True
) -> Iterator[list[Any]]:
    """`runtime.store.<name>` commits its write, then raises as if the connection dropped.

    Once, on the first call for which `when(*args, **kwargs)` holds; yields what it returned.
    """
    real = getattr(store, name)
    landed: list[Any] = []

    def write(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        if not landed and when(*args, **kwargs):
            landed.append(result)
            _drop()
        return result

    setattr(store, name, write)
    try:
        yield landed
    finally:
        setattr(store, name, real)


@contextmanager
def failing_commit() -> Iterator[None]:
    """The next transaction commit of this connection lands, and then its caller gets an error."""
    real = connection.commit
    fired: list[bool] = []

    def commit() -> None:
        real()
        if not fired:
            fired.append(True)
            _drop()

    connection.commit = commit  # type: ignore[method-assign]
    try:
        yield
        assert fired, "no transaction committed inside the block"
    finally:
        del connection.commit


def events(run: Run, kind: str, key: str | None = None) -> int:
    found = Event.objects.filter(run=run, kind=kind)
    return (found.filter(operation_key=key) if key is not None else found).count()


def advance_crashes(run: Run) -> None:
    """A worker's delivery that meets the injected error. The engine records it as a crashed
    claim and lets the run go (C13): the next claim goes through recovery."""
    assert engine.advance(run.pk, owner="worker-1")
    run.refresh_from_db()
    assert run.status == RunStatus.RETRY_WAIT
    assert run.crashed_claims == 1
    assert run.last_crash.startswith("LostAcknowledgement: server closed the connection")


@pytest.mark.parametrize("policy", POLICY_TOOLS)
def test_an_intent_that_landed_though_its_write_failed_is_written_once(define, effects, policy):
    tool = POLICY_TOOLS[policy]
    agent = define(make_agent(one_call(tool)))
    run = submit(agent.name, "go", actor="alice")
    with failing_after("write_intent", lambda *a, **k: k.get("name") == tool) as landed:
        advance_crashes(run)
    assert landed
    op = Operation.objects.get(run=run, key=KEY)
    assert (op.status, op.attempts) == (OperationStatus.STARTED, 1)
    assert effects.calls[op.operation_id] == 0  # the caller stopped: the handler never ran
    run = recover(run.pk)  # the next delivery takes it over
    op.refresh_from_db()
    assert Operation.objects.filter(run=run, key=KEY).count() == 1
    if policy in ("manual", "report"):
        # Recovery sees an intent without an outcome: the policy decides, nothing runs again.
        assert events(run, "intent", KEY) == 1
        assert effects.calls[op.operation_id] == 0
        expected = RunStatus.NEEDS_ATTENTION if policy == "manual" else RunStatus.COMPLETED
        assert run.status == expected
    else:
        # safe and idempotent run the call (for the first time) on the same row and op id.
        assert (op.attempts, events(run, "intent", KEY)) == (2, 2)
        assert effects.effects[op.operation_id] == 1
        assert run.status == RunStatus.COMPLETED


def test_a_model_intent_that_landed_though_its_write_failed_is_written_once(define, effects):
    agent = define(make_agent(one_call("get_order")))
    run = submit(agent.name, "go", actor="alice")
    with failing_after("write_intent", lambda *a, **k: k.get("kind") == "model"):
        advance_crashes(run)
    run = recover(run.pk)
    assert run.status == RunStatus.COMPLETED
    model_ops = Operation.objects.filter(run=run, key="step-1/model")
    assert model_ops.count() == 1
    assert model_ops.get().attempts == 2  # an interrupted model request counts as an attempt


@pytest.mark.parametrize("policy", POLICY_TOOLS)
def test_an_outcome_that_landed_though_its_write_failed_is_never_repeated(define, effects, policy):
    tool = POLICY_TOOLS[policy]
    agent = define(make_agent(one_call(tool)))
    run = submit(agent.name, "go", actor="alice")
    with failing_after("write_outcome", lambda run, op, **k: op.name == tool) as landed:
        advance_crashes(run)
    assert landed
    op = Operation.objects.get(run=run, key=KEY)
    assert op.status == OperationStatus.COMPLETED
    assert effects.effects[op.operation_id] == 1
    run = recover(run.pk)
    assert run.status == RunStatus.COMPLETED
    assert effects.calls[op.operation_id] == 1  # replayed from the log, never called again
    assert events(run, "intent", KEY) == 1
    assert events(run, "outcome", KEY) == 1
    assert Operation.objects.filter(run=run).count() == 3  # model, tool, model


def test_a_final_transition_that_landed_though_its_write_failed_is_final(define, effects):
    agent = define(make_agent(one_call("charge")))
    run = submit(agent.name, "go", actor="alice")
    with failing_after("transition", lambda run, status, kind, **k: kind == "completed"):
        # The crash cannot be recorded: the run is no longer this claim's (it completed).
        assert engine.advance(run.pk, owner="worker-1")
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    for owner in ("worker-2", "worker-3"):  # redeliveries, before and after the lease
        expire_lease(run.pk)
        assert not engine.advance(run.pk, owner=owner)
    assert events(run, "completed") == 1
    assert effects.total == 1


def test_a_claim_that_landed_though_its_write_failed_is_taken_over(define, effects):
    agent = define(make_agent(one_call("charge")))
    run = submit(agent.name, "go", actor="alice")
    with failing_after("claim"), pytest.raises(LostAcknowledgement):
        engine.advance(run.pk, owner="worker-1")
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING  # held by a worker that does not know it
    assert not engine.advance(run.pk, owner="worker-2")
    run = recover(run.pk)
    assert run.status == RunStatus.COMPLETED
    assert events(run, "lease_expired") == 1
    assert effects.total == 1


@pytest.fixture
def waiting(define, effects) -> Interaction:
    agent = define(make_agent(one_call("refund")))
    run = run_until_idle(submit(agent.name, "refund A1", actor="alice").pk)
    return Interaction.objects.get(run=run)


def test_a_response_that_landed_though_its_commit_failed_is_applied_once(waiting, effects):
    with failing_commit(), pytest.raises(LostAcknowledgement):
        respond(waiting.pk, {"approved": True}, actor="bob")
    waiting.refresh_from_db()
    run = waiting.run
    run.refresh_from_db()
    assert (waiting.status, waiting.responded_by) == ("answered", "bob")
    assert run.status == RunStatus.QUEUED
    # Bob saw an error and clicks Approve again: harmless. Carol's rejection now conflicts.
    assert respond(waiting.pk, {"approved": True}, actor="bob").status == "answered"
    with pytest.raises(InteractionConflict, match="approved by bob"):
        respond(waiting.pk, {"approved": False, "reason": "no"}, actor="carol")
    assert events(run, "approval_granted") == 1
    assert events(run, "approval_rejected") == 0
    run = run_until_idle(run.pk)
    assert run.status == RunStatus.COMPLETED
    assert effects.effects[f"{run.pk}:{waiting.operation_key}"] == 1
    assert effects.total == 1


@pytest.fixture
def blocked(define, effects) -> Run:
    agent = define(make_agent(one_call("charge")))
    run = submit(agent.name, "charge", actor="alice")
    with crash_at("after_handler", tool="charge"), pytest.raises(SimulatedCrash):
        run_until_idle(run.pk)
    run = recover(run.pk)
    assert run.status == RunStatus.NEEDS_ATTENTION
    return run


def test_a_resolve_that_landed_though_its_commit_failed_is_applied_once(blocked, effects):
    result = {"receipt_id": effects.receipts[f"{blocked.pk}:{KEY}"]}
    with failing_commit(), pytest.raises(LostAcknowledgement):
        resolve(blocked.pk, KEY, result, evidence="ledger line 7", actor="rex")
    blocked.refresh_from_db()
    assert blocked.status == RunStatus.QUEUED
    with pytest.raises(NotBlocked):  # the operator tries again: refused, nothing written
        resolve(blocked.pk, KEY, result, evidence="ledger line 7", actor="rex")
    assert events(blocked, "operation_resolved") == 1
    run = run_until_idle(blocked.pk)
    assert run.status == RunStatus.COMPLETED
    assert effects.total == 1  # the charge happened once, before the crash
    assert Operation.objects.get(run=run, key=KEY).result == result


def test_a_cancel_that_landed_though_its_commit_failed_is_applied_once(blocked, effects):
    with failing_commit(), pytest.raises(LostAcknowledgement):
        cancel(blocked.pk, actor="olga", reason="customer withdrew")
    with pytest.raises(InvalidTransition):
        cancel(blocked.pk, actor="olga", reason="customer withdrew")
    blocked.refresh_from_db()
    assert blocked.status == RunStatus.CANCELLED
    assert events(blocked, "cancelled") == 1
    assert not engine.advance(blocked.pk, owner="worker-2")
    assert effects.total == 1


def test_a_retry_that_landed_though_its_commit_failed_is_applied_once(define, effects):
    attempts: list[int] = []

    def fails_once(request: ModelRequest) -> Any:
        attempts.append(1)
        if len(attempts) == 1:
            return RuntimeError("provider exploded")
        return [*one_call("open_ticket"), say("?")][assistant_turns(request)]

    agent = define(make_agent(fails_once))
    run = run_until_idle(submit(agent.name, "go", actor="alice").pk)
    assert run.status == RunStatus.FAILED
    with failing_commit(), pytest.raises(LostAcknowledgement):
        retry(run.pk, actor="olga")
    with pytest.raises(RetryRejected):
        retry(run.pk, actor="olga")
    assert events(run, "retried") == 1
    run = run_until_idle(run.pk)
    assert run.status == RunStatus.COMPLETED
    assert effects.total == 1
