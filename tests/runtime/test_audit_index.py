"""The audit log's index (migration 0011): the operators' events alone, which is what the audit
log reads, and on PostgreSQL built beside the workers' writes (CONCURRENTLY), not over them."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agentops.selectors import AuditFilters, audit_page
from runtime.models import RUNTIME, Event
from tests.support.personas import superuser

BEFORE = ("agentops", "0010_lease_renewal_is_hot")


def actor_indexes() -> dict[str, str]:
    """The event table's indexes on the actor, by name: their definitions."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT c.relname, pg_get_indexdef(i.indexrelid), i.indisvalid"
                " FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                " WHERE i.indrelid = 'agentops_event'::regclass AND c.relname LIKE 'event_actor%%'"
            )
            rows = cursor.fetchall()
            assert all(valid for _, _, valid in rows), rows
            return {name: definition for name, definition, _ in rows}
        cursor.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND name LIKE 'event_actor%'"
        )
        return dict(cursor.fetchall())


def migrate(target: tuple[str, str] | None) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate([target] if target else executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_the_audit_index_leaves_the_runtime_out_and_the_migration_goes_both_ways():
    (definition,) = actor_indexes().values()
    assert "'runtime'" in definition and "WHERE" in definition.upper()

    migrate(BEFORE)
    assert list(actor_indexes()) == ["event_actor"]
    assert "WHERE" not in actor_indexes()["event_actor"].upper()  # every actor's, as before

    if connection.vendor == "postgresql":
        # What a build that was interrupted leaves (CREATE INDEX CONCURRENTLY leaves the index
        # INVALID): the next attempt builds it again.
        with connection.cursor() as cursor:
            cursor.execute("CREATE INDEX event_actor_building ON agentops_event (kind)")
    migrate(None)
    indexes = actor_indexes()
    assert list(indexes) == ["event_actor"]
    assert "'runtime'" in indexes["event_actor"] and "(actor, id DESC)" in indexes[
        "event_actor"
    ].replace('"', "")


def plan_of(sql: str) -> str:
    """The database's plan of `sql`, as text (PostgreSQL told to avoid a sequential scan where
    it can: the tables here are small)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("EXPLAIN " + sql)
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + sql)
        return " ".join(str(row) for row in cursor.fetchall())


@pytest.mark.django_db
def test_the_audit_log_of_an_actor_reads_the_index(operator_events):
    """The audit log's query says what the partial index leaves out (SQLite uses a partial
    index only for a query whose WHERE repeats the index's), so each database reads it."""
    with CaptureQueriesContext(connection) as queries:
        page = audit_page(AuditFilters(actor="alice"))
    assert [event.actor for event in page.rows] == ["alice"] * len(page.rows) != []
    (sql,) = [q["sql"] for q in queries if 'FROM "agentops_event"' in q["sql"]]
    plan = plan_of(sql)
    assert "event_actor" in plan, plan


@pytest.mark.django_db
def test_the_admins_search_of_events_by_actor_reads_the_index_and_finds_only_theirs(
    operator_events, client
):
    """The admin's event list searched for an actor: the operator's events alone, exactly
    (usernames are case-sensitive), read from the index on both databases; the runtime's
    events, which the index leaves out, are still found by their name."""
    client.force_login(superuser("ada"))
    with CaptureQueriesContext(connection) as queries:
        page = client.get("/admin/agentops/event/", {"q": "alice"})
    assert page.status_code == 200
    assert "username, exactly." in page.content.decode()  # the search box says what it takes
    assert page.context["cl"].result_count == 40
    assert {event.actor for event in page.context["cl"].result_list} == {"alice"}
    (sql,) = [
        q["sql"] for q in queries if 'FROM "agentops_event"' in q["sql"] and "ORDER BY" in q["sql"]
    ]
    plan = plan_of(sql)
    assert "event_actor" in plan, plan

    assert client.get("/admin/agentops/event/", {"q": "ALICE"}).context["cl"].result_count == 0
    runtime = client.get("/admin/agentops/event/", {"q": RUNTIME}).context["cl"]
    assert runtime.result_count == 1_960
    assert {event.actor for event in runtime.result_list} == {RUNTIME}


@pytest.fixture
def operator_events() -> None:
    """2,000 events, one in 50 an operator's: as in a real log, where the runtime writes most."""
    now = timezone.now()
    Event.objects.bulk_create(
        Event(kind="paused", actor=RUNTIME if n % 50 else "alice", data={}, created_at=now)
        for n in range(2_000)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
