"""The runtime's statements that look a run (or an interaction) up by its key read it by its
key, whatever PostgreSQL's statistics of the runs say.

The statistics may be from an hour when no run was running or queued: a quiet night over a large
table, which autovacuum does not analyze again until a tenth of it has changed. PostgreSQL then
takes `status = 'running'` for one row, and a statement that finds a run by its key and checks
its status could walk the status index through every running run instead (2,539 pages and 2.5
ms for one lease renewal at 5,000 running runs, against 5 pages by the key). Every claim,
record, heartbeat and move of a running run is such a statement.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from psycopg.types.json import Jsonb

from bench import seed
from runtime import store
from runtime.models import Run
from runtime.store import postgres, verbs, worker

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

RUNS, BURST = 20_000, 2_000
NOW = dt.datetime(2026, 12, 5, tzinfo=dt.UTC)


@pytest.fixture
def burst() -> Iterator[Run]:
    """RUNS finished runs, analyzed; then a burst the statistics have not seen: BURST of them
    running and BURST queued. Yields a running one."""
    parts = seed.params(1, RUNS, fingerprint="", events_per_run=0)
    with connection.cursor() as cursor:
        cursor.execute(seed.sessions("now()"), parts)
        cursor.execute(
            seed.runs(status="'completed'", created_at="now()", finished_at="now()"), parts
        )
        cursor.execute("ANALYZE agentops_run")
        for status, first in (("running", 1), ("queued", BURST + 1)):
            cursor.execute(
                "UPDATE agentops_run SET status = %s, lease_owner = 'w', lease_expires_at = %s"
                f" WHERE id IN (SELECT {seed.RUN_ID} FROM generate_series(%s, %s) g)",
                [status, NOW + dt.timedelta(hours=1), first, first + BURST - 1],
            )
    yield Run.objects.get(pk=seed.uuid_of("r", 1))


def plan(sql: str, params: Any = None) -> str:
    """The plan PostgreSQL makes of `sql` with these values (as for a statement not prepared,
    and as for the first five runs of a prepared one)."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def by_key(plan: str) -> None:
    """Every scan of the runs in `plan` reads the primary key."""
    scans = re.findall(r"Scan (?:using (\w+) )?on agentops_run\b", plan)
    assert scans, plan
    assert all(index == "agentops_run_pkey" for index in scans), plan


def record(run: Run, **more: Any) -> dict[str, Any]:
    return {
        "run": run.pk,
        "fence": run.fence,
        "held": "running",
        "pausable": True,
        "now": NOW,
        "key": "step-1/model",
        "event": "intent",
        "data": Jsonb({}),
        **more,
    }


def test_a_record_reads_its_run_by_its_key(burst: Run) -> None:
    operation = {
        "kind": "tool",
        "name": "lookup",
        "policy": "safe",
        "status": "started",
        "input": Jsonb({}),
        "input_hash": "0" * 64,
        "result": None,
        "is_error": False,
        "outcome_at": None,
    }
    carried = {
        "p_op": 1,
        "p_status": "completed",
        "p_result": Jsonb({}),
        "p_is_error": False,
        "p_error": "",
        "p_usage": None,
        "p_key": "step-0/model",
        "p_event": "outcome",
        "p_data": Jsonb({}),
        "p_now": NOW,
    }
    by_key(plan(postgres.NEW_OPERATION[False], record(burst, **operation)))
    by_key(plan(postgres.NEW_OPERATION[True], record(burst, **operation, **carried)))


def test_a_move_out_of_running_reads_its_run_by_its_key(burst: Run) -> None:
    statement = postgres.move_owned("status = 'completed'", carried=False)
    by_key(plan(statement, record(burst, event="completed")))


def test_a_claim_reads_its_run_by_its_key(burst: Run) -> None:
    queued = seed.uuid_of("r", BURST + 1)
    params = {
        "run": queued,
        "now": NOW,
        "lease": NOW + dt.timedelta(seconds=30),
        "owner": "w2",
        "lost": "%s",
        "expired": "lease_expired",
        "claimed": "claimed",
    }
    by_key(plan(postgres.CLAIM, params))


def test_a_heartbeat_and_a_poll_read_the_run_by_its_key(burst: Run) -> None:
    with CaptureQueriesContext(connection) as queries:
        store.renew(burst)
        assert worker.still_running(burst.pk, burst.fence)
    assert len(queries) == 2
    for query in queries:
        by_key(plan(query["sql"]))


def test_an_answer_reads_its_interaction_by_its_key(burst: Run) -> None:
    """The same for the interactions: their statistics taken while none was pending."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO agentops_interaction (id, run_id, operation_key, kind, tool_name,"
            " payload, status, responded_by, created_at)"
            f" SELECT md5('i' || g)::uuid, {seed.RUN_ID}, 'k', 'approval', 't', '{{}}'::jsonb,"
            " 'answered', 'bob', now() FROM generate_series(1, %s) g",
            [RUNS],
        )
        cursor.execute("ANALYZE agentops_interaction")
        cursor.execute(
            "UPDATE agentops_interaction SET status = 'pending'"
            " WHERE id IN (SELECT md5('i' || g)::uuid FROM generate_series(1, %s) g)",
            [BURST],
        )
    with CaptureQueriesContext(connection) as queries:
        assert verbs.answer_interaction(seed.uuid_of("i", 1), {}, actor="alice", now=NOW)
    (answer,) = queries
    scans = re.findall(r"Scan (?:using (\w+) )?on agentops_interaction\b", plan(answer["sql"]))
    assert scans == ["agentops_interaction_pkey"], plan(answer["sql"])
