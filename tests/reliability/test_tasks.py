"""The Celery task and the dispatch hook, in process: ids only, after commit, no-op deliveries.

These run in both passes (SQLite and PostgreSQL) and need no broker.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from celery import signals
from celery.fixups.django import DjangoWorkerFixup
from django.db import connection, transaction

from agentops import tasks
from agentops.celery import Sweep, app
from runtime import cancel, engine, store, submit
from runtime.models import Event, Interaction, Operation, Run, RunStatus
from runtime.testing import SimulatedCrash, crash_at, recover, run_until_idle
from tests.reliability.agents import EFFECTS_ENV, one_call, plan

pytestmark = pytest.mark.django_db(transaction=True)


def _snapshot(run_id: Any) -> tuple[Any, ...]:
    return (
        list(Run.objects.filter(pk=run_id).values()),
        list(Event.objects.filter(run_id=run_id).order_by("id").values_list("id", flat=True)),
        list(Operation.objects.filter(run_id=run_id).order_by("pk").values()),
        list(Interaction.objects.filter(run_id=run_id).order_by("pk").values()),
    )


def _rows_changed() -> int | None:
    """Rows inserted, updated or deleted so far on this SQLite connection (None elsewhere)."""
    if connection.vendor != "sqlite":
        return None
    connection.ensure_connection()
    return int(connection.connection.total_changes)


def _make(state: str, agent: Any) -> Run:
    """A run in `state`, none of which a delivery may claim."""
    if state == "completed":
        run = submit(agent.name, one_call("lookup"), actor="t")
        run_until_idle(run.pk)
    elif state == "held by another worker":
        run = submit(agent.name, one_call("lookup"), actor="t")
        store.claim(run.pk, "another-worker")
    elif state == "waiting for a person":
        run = submit(agent.name, plan([("ask_operator", {"question": "ok?"})]), actor="t")
        run_until_idle(run.pk)
    elif state == "retry timer not due":
        run = submit(
            agent.name, plan([("lookup", {"order_id": "A1"})], model_errors=(1,)), actor="t"
        )
        run_until_idle(run.pk)
    elif state == "blocked on an uncertain call":
        run = submit(agent.name, one_call("charge"), actor="t")
        with crash_at("after_intent", tool="charge"), pytest.raises(SimulatedCrash):
            recover(run.pk)
        recover(run.pk)
    else:
        run = submit(agent.name, one_call("lookup"), actor="t")
        cancel(run.pk, actor="t")
    run.refresh_from_db()
    return run


STATES = {
    "completed": RunStatus.COMPLETED,
    "held by another worker": RunStatus.RUNNING,
    "waiting for a person": RunStatus.WAITING,
    "retry timer not due": RunStatus.RETRY_WAIT,
    "blocked on an uncertain call": RunStatus.NEEDS_ATTENTION,
    "cancelled": RunStatus.CANCELLED,
}


@pytest.mark.parametrize("state", STATES)
def test_it_does_nothing_and_writes_nothing_for_a_run_it_cannot_claim(
    agent: Any, state: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(EFFECTS_ENV, str(tmp_path))
    run = _make(state, agent)
    assert run.status == STATES[state]
    before = _snapshot(run.pk)
    changes = _rows_changed()
    assert tasks.advance_run(str(run.pk)) is False
    # Every runtime write sets updated_at or appends an event, so an equal snapshot means no
    # write; on SQLite the connection also counts every row it changed.
    assert _snapshot(run.pk) == before
    assert _rows_changed() == changes


def test_it_advances_a_claimable_run(agent: Any, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv(EFFECTS_ENV, str(tmp_path))
    run = submit(agent.name, one_call("lookup"), actor="t")
    assert tasks.advance_run(str(run.pk)) is True
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED


@pytest.fixture
def worker_fixup() -> Iterator[None]:
    """Celery's Django fixup, installed as a worker process installs it."""
    fixup = DjangoWorkerFixup(app).install()
    yield
    signals.task_prerun.disconnect(fixup.on_task_prerun)
    signals.task_postrun.disconnect(fixup.on_task_postrun)
    signals.worker_process_init.disconnect(fixup.on_worker_process_init)
    signals.beat_embedded_init.disconnect(fixup.close_database)


