"""E5, the fold: a call's outcome shares its commit with the next call's intent, and a crash
between them behaves as the crash windows say (runtime/faults.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection

from runtime import faults, submit
from runtime.models import Event, EventKind, Operation, OperationStatus, RunStatus
from runtime.testing import SimulatedCrash, crash_at, recover, run_until_idle
from tests.conftest import make_agent, one_call

TOOL = "step-1/tool/toolu_01_0"
NEXT = "step-2/model"


@contextmanager
def crash_at_key(window: str, key: str) -> Iterator[list[str]]:
    """Crash once when `window` is reached for the operation `key`."""
    crashed: list[str] = []

    def crash(reached: str, run: Any, reached_key: str, operation: str) -> None:
        if (reached, reached_key) == (window, key) and not crashed:
            crashed.append(reached_key)
            raise SimulatedCrash(f"crash at {window} of {key}")

    previous, faults.handler = faults.handler, crash
    try:
        yield crashed
    finally:
        faults.handler = previous


def test_e5_a_crash_before_the_next_intent_leaves_the_held_outcome_unwritten(define, effects):
    agent = define(make_agent(one_call("get_order")))
    run = submit(agent.name, "please", actor="alice")
    with crash_at_key("before_intent", NEXT) as crashed, pytest.raises(SimulatedCrash):
        run_until_idle(run.pk)
    assert crashed == [NEXT]
    # The handler ran, its outcome was held for the next intent: nothing of it is written, as
    # after "after_handler".
    op = Operation.objects.get(run=run, key=TOOL)
    assert (op.status, op.result) == (OperationStatus.STARTED, None)
    assert not run.events.filter(kind=EventKind.OUTCOME, operation_key=TOOL).exists()
    assert not Operation.objects.filter(run=run, key=NEXT).exists()
    run = recover(run.pk)
    # ... so recovery treats it as "after_handler" says: the safe call runs again.
    assert run.status == RunStatus.COMPLETED
    assert (Operation.objects.get(run=run, key=TOOL).attempts, effects.total) == (2, 2)


def test_e5_a_crash_during_a_folded_outcome_rolls_back_the_next_intent_with_it(define, effects):
    agent = define(make_agent(one_call("get_order")))
    run = submit(agent.name, "please", actor="alice")
    with crash_at("during_outcome", tool="get_order"), pytest.raises(SimulatedCrash):
        run_until_idle(run.pk)
    assert Operation.objects.get(run=run, key=TOOL).status == OperationStatus.STARTED
    assert not Operation.objects.filter(run=run, key=NEXT).exists()
    assert not run.events.filter(operation_key__in=[TOOL, NEXT], kind=EventKind.OUTCOME).exists()


def test_e5_after_a_folded_outcome_the_next_intent_is_committed_too(define, effects):
    agent = define(make_agent(one_call("get_order")))
    run = submit(agent.name, "please", actor="alice")
    with crash_at("after_outcome", tool="get_order"), pytest.raises(SimulatedCrash):
        run_until_idle(run.pk)
    assert Operation.objects.get(run=run, key=TOOL).status == OperationStatus.COMPLETED
    assert Operation.objects.get(run=run, key=NEXT).status == OperationStatus.STARTED
    run = recover(run.pk)
    # The outcome is replayed, never re-run; the next request was interrupted and runs again.
    assert run.status == RunStatus.COMPLETED
    assert (effects.total, Operation.objects.get(run=run, key=TOOL).attempts) == (1, 1)
    assert Operation.objects.get(run=run, key=NEXT).attempts == 2


def _commits_of_events(run_id: Any, advance: Any) -> dict[tuple[str, str], str]:
    """Which commit wrote each intent and outcome event of the run, when `advance()` runs it.

    PostgreSQL: the transaction id that wrote the row (xmin). SQLite: the number of COMMITs
    traced on the connection before the event's INSERT.
    """
    if connection.vendor == "postgresql":
        advance()
        rows = Event.objects.filter(run_id=run_id, kind__in=[EventKind.INTENT, EventKind.OUTCOME])
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT kind, operation_key, xmin::text FROM {Event._meta.db_table} "
                "WHERE id = ANY(%s)",
                [list(rows.values_list("pk", flat=True))],
            )
            return {(kind, key): xmin for kind, key, xmin in cursor.fetchall()}
    connection.ensure_connection()
    statements: list[str] = []
    connection.connection.set_trace_callback(statements.append)
    try:
        advance()
    finally:
        connection.connection.set_trace_callback(None)
    table = Event._meta.db_table
    found: dict[tuple[str, str], str] = {}
    commits = 0
    for sql in statements:
        if sql.strip().upper().startswith("COMMIT"):
            commits += 1
        elif sql.lstrip().startswith(f'INSERT INTO "{table}"') or sql.lstrip().startswith(
            f"INSERT INTO {table}"
        ):
            # One statement may insert several events (a record carrying an outcome): a row each.
            for row in re.split(r"\)\s*,\s*\(", sql.partition("VALUES")[2]):
                for kind in (EventKind.INTENT, EventKind.OUTCOME):
                    for key in ("step-1/model", TOOL, NEXT):
                        if f"'{kind}'" in row and f"'{key}'" in row:
                            found[kind, key] = str(commits)
    return found


@pytest.mark.django_db(transaction=True)
def test_e5_an_outcome_is_committed_with_the_next_intent_not_after_it(define, effects):
    agent = define(make_agent(one_call("get_order")))
    run = submit(agent.name, "please", actor="alice")
    commit = _commits_of_events(run.pk, lambda: run_until_idle(run.pk))
    assert Operation.objects.get(run=run, key=NEXT).status == OperationStatus.COMPLETED
    # Each outcome shares the commit of the next call's intent: one commit per call.
    assert commit[EventKind.OUTCOME, "step-1/model"] == commit[EventKind.INTENT, TOOL]
    assert commit[EventKind.OUTCOME, TOOL] == commit[EventKind.INTENT, NEXT]
    # ... and each call's intent is a commit of its own, before its call.
    intents = {commit[EventKind.INTENT, key] for key in ("step-1/model", TOOL, NEXT)}
    assert len(intents) == 3
