"""Approval policy under concurrency, on PostgreSQL: approvers racing to a quorum, people
racing to claim an item, sweeps racing to fire timers, a late approval racing the expiry, and
real workers restarted while the timers fall due.

`make test` races a few dozen items of each; `make soak` (AGENTOPS_SOAK=1) 1,000.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Group

from runtime import AgentOpsError, clock, respond, submit, work
from runtime.models import (
    ApprovalReceipt,
    ApprovalRule,
    ApprovalTimer,
    Event,
    EventKind,
    Interaction,
    InteractionStatus,
    Run,
    RunStatus,
    TimerKind,
    WorkItem,
)
from runtime.testing import run_until_idle
from tests.conftest import make_agent, one_call
from tests.runtime.policy_support import OVER_1000, people, rule
from tests.runtime.threads import at_once, won
from tests.support.processes import wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

SCALE = 1000 if os.environ.get("AGENTOPS_SOAK") == "1" else 30
PAIRS = SCALE
BIG = {"order_id": "A1", "amount_cents": 5000}


def waiting_runs(define, count):
    agent = define(make_agent(one_call("charge", BIG)))
    runs = [
        run_until_idle(submit(agent.name, f"refund {i}", actor="otto").pk) for i in range(count)
    ]
    assert {run.status for run in runs} == {RunStatus.WAITING}
    return runs


def test_quorum_racing_approvers_meet_it_exactly_once_and_the_call_runs_once(define, effects):
    people()
    define(make_agent([]), register_them=False)
    rule(condition=OVER_1000, quorum=2)
    runs = waiting_runs(define, PAIRS)
    for run in runs:
        interaction = Interaction.objects.get(run=run)
        # ann first, then ben and cat at the same moment: one of them completes the quorum.
        respond(interaction.pk, {"approved": True}, actor="ann")
        outcomes = at_once(
            [
                lambda i=interaction: respond(i.pk, {"approved": True}, actor="ben"),
                lambda i=interaction: respond(i.pk, {"approved": True}, actor="cat"),
            ]
        )
        assert all(won(o) for o in outcomes), outcomes
    for run in runs:
        granted = Event.objects.filter(run=run, kind=EventKind.APPROVAL_GRANTED)
        assert granted.count() == 1
        approvers = granted.get().data["approvers"]
        assert len(approvers) == 2 and approvers[0] == "ann"
        assert ApprovalReceipt.objects.filter(interaction__run=run).count() == 1
        assert run_until_idle(run.pk).status == RunStatus.COMPLETED
    assert effects.total == PAIRS
    assert max(effects.effects.values()) == 1


def test_quorum_pairs_approving_at_once_from_nothing(define, effects):
    people()
    define(make_agent([]), register_them=False)
    rule(condition=OVER_1000, quorum=2)
    runs = waiting_runs(define, PAIRS)
    for run in runs:
        interaction = Interaction.objects.get(run=run)
        at_once(
            [
                lambda i=interaction, who=who: respond(i.pk, {"approved": True}, actor=who)
                for who in ("ann", "ben", "cat")
            ]
        )
        interaction.refresh_from_db()
        assert interaction.status == InteractionStatus.ANSWERED
        assert Event.objects.filter(run=run, kind=EventKind.APPROVAL_GRANTED).count() == 1
        # Exactly one of the three did not count: it came after the quorum was met.
        assert Event.objects.filter(run=run, kind=EventKind.APPROVAL_COUNTED).count() == 1
    for run in runs:
        run_until_idle(run.pk)
    assert effects.total == PAIRS


def test_claims_racing_one_person_wins_the_others_are_told_who(define):
    people()
    define(make_agent([]), register_them=False)
    rule(condition=OVER_1000)
    runs = waiting_runs(define, SCALE)
    for run in runs:
        interaction = Interaction.objects.get(run=run)
        outcomes = at_once(
            [
                lambda i=interaction, w=who: work.claim(i.pk, actor=w)
                for who in ("ann", "ben", "cat")
            ]
        )
        winners = [o.claimed_by for o in outcomes if won(o)]
        assert len(winners) == 1
        losers = [o for o in outcomes if not won(o)]
        assert all(isinstance(o, AgentOpsError) and o.code == "claim_conflict" for o in losers)
        assert all(f"{winners[0]} is on it" in o.message for o in losers)
        assert Event.objects.filter(run=run, kind=EventKind.ITEM_CLAIMED).count() == 1


def test_a_late_approval_and_the_expiry_have_exactly_one_winner(
    define, effects, monkeypatch, observe
):
    """The approver decides a millisecond before the deadline while a sweep fires the expiry a
    millisecond after it (each thread on its own clock): one of them decides, audited once."""
    people()
    define(make_agent([]), register_them=False)
    rule(condition=OVER_1000, seconds={"expires_after": 3600}, expiry_reason="too late")
    runs = waiting_runs(define, SCALE)
    moment = threading.local()
    real_now = clock.now
    monkeypatch.setattr(clock, "now", lambda: getattr(moment, "at", None) or real_now())

    def at(when: dt.datetime, call: Callable[[], Any]) -> Callable[[], Any]:
        def timed() -> Any:
            moment.at = when
            try:
                return call()
            finally:
                moment.at = None

        return timed

    deadlines = {run.pk: WorkItem.objects.get(interaction__run=run).expires_at for run in runs}
    # The warnings before the first deadline are fired first, so that each race's sweep
    # meets only its own expiry.
    while at(min(deadlines.values()) - dt.timedelta(seconds=1), work.fire_due_timers)():
        pass
    tick = dt.timedelta(milliseconds=1)
    decisions = [EventKind.APPROVAL_GRANTED, EventKind.APPROVAL_EXPIRED]
    winners: Counter[str] = Counter()
    for run in runs:
        interaction = Interaction.objects.get(run=run)
        deadline = deadlines[run.pk]
        approval, sweep = at_once(
            [
                at(
                    deadline - tick,
                    lambda i=interaction: respond(i.pk, {"approved": True}, actor="ann"),
                ),
                at(deadline + tick, work.fire_due_timers),
            ]
        )
        assert won(sweep), sweep
        decided = Counter(
            Event.objects.filter(run=run, kind__in=decisions).values_list("kind", flat=True)
        )
        if won(approval):
            assert decided == {EventKind.APPROVAL_GRANTED: 1}
            winners["the approval"] += 1
        else:
            assert isinstance(approval, AgentOpsError), approval
            assert approval.code in ("interaction_conflict", "approval_refused"), approval
            assert decided == {EventKind.APPROVAL_EXPIRED: 1}
            winners["the expiry"] += 1
        interaction.refresh_from_db()
        assert interaction.status == InteractionStatus.ANSWERED
        assert Run.objects.get(pk=run.pk).status == RunStatus.QUEUED
    assert ApprovalTimer.objects.filter(kind=TimerKind.EXPIRE, fired_at__isnull=True).count() == 0
    # The runs go on: each approved call is made once, each expired one never.
    for run in runs:
        assert run_until_idle(run.pk).status == RunStatus.COMPLETED
    assert effects.total == winners["the approval"]
    assert set(effects.effects.values()) <= {1}
    observe(f"late approval against the expiry: {SCALE} races, won by {dict(winners)}")


def test_sweeps_racing_fire_each_timer_once(define):
    people()
    define(make_agent([]), register_them=False)
    rule(
        condition=OVER_1000,
        seconds={"expires_after": 0.5},
        expiry_reason="nobody decided in time",
    )
    runs = waiting_runs(define, 20)
    time.sleep(0.6)
    fired = at_once([work.fire_due_timers for _ in range(4)])
    assert sum(fired) == 40  # a warning and an expiry for each
    for run in runs:
        assert Event.objects.filter(run=run, kind=EventKind.APPROVAL_EXPIRED).count() == 1
        assert Event.objects.filter(run=run, kind=EventKind.APPROVAL_EXPIRING).count() == 1
        assert Run.objects.get(pk=run.pk).status == RunStatus.QUEUED


def test_expiry_fires_once_with_two_workers_across_restarts(cluster, agent, observe, monkeypatch):
    """Real Celery workers sweep the timers; one is killed and replaced while they fall due."""
    from tests.reliability.agents import EFFECTS_ENV

    # This process asks for the approvals; the fake service records where the workers do.
    monkeypatch.setenv(EFFECTS_ENV, str(cluster.effects))
    people()
    finance = Group.objects.get(name="finance")
    ApprovalRule.objects.create(
        name="every charge",
        agent=agent.name,
        tool="charge",
        approver_group=finance,
        expires_after=dt.timedelta(seconds=3),
        expiry_reason="expired: nobody decided",
    )
    from tests.reliability.agents import one_call as plan

    runs = []
    for i in range(12):
        run = submit(agent.name, plan("charge", order_id=f"o{i}"), actor="otto")
        runs.append(run_until_idle(run.pk))
        if i % 4 == 3:
            time.sleep(1.0)  # timers due at different moments
    assert {run.status for run in runs} == {RunStatus.WAITING}
    first = cluster.worker("w1")
    cluster.worker("w2")
    time.sleep(2.0)
    first.kill()
    cluster.worker("w3")

    def expired() -> bool:
        return Event.objects.filter(kind=EventKind.APPROVAL_EXPIRED).count() >= len(runs)

    wait_until(expired, timeout=60, what="every approval to expire")
    wait_until(
        lambda: all(Run.objects.get(pk=r.pk).status == RunStatus.COMPLETED for r in runs),
        timeout=60,
        what="every rejected run to finish",
    )
    per_run = Counter(
        Event.objects.filter(kind=EventKind.APPROVAL_EXPIRED).values_list("run_id", flat=True)
    )
    assert set(per_run.values()) == {1}
    assert len(per_run) == len(runs)
    assert ApprovalTimer.objects.filter(fired_at__isnull=True).count() == 0
    for run in runs:
        assert "expired: nobody decided" in Run.objects.get(pk=run.pk).output
    observe(f"{len(runs)} expiries, each fired once, with a worker killed and replaced")
