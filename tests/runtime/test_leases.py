"""Claims, leases and fences: one owner at a time; a taken-over worker commits nothing."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import connection

from runtime import LeaseLost, clock, store, submit
from runtime.engine import advance
from runtime.models import Event, EventKind, Operation, Run, RunStatus
from runtime.testing import expire_lease
from tests.conftest import make_agent, one_call, say


def test_a_claim_lands_once(define):
    agent = define(make_agent([say("hi")]))
    run = submit(agent.name, "hi", actor="alice")
    first = store.claim(run.pk, "w1")
    assert first is not None and first.fence == 1
    assert store.claim(run.pk, "w2") is None
    assert Event.objects.filter(kind=EventKind.CLAIMED).count() == 1


def test_a_delivery_for_a_finished_run_writes_nothing(define):
    agent = define(make_agent([say("hi")]))
    run = submit(agent.name, "hi", actor="alice")
    assert advance(run.pk) is True
    before = Event.objects.count()
    assert advance(run.pk) is False
    assert Event.objects.count() == before


def test_a_taken_over_worker_can_commit_nothing(define, effects):
    agent = define(make_agent(one_call("charge")))
    run = submit(agent.name, "hi", actor="alice")
    old = store.claim(run.pk, "old")
    expire_lease(run.pk)
    new = store.claim(run.pk, "new")
    assert (old.fence, new.fence) == (1, 2)
    with pytest.raises(LeaseLost):
        store.write_intent(
            old,
            None,
            key="k",
            kind="tool",
            name="charge",
            policy="manual",
            input={},
            input_hash="h",
        )
    with pytest.raises(LeaseLost):
        store.transition(old, RunStatus.COMPLETED, "completed", output="stolen")
    assert not Operation.objects.exists()
    run.refresh_from_db()
    assert (run.status, run.lease_owner, run.output) == (RunStatus.RUNNING, "new", "")
    assert Event.objects.filter(kind=EventKind.LEASE_EXPIRED).get().data["previous_owner"] == "old"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_claims_on_postgres_have_exactly_one_winner(settings):
    agent = make_agent([say("hi")])
    from runtime.registry import code_defines, register

    with code_defines(agent):
        register([agent], actor="admin")
        run_ids = [submit(agent.name, f"m{i}", actor="alice").pk for i in range(20)]
        winners: dict[str, list[str]] = {str(r): [] for r in run_ids}
        barrier = threading.Barrier(4)

        def worker(name: str) -> None:
            try:
                barrier.wait()
                for run_id in run_ids:
                    if store.claim(run_id, name) is not None:
                        winners[str(run_id)].append(name)
            finally:
                connection.close()

        threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert all(len(owners) == 1 for owners in winners.values()), winners
    assert Run.objects.filter(status=RunStatus.RUNNING, fence=1).count() == 20
    assert connection.vendor == "postgresql"


def test_e2_a_claim_is_dated_no_earlier_than_the_move_that_made_its_run_claimable(define):
    # A worker read the clock, then waited (for its connection while the database restarted,
    # or stopped by its host) while the run was queued: its claim lands after that move, so it
    # is dated from it, and its lease runs from it. The run's history stays in order.
    agent = define(make_agent([say("hi")]))
    read_at = dt.datetime(2026, 12, 5, 3, 45, 45, tzinfo=dt.UTC)
    queued_at = read_at + dt.timedelta(seconds=4.6)
    with clock.frozen(queued_at):
        run = submit(agent.name, "hi", actor="alice")
    with clock.frozen(read_at):
        claimed = store.claim(run.pk, "late")

    assert claimed is not None
    events = list(Event.objects.filter(run_id=run.pk).order_by("id"))
    assert [e.kind for e in events] == [EventKind.SUBMITTED, EventKind.CLAIMED]
    assert [e.created_at for e in events] == [queued_at, queued_at]
    run.refresh_from_db()
    lease = dt.timedelta(seconds=store.lease_seconds())
    assert (run.updated_at, run.lease_expires_at) == (queued_at, queued_at + lease)
    assert (claimed.updated_at, claimed.lease_expires_at) == (queued_at, queued_at + lease)
