"""The embedded setup: the same worker inside the web process, on kombu's in-memory broker.

Runs in both passes: on SQLite (a file, shared by the threads and processes) and on PostgreSQL.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery.signals import task_postrun
from django.db import connection
from kombu import Connection, Queue
from kombu.message import Message

from agentops.celery import EmbeddedWorker, MemoryTransport, app
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


@pytest.mark.parametrize(
    ("broker", "connected_to", "transport"),
    [
        ("memory://localhost/", None, "agentops.celery:MemoryTransport"),
        ("redis://127.0.0.1:6379/0", None, "kombu.transport.redis:Transport"),
        # A test, or a worker's -b, connects to another broker than the settings' memory://.
        ("memory://localhost/", "redis://127.0.0.1:6379/0", "kombu.transport.redis:Transport"),
    ],
)
def test_a_memory_broker_is_the_in_memory_transport_that_wakes_its_consumer(
    broker: str, connected_to: str | None, transport: str
) -> None:
    program = (
        "import sys, django; django.setup(); from agentops.celery import app;"
        "t = type(app.connection_for_write(sys.argv[1] or None).transport);"
        "print(f'{t.__module__}:{t.__qualname__}')"
    )
    env = {**os.environ, "CELERY_BROKER_URL": broker}
    done = subprocess.run(
        [sys.executable, "-c", program, connected_to or ""],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == transport


def test_the_in_memory_broker_wakes_its_consumer_for_a_message_and_for_an_acknowledgement() -> None:
    # The consumer would look again only in an hour, and each wait is a minute: only the
    # broker's wake-ups can bring it the messages in time.
    url, options = "memory://localhost/", {"polling_interval": 3600}
    queue = Queue("agentops-wake-test")
    received: list[Message] = []
    arrived = threading.Semaphore(0)
    ready, done = threading.Event(), threading.Event()

    def on_message(body: Any, message: Message) -> None:
        received.append(message)
        arrived.release()

    def consume() -> None:
        with (
            Connection(url, transport=MemoryTransport, transport_options=options) as conn,
            conn.Consumer([queue], callbacks=[on_message], accept=["json"], prefetch_count=1),
        ):
            ready.set()
            while not done.is_set():
                with contextlib.suppress(TimeoutError):
                    conn.drain_events(timeout=60)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    assert ready.wait(10)
    # The web threads publish on connections of their own.
    with Connection(url, transport=MemoryTransport, transport_options=options) as conn:
        producer = conn.Producer(serializer="json")
        producer.publish({"n": 1}, routing_key=queue.name, declare=[queue])
        assert arrived.acquire(timeout=20), "a message did not wake the consumer"
        producer.publish({"n": 2}, routing_key=queue.name, declare=[queue])
        # At its prefetch limit, the second waits for the first's acknowledgement.
        assert not arrived.acquire(timeout=0.5)
        done.set()
        received[0].ack()  # from another thread, as a task thread acknowledges
        assert arrived.acquire(timeout=20), "an acknowledgement did not wake the consumer"
        received[1].ack()
    assert [m.payload for m in received] == [{"n": 1}, {"n": 2}]
    consumer.join(20)
    assert not consumer.is_alive()


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
