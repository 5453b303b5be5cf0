"""The tool calls' text the search reads, folded from the event log after the records commit
(agentops/integrations/search_index.py): a call is found the moment its record commits, before
the fold and after it, whichever way its text was written."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from agentops.integrations import pump, search_index
from agentops.integrations.models import OutboxCursor, ToolCallText
from agentops.selectors import _search
from runtime import clock, fork, resolve, respond
from runtime.models import Event, Operation, OperationKind, Run
from runtime.retention import archive_runs
from runtime.testing import run_until_idle

KEY = "step-1/tool/toolu_01_0"


def found(as_user: Any, q: str) -> set[str]:
    html = as_user("viewer").get("/runs/", {"q": q}).content.decode()
    return {str(run.pk) for run in Run.objects.all() if f"run-row-{run.pk}" in html}


def fold_everything() -> int:
    """Fold until nothing is left, in small batches (several rounds of a pass)."""
    read = 0
    while folded := search_index.fold(limit=3):
        read += folded
    return read


def folded_texts() -> dict[int, str]:
    return dict(ToolCallText.objects.values_list("operation_id", "text"))


def tool_texts() -> dict[int, str]:
    """Every tool call's text, as the search matches it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, input::text || ' ' || coalesce(result::text, '') "
            "FROM agentops_operation WHERE kind = 'tool'"
        )
        return dict(cursor.fetchall())


def approved(world: Any) -> tuple[Run, str]:
    """A refund run that completed after its approval, and its receipt."""
    run = world.run("waiting")
    respond(world.pending(run).pk, {"approved": True, "reason": ""}, actor="approver")
    run = run_until_idle(run.pk)
    return run, str(Operation.objects.get(run=run, key=KEY).result["receipt_id"])


@pytest.mark.postgres
def test_a_receipt_is_found_before_the_fold_from_the_events_and_after_it_from_the_index(
    world, as_user
):
    run, receipt = approved(world)
    other = world.run("completed")
    assert not ToolCallText.objects.exists()
    assert found(as_user, receipt) == {str(run.pk)}  # from the calls the events name

    assert fold_everything() == Event.objects.count()
    assert folded_texts() == tool_texts() != {}
    newest = Event.objects.order_by("-pk").values_list("pk", flat=True)[0]
    assert OutboxCursor.objects.get(name=search_index.CURSOR).position == newest
    # No event is left unfolded: the run is found through the folded text alone.
    assert found(as_user, receipt) == {str(run.pk)}
    assert found(as_user, "nothing like this") == set()
    assert str(other.pk) not in found(as_user, receipt)
    assert fold_everything() == 0


@pytest.mark.postgres
def test_an_operators_verified_result_is_found_and_folded_again(world, as_user):
    run = world.run("blocked")
    fold_everything()
    before = Operation.objects.get(run=run, key=KEY)
    assert before.result is None
    assert folded_texts()[before.pk] == tool_texts()[before.pk]

    resolve(run.pk, KEY, {"receipt_id": "rcpt-verified-7"}, evidence="seen", actor="bob")
    # The folded text is the old one; the event after the cursor names the call.
    assert "rcpt-verified-7" not in folded_texts()[before.pk]
    assert found(as_user, "rcpt-verified-7") == {str(run.pk)}
    fold_everything()
    assert "rcpt-verified-7" in folded_texts()[before.pk]
    assert folded_texts() == tool_texts()
    assert found(as_user, "rcpt-verified-7") == {str(run.pk)}


@pytest.mark.postgres
def test_a_forks_copied_calls_are_found_and_folded(world, as_user):
    run, receipt = approved(world)
    fold_everything()
    child = fork(run.pk, "step-2/model", actor="bob")
    copied = Operation.objects.get(run=child, key=KEY)
    assert copied.result["receipt_id"] == receipt
    # Copied with one event for the whole fork, which names no call.
    assert found(as_user, receipt) == {str(run.pk), str(child.pk)}
    fold_everything()
    assert folded_texts()[copied.pk] == tool_texts()[copied.pk]
    assert found(as_user, receipt) == {str(run.pk), str(child.pk)}


@pytest.mark.postgres
def test_an_archived_run_takes_its_folded_text_with_it(world, tmp_path):
    run, _ = approved(world)
    fold_everything()
    ops = list(Operation.objects.filter(run=run, kind=OperationKind.TOOL).values_list("pk"))
    assert ops and ToolCallText.objects.filter(operation_id__in=[pk for (pk,) in ops]).exists()
    with clock.frozen(clock.now() + dt.timedelta(days=100)):
        report = archive_runs(dt.timedelta(days=30), to=tmp_path)
    assert report.runs >= 1 and report.rows["integrations.toolcalltext"] >= 1
    assert not Run.objects.filter(pk=run.pk).exists()
    assert not ToolCallText.objects.filter(operation_id__in=[pk for (pk,) in ops]).exists()


def test_the_outbox_pass_folds_and_the_receipt_is_found_on_either_database(world, as_user):
    run, receipt = approved(world)
    pump.pump()  # what every worker's outbox timer runs
    folded = fold_everything()
    if connection.vendor == "postgresql":
        assert folded == 0  # the pass folded everything
        assert folded_texts() == tool_texts() != {}
    else:  # no trigram index: the search reads the calls themselves, and nothing is folded
        assert folded == 0
        assert not ToolCallText.objects.exists()
        assert not OutboxCursor.objects.filter(name=search_index.CURSOR).exists()
    assert found(as_user, receipt) == {str(run.pk)}


def _migrate(*targets: tuple[str, str]) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(list(targets) or executor.loader.graph.leaf_nodes())
    executor.loader.build_graph()


def _indexes() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE indexname LIKE '%%_trgm'")
        return {row[0] for row in cursor.fetchall()}


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_migration_fills_the_text_and_moves_the_index_both_ways(world):
    run, receipt = approved(world)
    _migrate(
        ("integrations", "0002_rule_routes_slack_bot"),
        ("agentops", "0011_audit_index_leaves_out_the_runtime"),
    )
    assert "operation_search_trgm" in _indexes()
    assert "tool_call_text_trgm" not in _indexes()

    _migrate()
    assert "operation_search_trgm" not in _indexes()
    assert "tool_call_text_trgm" in _indexes()
    assert folded_texts() == tool_texts() != {}
    newest = Event.objects.order_by("-pk").values_list("pk", flat=True)[0]
    position = OutboxCursor.objects.get(name=search_index.CURSOR).position
    assert position == max(0, newest - 1000)
    # (The search's own query: a transactional test has no console users to log in.)
    assert list(Run.objects.filter(_search(receipt)).values_list("pk", flat=True)) == [run.pk]
