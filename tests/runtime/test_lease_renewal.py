"""The lease: set by the claim, renewed by the heartbeat alone. A record reads the run's row as
its fence (PostgreSQL locks it) and writes none of it; the renewal touches no indexed column of
the run, so on PostgreSQL it is a HOT update, which writes no entry into any of the run table's
indexes (runtime/store/sql.py, FENCE)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models import F

from runtime import LeaseLost, store, submit
from runtime.models import Event, EventKind, Operation, OperationStatus, Run
from runtime.registry import code_defines, register
from tests.conftest import make_agent, say
from tests.support.processes import wait_until


@pytest.fixture
def claimed() -> Iterator[Run]:
    agent = make_agent([say("hi")])
    with code_defines(agent):
        register([agent], actor="admin")
        run = submit(agent.name, "hi", actor="alice")
        claimed = store.claim(run.pk, "w1")
        assert claimed is not None
        yield claimed


def intent(run: Run, key: str) -> Operation:
    return store.write_intent(
        run,
        None,
        key=key,
        kind="tool",
        name="get_order",
        policy="safe",
        input={"tool": "get_order", "arguments": {"order_id": "A1"}},
        input_hash="h",
    )


def records(run: Run) -> None:
    """Three records: two intents, the second carrying the first's outcome, and an outcome that
    commits alone."""
    first = intent(run, "step-1/tool/a")
    store.write_outcome(run, first, status=OperationStatus.COMPLETED, result={"ok": 1}, hold=True)
    second = intent(run, "step-2/tool/b")
    store.write_outcome(run, second, status=OperationStatus.COMPLETED, result={"ok": 2})


def run_updates() -> tuple[int, int]:
    """Updates of the run table in this transaction (the test's): all of them, and the HOT."""
    table = Run._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_stat_get_xact_tuples_updated(%s::regclass), "
            "pg_stat_get_xact_tuples_hot_updated(%s::regclass)",
            [table, table],
        )
        updated, hot = cursor.fetchone()
    return int(updated), int(hot)


def lease_and_last_move(run: Run) -> tuple[Any, Any]:
    return Run.objects.values_list("lease_expires_at", "updated_at").get(pk=run.pk)


@pytest.mark.django_db
def test_e2_records_leave_the_lease_as_the_claim_set_it(claimed: Run) -> None:
    before = lease_and_last_move(claimed)
    records(claimed)
    assert Operation.objects.filter(run=claimed, status=OperationStatus.COMPLETED).count() == 2
    assert lease_and_last_move(claimed) == before


@pytest.mark.django_db
@pytest.mark.postgres
def test_records_write_no_version_of_the_runs_row_on_postgresql(claimed: Run) -> None:
    updated = run_updates()
    records(claimed)
    assert Operation.objects.filter(run=claimed, status=OperationStatus.COMPLETED).count() == 2
    assert run_updates() == updated


@pytest.mark.django_db
@pytest.mark.postgres
def test_e3_the_heartbeats_renewal_is_a_hot_update_on_postgresql(claimed: Run) -> None:
    updated, hot = run_updates()
    store.renew(claimed)
    after = run_updates()
    assert (after[0] - updated, after[1] - hot) == (1, 1)


@pytest.mark.django_db
def test_e3_a_renewal_moves_the_lease_and_leaves_the_time_of_the_runs_last_move(
    claimed: Run,
) -> None:
    """updated_at is when the run last moved (here, its claim), which the inbox and the runs
    list show; the lease moves with every renewal."""
    lease, claimed_at = lease_and_last_move(claimed)
    store.renew(claimed)
    renewed, updated_at = lease_and_last_move(claimed)
    assert updated_at == claimed_at
    assert renewed > lease


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_e2_a_record_waits_for_a_takeover_in_flight_then_writes_nothing(claimed: Run) -> None:
    """The fence is a locked read: a record that meets a takeover not yet committed waits for
    it, reads the new fence, and writes nothing. A plain read would see the fence as the
    record's statement began and land beside the takeover."""
    taken = threading.Event()
    commit = threading.Event()

    def take_over() -> None:
        try:
            with transaction.atomic():
                Run.objects.filter(pk=claimed.pk).update(fence=F("fence") + 1, lease_owner="w2")
                taken.set()
                assert commit.wait(30)
        finally:
            connection.close()

    outcome: list[BaseException | Operation] = []

    def record() -> None:
        try:
            outcome.append(intent(claimed, "step-1/tool/a"))
        except BaseException as exc:  # judged below
            outcome.append(exc)
        finally:
            connection.close()

    takeover = threading.Thread(target=take_over)
    takeover.start()
    assert taken.wait(30)
    writer = threading.Thread(target=record)
    writer.start()
    wait_until(lambda: outcome or _waiting_for_a_lock() == 1, timeout=30, what="the record")
    assert not outcome, f"the record did not wait for the takeover: {outcome}"
    commit.set()
    takeover.join(30)
    writer.join(30)
    assert len(outcome) == 1 and isinstance(outcome[0], LeaseLost), outcome
    assert not Operation.objects.filter(run=claimed).exists()
    assert not Event.objects.filter(run=claimed, kind=EventKind.INTENT).exists()
    assert Run.objects.values_list("fence", "lease_owner").get(pk=claimed.pk) == (2, "w2")


def _waiting_for_a_lock() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return int(cursor.fetchone()[0])
