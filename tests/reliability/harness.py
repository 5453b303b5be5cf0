"""Real worker processes for the reliability tests: start, signal, kill, publish, observe.

Every process is started in its own session (process group) and killed with its group when the
test ends, pass or fail. Workers share the test's database (its name is passed in DATABASE_URL,
or the SQLite file in AGENTOPS_SQLITE_PATH) and a Redis broker on its own DB index.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.db import connection

from runtime.models import Event, Run
from tests.reliability.agents import (
    EFFECTS_ENV,
    FENCE_LOG_ENV,
    NO_FENCE_ENV,
    Records,
    read_records,
)
from tests.support.processes import (
    REPO,
    SERVER_READY,
    WORKER_READY,
    Process,
    serve_command,
    worker_command,
)

BROKER_URL = os.environ.get("AGENTOPS_TEST_BROKER_URL", "redis://127.0.0.1:6379/1")
# Short enough to keep the suite fast, long enough for a loaded CI machine.
LEASE_SECONDS = 2.0
SWEEP_SECONDS = 0.5
VISIBILITY_TIMEOUT = 2.0

# Events that end a worker's hold on a run (it left `running`).
RELEASES = {
    "completed",
    "failed",
    "waiting",
    "retry_scheduled",
    "blocked",
    "tool_approval_requested",
    "question_requested",
    "cancelled",
    "paused",
}


def database_env() -> dict[str, str]:
    """Environment that points a subprocess at the database this test is using."""
    db = connection.settings_dict
    if connection.vendor == "postgresql":
        credentials = quote(db["USER"] or "", safe="")
        if db["PASSWORD"]:
            credentials += ":" + quote(db["PASSWORD"], safe="")
        host = db["HOST"] or "localhost"
        port = f":{db['PORT']}" if db["PORT"] else ""
        return {"DATABASE_URL": f"postgres://{credentials}@{host}{port}/{db['NAME']}"}
    return {"AGENTOPS_SQLITE_PATH": str(db["NAME"])}


class Cluster:
    """The processes of one test, its fake service's folder, and its broker."""

    def __init__(self, folder: Path, *, broker_url: str = BROKER_URL) -> None:
        self.folder = folder
        self.effects = folder / "effects"
        self.effects.mkdir(parents=True, exist_ok=True)
        self.broker_url = broker_url
        self.processes: list[Process] = []

    # --- processes -------------------------------------------------------------------------

    def _env(self, extra: dict[str, str]) -> dict[str, str]:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("AGENTOPS_", "CELERY_")) and key != "DATABASE_URL"
        }
        env.update(
            {
                "DJANGO_SETTINGS_MODULE": "agentops.settings",
                "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
                "PYTHONUNBUFFERED": "1",
                "AGENTOPS_AGENT_MODULES": "tests.reliability.agents",
                "AGENTOPS_LEASE_SECONDS": str(LEASE_SECONDS),
                "AGENTOPS_SWEEP_SECONDS": str(SWEEP_SECONDS),
                "AGENTOPS_LOG_LEVEL": "INFO",
                EFFECTS_ENV: str(self.effects),
                **database_env(),
            }
        )
        env.update(extra)
        return env

    def _start(self, name: str, command: list[str], env: dict[str, str]) -> Process:
        process = Process.start(name, command, env, self.folder / f"{name}.log")
        self.processes.append(process)
        return process

    def worker(
        self,
        name: str,
        *,
        queues: str | None = None,
        crash_at: str | None = None,
        pool: str = "solo",
        concurrency: int = 1,
        fence: bool = True,
        heartbeat: bool = True,
        wait: bool = True,
    ) -> Process:
        """Start `celery -A agentops worker`; with `wait`, return once it consumes."""
        extra = {
            "CELERY_BROKER_URL": self.broker_url,
            "AGENTOPS_BROKER_VISIBILITY_TIMEOUT": str(VISIBILITY_TIMEOUT),
            "AGENTOPS_HEARTBEAT": "1" if heartbeat else "0",
        }
        if crash_at:
            extra["AGENTOPS_CRASH_AT"] = crash_at
        if not fence:
            # Test-only: the fence check removed, and the paused worker's writes logged.
            extra[NO_FENCE_ENV] = "1"
            extra[FENCE_LOG_ENV] = "1"
        options = ["--include=tests.reliability.agents"]
        if queues:
            options.append(f"--queues={queues}")
        command = worker_command(name, pool=pool, concurrency=concurrency, options=tuple(options))
        process = self._start(name, command, self._env(extra))
        if wait:
            self.wait_ready(process)
        return process

    def wait_ready(self, *processes: Process) -> None:
        for process in processes:
            process.wait_for_log(WORKER_READY)

    def serve(
        self, name: str, *, port: int, crash_at: str | None = None, wait: bool = True
    ) -> Process:
        """Start `manage.py serve` (console + embedded worker, memory:// broker)."""
        extra = {"AGENTOPS_CRASH_AT": crash_at} if crash_at else {}
        command = serve_command(f"127.0.0.1:{port}")
        process = self._start(name, command, self._env(extra))
        if wait:
            process.wait_for_log(SERVER_READY)
        return process

    def stop_all(self) -> None:
        for process in self.processes:
            process.kill()

    # --- the broker ------------------------------------------------------------------------

    def publish(self, run_id: Any, *, queue: str | None = None, copies: int = 1) -> None:
        """Deliver `copies` messages for the run to the test broker, as the dispatch hook would."""
        from agentops.celery import app
        from agentops.tasks import advance_run

        with app.connection_for_write(self.broker_url) as conn:
            for _ in range(copies):
                advance_run.apply_async(
                    args=[str(run_id)],
                    connection=conn,
                    queue=queue or settings.CELERY_TASK_DEFAULT_QUEUE,
                )

    # --- observations ----------------------------------------------------------------------

    def records(self) -> Records:
        return read_records(self.effects)

    def deliveries(self, run_id: Any) -> tuple[int, int]:
        """(advanced, nothing done) deliveries of the run, from every worker's log."""
        advanced = sum(p.count(f"run {run_id}: advanced") for p in self.processes)
        idle = sum(p.count(f"run {run_id}: not claimable") for p in self.processes)
        return advanced, idle


