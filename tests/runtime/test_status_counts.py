"""The counts by status the database keeps (migration 0008) equal what a GROUP BY counts, after
every kind of change a run or an interaction goes through, on both databases."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.models import Count

from runtime import bulk, cancel, fork, respond, resume, store, submit
from runtime.llm.scripted import say
from runtime.models import (
    Interaction,
    InteractionStatus,
    Operation,
    Run,
    RunStatus,
    StatusCount,
    WorkItem,
)
from runtime.testing import run_until_idle
from tests.conftest import make_agent, one_call


def counted() -> tuple[dict[str, int], dict[str, int]]:
    """What the tables hold, counted the slow way; statuses and kinds with none left out."""
    runs = dict(Run.objects.order_by().values_list("status").annotate(n=Count("pk")))
    pending = dict(
        Interaction.objects.filter(status=InteractionStatus.PENDING)
        .order_by()
        .values_list("kind")
        .annotate(n=Count("pk"))
    )
    return runs, pending


def kept() -> tuple[dict[str, int], dict[str, int]]:
    counts = store.counts()
    return (
        {status: n for status, n in counts.runs.items() if n},
        {kind: n for kind, n in counts.pending.items() if n},
    )


def test_the_kept_counts_match_group_by_after_every_kind_of_change(define, effects):
    define(make_agent([say("done")], name="clerk"))
    approving = define(make_agent(one_call("refund"), name="cashier"))
    assert kept() == counted() == ({}, {})

    finished = [run_until_idle(submit("clerk", f"c{i}", actor="alice").pk) for i in range(3)]
    queued = [submit("clerk", f"q{i}", actor="alice") for i in range(4)]
    waiting = [run_until_idle(submit(approving.name, f"w{i}", actor="alice").pk) for i in range(3)]
    assert {run.status for run in waiting} == {RunStatus.WAITING}
    assert kept() == counted()
    assert kept()[0] == {RunStatus.COMPLETED: 3, RunStatus.QUEUED: 4, RunStatus.WAITING: 3}
    assert kept()[1] == {"tool_approval": 3}

    # An approval answered (its run queued again, then finished), a waiting run cancelled.
    approval = Interaction.objects.get(run=waiting[0], status=InteractionStatus.PENDING)
    respond(approval.pk, {"approved": True}, actor="bob")
    run_until_idle(waiting[0].pk)
    cancel(waiting[1].pk, actor="bob", reason="duplicate")
    cancel(queued[0].pk, actor="bob", reason="duplicate")
    assert kept() == counted()

    # A fork of a finished run, run to its end.
    child = fork(finished[0].pk, "step-1/model", actor="bob")
    assert kept() == counted()
    run_until_idle(child.pk)
    assert kept() == counted()

    # A bulk job pausing every queued run.
    job = bulk.submit("pause", {"status": ["queued"]}, actor="bob", key="k")
    bulk.work(job.pk, owner="test-worker")
    assert kept()[0][RunStatus.PAUSED] == 3
    assert kept() == counted()

    # Rows deleted (as a retention job or a person at the database would): the counts follow.
    gone = [finished[1].pk, waiting[2].pk]
    with connection.cursor() as cursor:  # events are append-only to the ORM
        cursor.execute(
            "DELETE FROM agentops_event WHERE run_id IN (%s, %s)",
            [Run._meta.pk.get_db_prep_value(pk, connection) for pk in gone],
        )
    Operation.objects.filter(run_id__in=gone).delete()
    WorkItem.objects.filter(interaction__run_id__in=gone).delete()
    Interaction.objects.filter(run_id__in=gone).delete()
    Run.objects.filter(pk__in=gone).delete()
    assert kept() == counted()
    assert kept()[1] == {}


def test_the_inbox_reads_the_kept_counts_not_the_runs(define, effects, django_assert_num_queries):
    define(make_agent([say("done")], name="clerk"))
    submit("clerk", "q", actor="alice")
    with django_assert_num_queries(1) as captured:
        counts = store.counts()
    assert counts.runs == {RunStatus.QUEUED: 1}
    assert "agentops_run" not in captured.captured_queries[0]["sql"]


def test_the_sweep_folds_the_deltas_into_one_row_per_key(define, effects, on_postgres):
    """On PostgreSQL every change inserts its deltas (no row lock for workers to queue on);
    the sweep folds them, and the counts read the same before and after."""
    define(make_agent([say("done")], name="clerk"))
    for i in range(3):
        run_until_idle(submit("clerk", f"c{i}", actor="alice").pk)
    submit("clerk", "q", actor="alice")
    before = kept()
    rows = StatusCount.objects.count()
    if on_postgres:
        assert rows > len(before[0])  # submitted, claimed, completed: deltas of each move
    resume()  # the sweep
    assert kept() == before == counted()
    folded = dict(StatusCount.objects.values_list("key", "n"))
    assert len(folded) == StatusCount.objects.count()  # one row per key
    assert {key: n for key, n in folded.items() if n} == {
        f"run:{RunStatus.COMPLETED}": 3,
        f"run:{RunStatus.QUEUED}": 1,
    }
    if not on_postgres:
        assert StatusCount.objects.count() == rows  # SQLite's triggers kept one row per key


@pytest.mark.django_db(transaction=True)
def test_the_migration_backfills_and_its_triggers_count_on_both_databases(define, effects):
    define(make_agent([say("done")], name="clerk"))
    run_until_idle(submit("clerk", "a", actor="alice").pk)
    submit("clerk", "b", actor="alice")
    executor = MigrationExecutor(connection)
    executor.migrate([("agentops", "0007_approval_policy")])
    # Changed while nothing counts: only the backfill can know.
    with connection.cursor() as cursor:
        cursor.execute("UPDATE agentops_run SET status = 'failed' WHERE status = 'queued'")
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
    assert kept() == counted() == ({RunStatus.COMPLETED: 1, RunStatus.FAILED: 1}, {})
    submit("clerk", "c", actor="alice")
    assert kept() == counted()
