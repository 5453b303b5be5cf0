"""The verbs' conformance rules, one test each, named by the rule's id (CONFORMANCE.md).

The races behind T3, T6 and S5 are also run with threads on PostgreSQL in tests/runtime
(test_sessions.py, test_retry.py); here each rule is shown on both databases.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import IntegrityError, transaction

from runtime import (
    AgentOpsError,
    InvalidInput,
    ModelRetry,
    NotBlocked,
    RetryRejected,
    SessionBusy,
    cancel,
    resolve,
    respond,
    retry,
    submit,
)
from runtime.clock import frozen
from runtime.models import (
    UNFINISHED_STATUSES,
    Event,
    EventKind,
    Operation,
    OperationStatus,
    Run,
    RunStatus,
)
from runtime.testing import SimulatedCrash, crash_at, recover, run_until_idle
from tests.conftest import ARGS, call, make_agent, one_call, say

KEY = "step-1/tool/toolu_01_0"


@pytest.fixture
def charger(define):
    return define(make_agent(one_call("charge"), name="charger"))


def blocked_charge() -> Run:
    run = submit("charger", "charge", actor="alice")
    with crash_at("after_handler", tool="charge"), pytest.raises(SimulatedCrash):
        recover(run.pk)
    return recover(run.pk)


def test_t3_retry_is_refused_once_a_later_run_advanced_the_session(define):
    def script(request):
        return RuntimeError("down") if request.messages[-1]["content"] == "one" else say("ok")

    agent = define(make_agent(script, name="t3"))
    first = run_until_idle(submit(agent.name, "one", actor="alice").pk)
    assert first.status == RunStatus.FAILED
    later = run_until_idle(submit(agent.name, "two", actor="alice", session=first.session_id).pk)
    assert later.status == RunStatus.COMPLETED
    with pytest.raises(RetryRejected, match=f"a later run \\({later.pk}\\) has advanced"):
        retry(first.pk, actor="ops")
    first.refresh_from_db()
    assert first.status == RunStatus.FAILED
    assert not Event.objects.filter(run=first, kind=EventKind.RETRIED).exists()


def test_t4_retry_of_a_failed_run_resets_model_attempts_and_keeps_completed_results(
    define, effects
):
    down = {"now": True}

    def script(request):
        position = sum(1 for m in request.messages if m["role"] == "assistant")
        if position == 1 and down["now"]:
            return RuntimeError("provider down")
        return [call(("get_order", ARGS["get_order"]), step=1), say("done")][position]

    agent = define(make_agent(script, model_retry=ModelRetry(2, 1, 1), name="t4"))
    with frozen() as clock:
        run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
        clock.advance(1)
        run = run_until_idle(run.pk)
    assert run.status == RunStatus.FAILED
    assert Operation.objects.get(run=run, key="step-2/model").attempts == 2
    down["now"] = False
    retry(run.pk, actor="ops")
    assert Operation.objects.get(run=run, key="step-2/model").attempts == 0
    assert run_until_idle(run.pk).status == RunStatus.COMPLETED
    assert effects.total == 1  # the completed get_order was kept, not run again


def test_t6_retry_now_and_crashes_never_push_attempts_past_the_maximum(define):
    agent = define(make_agent([RuntimeError("down")] * 20, model_retry=ModelRetry(3, 60, 60)))
    run = submit(agent.name, "hi", actor="alice")
    with crash_at("after_intent", tool="model"), pytest.raises(SimulatedCrash):
        recover(run.pk)  # attempt 1 crashed: it counts
    run = recover(run.pk)  # attempt 2 fails: the run waits
    for _ in range(5):  # an impatient operator
        if run.status != RunStatus.RETRY_WAIT:
            break
        retry(run.pk, actor="ops")
        run = run_until_idle(run.pk)
    assert run.status == RunStatus.FAILED
    assert "after 3 attempts" in run.error
    sent = Event.objects.filter(run=run, kind=EventKind.INTENT, data__call="model").count()
    assert sent == 3


def test_s5_one_unfinished_run_per_session_enforced_by_the_database(define):
    agent = define(make_agent([RuntimeError("down"), say("hi")], name="s5"))
    first = submit(agent.name, "one", actor="alice")
    with pytest.raises(SessionBusy, match=str(first.pk)):
        submit(agent.name, "two", actor="alice", session=first.session_id)
    other = run_until_idle(submit(agent.name, "elsewhere", actor="alice").pk)
    # Whatever writes the row, the database refuses a second unfinished run in the session.
    with pytest.raises(IntegrityError), transaction.atomic():
        Run.objects.filter(pk=other.pk).update(session=first.session, seq=2, status="queued")
    unfinished = Run.objects.filter(session=first.session, status__in=UNFINISHED_STATUSES)
    assert list(unfinished.values_list("pk", flat=True)) == [first.pk]


def test_e6_every_operator_event_names_a_person_never_blank(define, charger, effects):
    define(make_agent(one_call("refund"), name="approvals"))
    waiting = run_until_idle(submit("approvals", "refund", actor="alice").pk)
    respond(waiting.interactions.get().pk, {"approved": True}, actor="  bob  ")
    blocked = blocked_charge()
    resolve(blocked.pk, KEY, {"receipt_id": "r-1"}, evidence="seen", actor="rita")
    cancel(blocked.pk, actor="sam", reason="")
    for blank in ("", "   ", None):
        with pytest.raises(InvalidInput, match="actor"):
            cancel(waiting.pk, actor=blank)
    actors = set(Event.objects.values_list("actor", flat=True))
    assert actors == {"admin", "alice", "bob", "rita", "sam", "runtime"}


@pytest.mark.parametrize(
    "bad",
    [
        {"actor": None},
        {"actor": "x" * 151},
        {"actor": "a\x00"},
        {"actor": "runtime"},
        {"reason": None},
        {"reason": 5},
    ],
    ids=repr,
)
def test_e8_every_verb_validates_its_arguments_with_a_stable_code(define, bad):
    define(make_agent([say("hi")], name="e8"))
    run = submit("e8", "hi", actor="alice")
    before = (Run.objects.count(), Event.objects.count(), run.status)
    arguments = {"actor": "ops", "reason": "", **bad}
    calls = [lambda: cancel(run.pk, **arguments)]
    if "actor" in bad:
        calls += [
            lambda: submit("e8", "again", actor=bad["actor"]),
            lambda: retry(run.pk, actor=bad["actor"]),
            lambda: resolve(run.pk, KEY, {}, evidence="e", actor=bad["actor"]),
            lambda: respond(run.pk, {"approved": True}, actor=bad["actor"]),
        ]
    for action in calls:
        with pytest.raises(AgentOpsError) as error:
            action()
        assert error.value.code == "invalid_input"
    run.refresh_from_db()
    assert (Run.objects.count(), Event.objects.count(), run.status) == before


def test_r4_a_call_that_did_not_happen_runs_again_or_the_model_is_told(charger, effects):
    blocked = blocked_charge()
    calls_before = sum(effects.calls.values())
    resolve(blocked.pk, KEY, evidence="no charge", actor="rita", outcome="not_run_again")
    op = Operation.objects.get(run=blocked, key=KEY)
    assert op.status == OperationStatus.NOT_RUN
    assert Run.objects.get(pk=blocked.pk).status == RunStatus.QUEUED
    # The manual call runs once more, with the same operation id, and the run goes on.
    blocked = recover(blocked.pk)
    assert blocked.status == RunStatus.COMPLETED
    operation_id = f"{blocked.pk}:{KEY}"
    assert sum(effects.calls.values()) == calls_before + 1
    assert effects.calls[operation_id] == calls_before + 1
    op.refresh_from_db()
    assert (op.status, op.is_error) == (OperationStatus.COMPLETED, False)

    other = blocked_charge()
    resolve(other.pk, KEY, evidence="no charge", actor="sam", outcome="not_run_tell_model")
    other = recover(other.pk)
    assert other.status == RunStatus.COMPLETED
    told = Operation.objects.get(run=other, key=KEY)
    assert (told.is_error, told.result["kind"]) == (True, "tool-not-run")
    assert "no charge" in told.result["error"]
    decisions = Event.objects.filter(kind=EventKind.OPERATION_RESOLVED).order_by("id")
    assert [(e.actor, e.data["outcome"], e.data["evidence"]) for e in decisions] == [
        ("rita", "not_run_again", "no charge"),
        ("sam", "not_run_tell_model", "no charge"),
    ]


def test_r5_a_second_resolve_is_refused_naming_who_and_when(charger, effects):
    blocked = blocked_charge()
    with frozen(dt.datetime(2026, 5, 4, 3, 2, 1, tzinfo=dt.UTC)):
        resolve(blocked.pk, KEY, {"receipt_id": "r-1"}, evidence="seen", actor="rita")
    with pytest.raises(NotBlocked, match=r"already resolved .* by rita at 2026-05-04 03:02:01 UTC"):
        resolve(blocked.pk, KEY, {"receipt_id": "r-2"}, evidence="seen", actor="sam")
    assert Operation.objects.get(run=blocked, key=KEY).result == {"receipt_id": "r-1"}
