"""Runs on real workers survive crashes of the whole PostgreSQL server, WAL replay and all.

The test starts its own server (tests/reliability/own_postgres.py), migrates a database on it and
points real `celery worker` processes at it. Two waves of runs, each calling a tool of every
recovery policy, are worked while the server is crashed twice with an immediate stop, each time
while runs are in flight: once restarted at once, once left down longer than a lease. Nobody
restarts a worker: each must reconnect by itself. When the runs have settled, calls left
uncertain are reconciled from the fake service's records as an operator would, and then every run
must be completed, each charge and ticket made exactly once, each notice sent at most once.

The test process's own Django keeps to the test database; the operators' actions run as
`manage.py shell` processes on the own server (tests/reliability/restart_desk.py) and the checks
read it with psycopg.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.conf import settings

from runtime.keys import operation_id
from tests.reliability.conftest import STRICT
from tests.reliability.harness import LEASE_SECONDS, SWEEP_SECONDS, Cluster
from tests.reliability.own_postgres import OwnPostgres, missing
from tests.support.processes import REPO, Process, wait_until
from tests.support.redis_db import flush_redis

pytestmark = pytest.mark.postgres

DATABASE = "agentops"
WORKERS = 2
WAVE = 8  # runs per wave; two waves
# Lines a worker logs: a claim that worked a run, a delivery that met the server down (its
# message is acknowledged; the sweep hands the run over again), and any error.
ADVANCED = ": advanced"
DELIVERY_FAILED = "raised unexpected: OperationalError"
ERROR = "ERROR/"
UNFINISHED = ("queued", "running", "retry_wait")


class OwnServerCluster(Cluster):
    """The harness's cluster, its processes on the own server's database."""

    def __init__(self, folder: Path, *, broker_url: str, database_url: str) -> None:
        super().__init__(folder, broker_url=broker_url)
        self.database_url = database_url

    def _env(self, extra: dict[str, str]) -> dict[str, str]:
        env = super()._env(extra)
        env["DATABASE_URL"] = self.database_url
        return env

    def manage(self, *args: str) -> str:
        """`manage.py <args>` on the own server; a submit's messages go to the test broker."""
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=REPO,
            env=self._env({"CELERY_BROKER_URL": self.broker_url}),
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stderr[-3000:]}"
        return done.stdout

    def desk(self, call: str) -> Any:
        """One operator action of restart_desk, e.g. `submit_runs(0, 12)`; its JSON answer."""
        code = f"from tests.reliability.restart_desk import *; {call}"
        return json.loads(self.manage("shell", "-c", code).strip().splitlines()[-1])


@pytest.fixture
def server() -> Iterator[OwnPostgres]:
    """A PostgreSQL server of the test's own, with an empty database; removed after."""
    reason = missing()
    if reason is not None:
        message = f"{reason}: the test starts (and crashes) a PostgreSQL server of its own"
        if STRICT:
            pytest.fail(message)
        pytest.skip(message)
    own = OwnPostgres()
    try:
        own.initdb()
        own.start()
        own.create_database(DATABASE)
        yield own
    finally:
        own.destroy()


@pytest.fixture
def cluster(server: OwnPostgres, broker_url: str, tmp_path: Path) -> Iterator[OwnServerCluster]:
    flush_redis(broker_url)
    own = OwnServerCluster(tmp_path, broker_url=broker_url, database_url=server.url(DATABASE))
    try:
        yield own
    finally:
        own.stop_all()
        flush_redis(broker_url)