@dataclass(frozen=True)
class Hold:
    """A worker's claim on a run, from its `claimed` event to the event that ended it."""

    owner: str
    fence: int
    start: dt.datetime
    end: dt.datetime | None
    ended_by: str


def holds(run_id: Any) -> tuple[list[Hold], list[str]]:
    """The claim intervals of a run from its event log, and every exclusivity violation.

    A claim is legal only after the previous holder released the run, or as a takeover of an
    expired lease (a `lease_expired` event in the same transaction). Intervals must not overlap.
    """
    result: list[Hold] = []
    problems: list[str] = []
    current: dict[str, Any] | None = None
    previous_kind = ""
    for event in Event.objects.filter(run_id=run_id).order_by("id"):
        if event.kind == "claimed":
            if current is not None:
                if previous_kind != "lease_expired":
                    problems.append(
                        f"{event.data['owner']} claimed at {event.created_at.isoformat()} while "
                        f"{current['owner']} held the run since {current['start'].isoformat()}"
                    )
                result.append(Hold(**current, end=event.created_at, ended_by="takeover"))
            current = {
                "owner": event.data["owner"],
                "fence": event.data["fence"],
                "start": event.created_at,
            }
        elif event.kind in RELEASES and current is not None:
            result.append(Hold(**current, end=event.created_at, ended_by=event.kind))
            current = None
        previous_kind = event.kind
    if current is not None:
        result.append(Hold(**current, end=None, ended_by="still held"))
    for before, after in itertools.pairwise(result):
        if before.end is None or before.end > after.start:
            problems.append(f"hold {before} overlaps hold {after}")
    return result, problems


def overlapping_spans(records: Records) -> list[str]:
    """Tool calls of the same run executed by two processes at overlapping times."""
    problems = []
    by_run: dict[str, list[tuple[int, float, float]]] = {}
    for run_id, pid, start, end in records.spans:
        by_run.setdefault(run_id, []).append((pid, start, end))
    for run_id, spans in by_run.items():
        latest_end: dict[int, float] = {}  # per process, the end of its latest call so far
        for pid, start, end in sorted(spans, key=lambda s: s[1]):
            others = [p for p, until in latest_end.items() if p != pid and until > start]
            if others:
                problems.append(f"run {run_id}: pid {pid} ran while pid {others[0]} did")
            latest_end[pid] = max(end, latest_end.get(pid, end))
    return problems


def settled(*run_ids: Any, statuses: tuple[str, ...] = ("queued", "running")) -> bool:
    """True when none of the runs is in `statuses` (by default: nobody has more to do)."""
    return not Run.objects.filter(pk__in=run_ids, status__in=statuses).exists()