def _deliver(run_id: Any) -> int:
    """One delivery of advance_run as a worker runs it, between its task's signals: the
    PostgreSQL backend that served it (read before the task's end hands its connection back)."""
    task = tasks.advance_run
    args = (str(run_id),)
    signals.task_prerun.send(sender=task, task_id="t", task=task, args=args, kwargs={})
    assert task(*args)
    assert connection.connection is not None
    backend = int(connection.connection.info.backend_pid)
    signals.task_postrun.send(sender=task, task_id="t", task=task, args=args, kwargs={})
    return backend


def _open_backends() -> set[int]:
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as other:
        rows = other.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        ).fetchall()
    return {pid for (pid,) in rows}


@pytest.mark.postgres
def test_a_worker_keeps_its_database_connection_from_one_run_to_the_next(
    agent: Any, worker_fixup: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A new connection costs a PostgreSQL backend and its slow first statements on every claim:
    # the second run is served by a backend that was open before it (kept by the worker, or by
    # its process's pool), not by a new one.
    monkeypatch.setenv(EFFECTS_ENV, str(tmp_path))
    first, second = (submit(agent.name, one_call("lookup"), actor="t") for _ in range(2))
    _deliver(first.pk)
    open_before = _open_backends()
    assert _deliver(second.pk) in open_before


@pytest.mark.postgres
def test_a_worker_reconnects_when_its_kept_connection_died(
    agent: Any, worker_fixup: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As after a restart of the database server: the kept connection's backend is gone.
    monkeypatch.setenv(EFFECTS_ENV, str(tmp_path))
    first, second = (submit(agent.name, one_call("lookup"), actor="t") for _ in range(2))
    dead = _deliver(first.pk)
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [dead])
    assert _deliver(second.pk) != dead
    second.refresh_from_db()
    assert second.status == RunStatus.COMPLETED


class _Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []

    def delay(self, *args: Any) -> None:
        self.sent.append(args)


def test_it_hands_a_run_to_the_workers_only_after_its_transaction_commits(
    agent: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.AGENTOPS_DISPATCH = "agentops.tasks.enqueue"
    recorder = _Recorder()
    monkeypatch.setattr(tasks, "advance_run", recorder)
    with transaction.atomic():
        run = submit(agent.name, one_call("lookup"), actor="t")
        assert recorder.sent == []  # a worker could not see the run yet
    assert recorder.sent == [(str(run.pk),)]  # the id as a string, nothing else


def test_it_hands_nothing_over_when_the_transaction_rolls_back(
    agent: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.AGENTOPS_DISPATCH = "agentops.tasks.enqueue"
    recorder = _Recorder()
    monkeypatch.setattr(tasks, "advance_run", recorder)
    with pytest.raises(RuntimeError), transaction.atomic():
        submit(agent.name, one_call("lookup"), actor="t")
        raise RuntimeError("the request failed after submitting")
    assert recorder.sent == []
    assert not Run.objects.exists()


def test_the_sweep_hands_over_exactly_the_runs_that_can_move(
    agent: Any, settings: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(EFFECTS_ENV, str(tmp_path))
    settings.AGENTOPS_DISPATCH = "agentops.tasks.enqueue"
    recorder = _Recorder()
    monkeypatch.setattr(tasks, "advance_run", recorder)
    queued = submit(agent.name, one_call("lookup"), actor="t")
    held = submit(agent.name, one_call("lookup", order_id="A2"), actor="t")
    store.claim(held.pk, "a-live-worker")
    done = submit(agent.name, one_call("lookup", order_id="A3"), actor="t")
    engine.advance(done.pk)
    recorder.sent.clear()
    assert tasks.sweep() == [str(queued.pk)]
    assert recorder.sent == [(str(queued.pk),)]


def test_the_sweep_survives_a_failing_database(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> list[str]:
        raise RuntimeError("database unreachable")

    monkeypatch.setattr(tasks.control, "resume", broken)
    assert tasks.sweep() == []


def test_deliveries_are_at_least_once_one_at_a_time() -> None:
    assert tasks.advance_run.acks_late is True
    assert tasks.advance_run.reject_on_worker_lost is True
    assert app.conf.task_acks_late is True
    assert app.conf.worker_prefetch_multiplier == 1
    assert Sweep in app.steps["worker"]  # every worker sweeps
