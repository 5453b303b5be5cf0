"""The embedded setup: the same worker inside the web process, on kombu's in-memory broker.

Runs in both passes: on SQLite (a file, shared by the threads and processes) and on PostgreSQL.
"""

from __future__ import annotations

import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery.signals import task_postrun
from django.db import connection

from agentops.celery import EmbeddedWorker, app
from agentops.tasks import advance_run
from runtime import submit
from runtime.models import Run, RunStatus
from tests.reliability.agents import EFFECTS_ENV, one_call, read_records
from tests.reliability.harness import Cluster, holds, overlapping_spans, settled
from tests.support.processes import free_port, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _purge() -> None:
    from django.conf import settings

    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge(settings.CELERY_TASK_DEFAULT_QUEUE)


@pytest.fixture
def embedded(
    agent: Any, settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[tuple[str, bool]]]:
    """An EmbeddedWorker in this process, dispatching for real; yields its deliveries."""
    monkeypatch.setenv(EFFECTS_ENV, str(tmp_path))
    settings.AGENTOPS_DISPATCH = "agentops.tasks.enqueue"
    settings.AGENTOPS_HEARTBEAT = True
    settings.AGENTOPS_SWEEP_SECONDS = 0.5
    previous = (app.conf.broker_url, app.conf.broker_transport_options)
    app.conf.broker_url = "memory://localhost/"
    app.conf.broker_transport_options = {"polling_interval": 0.05}
    _purge()
    delivered: list[tuple[str, bool]] = []

    def record(sender: Any = None, args: Any = None, retval: Any = None, **kwargs: Any) -> None:
        if sender is not None and sender.name == "agentops.advance_run":
            delivered.append((args[0], retval))

    task_postrun.connect(record, weak=False)
    worker = EmbeddedWorker(concurrency=4)
    worker.start()
    try:
        yield delivered
    finally:
        worker.stop()
        task_postrun.disconnect(record)
        _purge()
        app.conf.broker_url, app.conf.broker_transport_options = previous


def test_the_embedded_worker_advances_each_run_once_however_often_it_is_delivered(
    embedded: list[tuple[str, bool]], agent: Any, tmp_path: Path, observe: Any
) -> None:
    # Each submit hands its run over once after commit; then 1 to 3 more copies arrive.
    copies = {
        submit(agent.name, one_call("lookup", seconds=0.1), actor="t").pk: n for n in (2, 3, 4)
    }
    for run_id, n in copies.items():
        for _ in range(n - 1):
            advance_run.delay(str(run_id))

    def all_delivered() -> bool:
        mine = [d for d in embedded if d[0] in {str(r) for r in copies}]
        return settled(*copies) and len(mine) >= sum(copies.values())

    wait_until(all_delivered, timeout=30, what="every delivery to be processed")
    records = read_records(tmp_path)
    for run_id in copies:
        assert Run.objects.get(pk=run_id).status == RunStatus.COMPLETED
        run_holds, problems = holds(run_id)
        assert (len(run_holds), problems) == (1, [])
        assert [ok for rid, ok in embedded if rid == str(run_id)].count(True) == 1
        assert records.effects[f"{run_id}:step-1/tool/toolu_01_0"] == 1
    assert overlapping_spans(records) == []
    observe(
        f"embedded worker on {connection.vendor}: runs=3 deliveries={len(embedded)} "
        f"claims=3 deliveries that did nothing={[ok for _, ok in embedded].count(False)} "
        f"duplicates={records.duplicates}"
    )


def test_serve_recovers_its_runs_after_the_process_was_killed(
    processes: Cluster, agent: Any, observe: Any
) -> None:
    """`manage.py serve` (console + embedded worker) killed at a crash window, then restarted."""
    port = free_port()
    manual = submit(agent.name, one_call("charge"), actor="t")
    first = processes.serve("serve-1", port=port, crash_at="after_handler:charge", wait=False)
    assert first.wait_exit(60) == -signal.SIGKILL
    idempotent = submit(agent.name, one_call("ticket"), actor="t")
    second = processes.serve("serve-2", port=port, crash_at="after_handler:ticket", wait=False)
    assert second.wait_exit(60) == -signal.SIGKILL

    processes.serve("serve-3", port=port)
    wait_until(lambda: settled(manual.pk, idempotent.pk), timeout=30, what="recovery")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/admin/login/", timeout=10) as page:
        assert page.status == 200  # the same process serves the console

    records = processes.records()
    manual.refresh_from_db()
    idempotent.refresh_from_db()
    assert manual.status == RunStatus.NEEDS_ATTENTION
    assert manual.blocked_operation == "step-1/tool/toolu_01_0"
    assert records.effects[f"{manual.pk}:step-1/tool/toolu_01_0"] == 1
    assert idempotent.status == RunStatus.COMPLETED
    ticket_id = f"{idempotent.pk}:step-1/tool/toolu_01_0"
    assert (records.calls[ticket_id], records.effects[ticket_id]) == (2, 1)
    observe(
        f"embedded serve: runs=2 kills=2 (SIGKILL at after_handler) restarts=2 "
        f"manual=needs_attention idempotent=completed effects={records.total_effects} "
        f"duplicates={records.duplicates}"
    )
