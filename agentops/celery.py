"""The Celery app that executes runs, its sweep, and the worker embedded in the web process.

Configured from the CELERY_* Django settings. Every worker runs the same two things:
- the `agentops.advance_run` task (agentops/tasks.py), one delivery per run id;
- the `Sweep` bootstep: on start it discovers every run that can move (startup discovery),
  then, every AGENTOPS_SWEEP_SECONDS, it hands the workers the runs whose message was lost, whose
  lease expired or whose retry timer is due. It runs on the worker's own timer, so there is no
  beat process to deploy or to lose: any number of workers sweep, and since claiming is the only
  door into `running`, a run handed over twice is advanced once.

Production: `celery -A agentops worker` processes on a Redis broker, on any number of machines.
Embedded: `manage.py serve` runs the same worker (`EmbeddedWorker`) inside the web process on
kombu's in-memory transport, so the console, the worker and the in-memory channel layer share one
process and nothing has to be installed.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from queue import Empty
from typing import Any

from celery import Celery, bootsteps
from celery.signals import task_postrun, task_prerun
from django.db import close_old_connections
from kombu.transport import TRANSPORT_ALIASES, memory

from agentops.integrations.worker import OutboxSweep
from runtime import threads

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")

log = logging.getLogger(__name__)

app = Celery("agentops")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


class Sweep(bootsteps.StartStopStep):
    """Startup discovery, then the periodic sweep, on the worker's timer.

    A worker-side timer rather than Celery beat: nothing extra to run or to keep single, the
    embedded worker gets it for free, and a backlog in the task queue cannot delay it (a beat
    schedule is itself a message waiting behind that backlog). The price is one cheap indexed
    query per worker per interval and duplicate messages for a due run, which the claim absorbs.
    """

    requires = {"celery.worker.components:Timer"}

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self._timer_entry: Any = None

    def start(self, parent: Any) -> None:
        from django.conf import settings

        from agentops.tasks import sweep

        sweep(reason="worker start")
        self._timer_entry = parent.timer.call_repeatedly(
            float(settings.AGENTOPS_SWEEP_SECONDS), sweep
        )

    def stop(self, parent: Any) -> None:
        if self._timer_entry is not None:
            self._timer_entry.cancel()
            self._timer_entry = None

    terminate = stop


@task_prerun.connect
@task_postrun.connect
def _close_old_connections(**kwargs: Any) -> None:
    """Around each task, as Django does around each request: a connection past CONN_MAX_AGE,
    or one that failed, is closed, and the next query checks the one it keeps (so a worker
    reconnects after a database restart). Celery's own closing of every connection is off
    (CELERY_DB_REUSE_MAX)."""
    close_old_connections()


app.steps["worker"].add(Sweep)
# Webhooks, notifications and the metrics fold: agentops/integrations/worker.py.
app.steps["worker"].add(OutboxSweep)


class _Changes:
    """A count of the in-memory broker's changes that a consumer may wait on: a message put on
    a queue, or one acknowledged or rejected (a worker at its prefetch limit may take another).
    Its queues are the process's, so the count is too."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._count = 0

    def seen(self) -> int:
        with self._condition:
            return self._count

    def changed(self) -> None:
        with self._condition:
            self._count += 1
            self._condition.notify_all()

    def wait_after(self, seen: int, timeout: float | None) -> None:
        """Until a change after `seen`, or `timeout` seconds."""
        with self._condition:
            self._condition.wait_for(lambda: self._count != seen, timeout)


_CHANGES = _Changes()


class MemoryChannel(memory.Channel):  # type: ignore[misc]
    def _put(self, queue: str, message: Any, **kwargs: Any) -> None:
        super()._put(queue, message, **kwargs)
        _CHANGES.changed()

    def _put_fanout(
        self, exchange: str, message: Any, routing_key: Any = None, **kwargs: Any
    ) -> None:
        super()._put_fanout(exchange, message, routing_key, **kwargs)
        _CHANGES.changed()

    def basic_ack(self, delivery_tag: Any, multiple: bool = False) -> None:
        super().basic_ack(delivery_tag, multiple)
        _CHANGES.changed()

    def basic_reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        super().basic_reject(delivery_tag, requeue)
        _CHANGES.changed()


class MemoryTransport(memory.Transport):  # type: ignore[misc]
    """kombu's in-memory transport, whose consumer wakes when a message arrives or a task is
    acknowledged: every memory:// broker of the process (the embedded setup's) is this one.

    kombu's sleeps its polling interval whenever it finds nothing it may take. With
    acknowledgement after the task (CELERY_TASK_ACKS_LATE) and a prefetch of one task per
    thread, a worker thread that finished waited for that sleep before its next task: the
    embedded worker ran at most its threads' count of runs per polling interval (40 runs/s with
    4 threads and 0.1 s, where one process alone advanced 90). The interval is now only the
    longest wait between two looks.
    """

    Channel = MemoryChannel

    def drain_events(self, connection: Any, timeout: float | None = None, **kwargs: Any) -> None:
        started = time.monotonic()
        while True:
            seen = _CHANGES.seen()
            try:
                self.cycle.get(self._deliver, timeout=timeout)  # type: ignore[attr-defined]
                return
            except Empty:
                left = None if timeout is None else timeout - (time.monotonic() - started)
                if left is not None and left <= 0:
                    raise TimeoutError from None
                limits = [x for x in (self.polling_interval, left) if x is not None]
                _CHANGES.wait_after(seen, min(limits, default=None))


# By the URL's scheme, so that a connection to any other broker (a test's, a worker's `-b`) is
# kombu's own: `broker_transport` would apply to every URL.
TRANSPORT_ALIASES["memory"] = f"{__name__}:MemoryTransport"


class EmbeddedWorker:
    """The Celery worker inside the web process (`manage.py serve` on the memory:// broker).

    A plain WorkController in a thread, with a thread pool: the same task, the same sweep and the
    same claim as a `celery worker` process. Its messages live in this process only; when the
    process dies they are lost with it, and the next start's discovery finds their runs in the
    database.
    """

    def __init__(self, *, concurrency: int, loglevel: str = "WARNING") -> None:
        self.concurrency = concurrency
        self.loglevel = loglevel
        self.hostname = f"embedded@{socket.gethostname()}:{os.getpid()}"
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._controller: Any = None
        self._thread = threads.thread(self._run, name="agentops-worker")

    def start(self, timeout: float = 30.0) -> None:
        """Start the worker thread and wait until it consumes (or raise why it could not)."""
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError(f"the embedded worker did not start within {timeout:.0f}s")
        if self._failure is not None:
            raise RuntimeError("the embedded worker failed to start") from self._failure

    def _run(self) -> None:
        from celery.worker import WorkController

        try:
            # Built in its own thread: the Django fixup closes the building thread's connections.
            self._controller = WorkController(
                app=app,
                hostname=self.hostname,
                pool="threads",
                concurrency=self.concurrency,
                loglevel=self.loglevel,
                ready_callback=lambda consumer: self._ready.set(),
                without_heartbeat=True,
                without_mingle=True,
                without_gossip=True,
            )
            self._controller.start()
        except BaseException as exc:
            self._failure = exc
            log.exception("embedded worker stopped")
        finally:
            self._ready.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Warm shutdown: let running tasks finish for up to `timeout` seconds.

        A task still running after that dies with the process; its lease expires and the next
        start recovers the run.
        """
        from celery.worker import state

        if not self._thread.is_alive():
            return
        state.should_stop = 0
        try:
            self._thread.join(timeout)
        finally:
            state.should_stop = None


__all__ = ["EmbeddedWorker", "Sweep", "app"]