def query(server: OwnPostgres, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(server.url(DATABASE), connect_timeout=5) as conn:
        return conn.execute(sql).fetchall()


def statuses(server: OwnPostgres) -> Counter[str]:
    return Counter(dict(query(server, "SELECT status, count(*) FROM agentops_run GROUP BY 1")))


def crash_in_flight(server: OwnPostgres, down_seconds: float) -> int:
    """Crash the server while a worker holds a run; the number of runs held at the crash."""
    held = wait_until(lambda: statuses(server)["running"], timeout=30, what="a run in flight")
    server.restart(down_seconds)
    return int(held)


def settle(server: OwnPostgres) -> None:
    wait_until(
        lambda: not any(statuses(server)[s] for s in UNFINISHED),
        timeout=60,
        what="every run to settle",
        interval=0.2,
    )


def blocked(server: OwnPostgres) -> int:
    return int(
        query(
            server,
            "SELECT count(*) FROM agentops_run WHERE status = 'needs_attention'"
            " AND attention_reason = 'uncertain_operation'",
        )[0][0]
    )


def tool_operations(server: OwnPostgres) -> list[tuple[str, str]]:
    """(operation id, tool) of every tool call the runs logged."""
    rows = query(server, "SELECT run_id, key, name FROM agentops_operation WHERE kind = 'tool'")
    return [(operation_id(run_id, key), name) for run_id, key, name in rows]


def quiet(workers: list[Process]) -> bool:
    """No worker logs an error over four sweeps: the sweeps reach the database again."""
    before = [w.count(ERROR) for w in workers]
    time.sleep(4 * SWEEP_SECONDS)
    return [w.count(ERROR) for w in workers] == before


def probe(cluster: OwnServerCluster, worker: Process, *, queue: str, run_id: str) -> None:
    """Deliver a finished run to this worker alone: its claim reads the database, so it
    answers only if the worker's tasks reach the restarted server."""
    answer = f"run {run_id}: not claimable"
    before = worker.count(answer)
    cluster.publish(run_id, queue=queue)
    wait_until(lambda: worker.count(answer) > before, timeout=20, what=f"{worker.name}'s answer")


def test_runs_survive_crashes_of_the_whole_postgresql_server(server, cluster, observe) -> None:
    started = time.monotonic()
    cluster.manage("migrate", "--noinput", "-v0")
    # Each worker also listens on a queue of its own, for the probe at the end.
    names = [f"pg-restart-{n}" for n in range(WORKERS)]
    default = settings.CELERY_TASK_DEFAULT_QUEUE
    workers = [cluster.worker(name, queues=f"{default},{name}", wait=False) for name in names]
    ids = cluster.desk(f"register_agent(); submit_runs(0, {WAVE})")
    cluster.wait_ready(*workers)
    # First crash: restarted at once, runs in flight.
    held = [crash_in_flight(server, down_seconds=0.2)]
    # Submitting works on the restarted server; then the second crash, down past the lease,
    # so that the held runs' leases expire during the outage.
    ids += cluster.desk(f"submit_runs({WAVE}, {WAVE})")
    advanced_before = [w.count(ADVANCED) for w in workers]
    held.append(crash_in_flight(server, down_seconds=LEASE_SECONDS + 1.0))

    settle(server)
    reconciled: list[str] = []
    while blocked(server):
        reconciled += cluster.desk("reconcile()")
        settle(server)
    seconds = time.monotonic() - started

    records = cluster.records()
    operations = tool_operations(server)
    by_tool: dict[str, list[int]] = {}
    for op_id, name in operations:
        by_tool.setdefault(name, []).append(records.effects[op_id])
    ends = statuses(server)
    # Effects beyond one, of the tools whose calls are not harmless to repeat.
    duplicates = sum(
        max(0, n - 1) for name in ("charge", "ticket", "notify") for n in by_tool[name]
    )
    # Runs that did not complete, and charges and tickets that never took effect.
    lost = sum(n for status, n in ends.items() if status != "completed")
    lost += sum(1 for name in ("charge", "ticket") for n in by_tool[name] if n == 0)
    worked_after = [w.count(ADVANCED) - b for w, b in zip(workers, advanced_before, strict=True)]
    alive = [w.alive() for w in workers]
    failed_deliveries = sum(w.count(DELIVERY_FAILED) for w in workers)
    takeovers = query(server, "SELECT count(*) FROM agentops_event WHERE kind = 'lease_expired'")
    observe(
        f"runs={len(ids)} {' '.join(f'{k}={v}' for k, v in sorted(ends.items()))} "
        f"restarts={server.restarts} crash_recoveries={server.crash_recoveries()} "
        f"in_flight_at_crash={held} effects={records.total_effects} duplicates={duplicates} "
        f"lost={lost} reconciled={len(reconciled)} takeovers={takeovers[0][0]} "
        f"failed_deliveries={failed_deliveries} workers_alive={sum(alive)}/{WORKERS} "
        f"claims_per_worker_after_last_crash={worked_after} seconds={seconds:.1f}"
    )

    assert server.restarts == 2
    # Each start after an immediate stop replayed the WAL.
    assert server.crash_recoveries() == 2
    assert all(held), held
    assert ends == Counter({"completed": 2 * WAVE}), ends
    assert len(by_tool["charge"]) == len(by_tool["ticket"]) == 2 * WAVE
    assert duplicates == 0
    assert lost == 0
    assert all(n == 1 for n in by_tool["charge"] + by_tool["ticket"])
    assert all(n <= 1 for n in by_tool["notify"])
    assert all(n >= 1 for n in by_tool["lookup"])
    # No worker was restarted: each kept running, and its sweep and its tasks reach the
    # restarted server again by themselves.
    assert all(alive), [w.text()[-3000:] for w in workers if not w.alive()]
    assert quiet(workers)
    for name, worker in zip(names, workers, strict=True):
        probe(cluster, worker, queue=name, run_id=ids[0])
