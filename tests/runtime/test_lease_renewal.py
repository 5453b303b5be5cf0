"""The lease's renewal, written by every record and by the heartbeat, touches no indexed column
of the run: on PostgreSQL it is then a HOT update, which writes no entry into any of the run
table's indexes (runtime/store/sql.py, HOLD)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from runtime import store, submit
from runtime.models import Operation, OperationStatus, Run
from runtime.registry import code_defines, register
from tests.conftest import make_agent, say

pytestmark = pytest.mark.django_db


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


def records_and_a_heartbeat(run: Run) -> None:
    """Three renewals of the lease: two intents (the second carrying the first's outcome) and
    a heartbeat."""
    first = intent(run, "step-1/tool/a")
    store.write_outcome(run, first, status=OperationStatus.COMPLETED, result={"ok": 1}, hold=True)
    intent(run, "step-2/model")
    store.renew(run)


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


@pytest.mark.postgres
def test_every_renewal_of_the_lease_is_a_hot_update_on_postgresql(claimed: Run) -> None:
    updated, hot = run_updates()
    records_and_a_heartbeat(claimed)
    after: Any = run_updates()
    assert (after[0] - updated, after[1] - hot) == (3, 3)


def test_a_renewal_leaves_the_time_of_the_runs_last_move(claimed: Run) -> None:
    """updated_at is when the run last moved (here, its claim), which the inbox and the runs
    list show; the lease moves with every renewal."""
    claimed_at = Run.objects.values_list("updated_at", "lease_expires_at").get(pk=claimed.pk)
    records_and_a_heartbeat(claimed)
    updated_at, lease = Run.objects.values_list("updated_at", "lease_expires_at").get(pk=claimed.pk)
    assert updated_at == claimed_at[0]
    assert lease > claimed_at[1]
