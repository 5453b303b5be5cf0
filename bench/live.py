"""Benchmark 4: live latency, from an event's commit to the websocket frame in a client.

    .venv/bin/python -m bench.live [--runs 30] [--redis redis://127.0.0.1:6379]

Each setup runs as deployed: `manage.py serve` (daphne) with a websocket client connected to the
inbox, runs submitted one at a time and executed by the setup's worker, and the latency of every
event the inbox shows (the run's claim and its completion) measured from the event's commit to
the first frame that covers it (each frame carries the id of the newest event it reflects):

  redis     PostgreSQL, Redis channel layer and broker, one `celery -A agentops worker`;
  embedded  SQLite, `manage.py serve` alone: its in-process worker (the sweep picks the runs
            up) and the in-memory channel layer.

The consumer renders an event alone as soon as it arrives (a socket's frame budget, in
agentops/consumers.py, holds back only a stream of them): the render is part of what is
measured. The commit time is taken by the process that committed, as its publish hook starts
(`publish` below: the hook runs right after COMMIT returns). The event's created_at is taken
before its statement runs (and, for a claim, before the worker has its connection), so a latency
from it also counts the statement and its commit: both are reported, the target is the one from
the commit. The baseline, measured in the same run on the same socket: a websocket ping's round
trip.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import harness
from bench.harness import Variant
from bench.throughput import BROKER_DB, CHANNELS_DB, CeleryWorkers, _forget_queue, _redis_problem
from tests.support.processes import children, serve_command

# Another name (agentops_bench_*) lets two checkouts on one server measure at the same time.
DATABASE = os.environ.get("BENCH_LIVE_DATABASE", "agentops_bench_live")
TARGET_MS = 50
CURSOR = re.compile(r'id="live-cursor" data-event="(\d+)"')
# The file every process of a setup notes its commits in ("event-id seconds" lines).
COMMITS = "BENCH_LIVE_COMMITS"


def publish(event: Any) -> None:
    """The setup's AGENTOPS_PUBLISH: agentops.live.publish, and when the event committed."""
    from agentops import live

    committed = time.time()
    live.publish(event)
    # One short append per event: lines from several processes do not interleave.
    with Path(os.environ[COMMITS]).open("a") as notes:
        notes.write(f"{event.pk} {committed}\n")


class Client(harness.Called):
    """Submits runs and listens on the inbox socket, in a process configured like the server."""

    def __init__(self, options: dict[str, Any]) -> None:
        from django.contrib.auth.models import User
        from django.core.management import call_command
        from django.test import Client as HttpClient

        from bench import scenario
        from runtime import register

        call_command("migrate", verbosity=0, interactive=False)
        register([scenario.bench_agent], actor="bench")
        user = User.objects.create_superuser("bench", "bench@example.com", "x")
        browser = HttpClient()
        browser.force_login(user)
        self.cookie = f"sessionid={browser.cookies['sessionid'].value}"

    def measure(self, port: int, runs: int) -> dict[str, Any]:
        return asyncio.run(self._measure(port, runs))

    async def _measure(self, port: int, runs: int) -> dict[str, Any]:
        import websockets

        from bench import scenario
        from runtime import submit
        from runtime.models import Event, Run

        frames: list[tuple[float, int]] = []
        pings: list[float] = []
        url = f"ws://127.0.0.1:{port}/ws/inbox/"
        headers = {"Cookie": self.cookie, "Origin": f"http://127.0.0.1:{port}"}
        async with websockets.connect(url, additional_headers=headers) as socket_:

            async def listen() -> None:
                async for message in socket_:
                    found = CURSOR.search(str(message))
                    if found:
                        frames.append((time.time(), int(found.group(1))))

            listener = asyncio.create_task(listen())
            run_ids = []
            for _ in range(runs):
                run = await asyncio.to_thread(
                    submit, scenario.bench_agent.name, scenario.MESSAGE, actor="bench"
                )
                run_ids.append(run.pk)
                await self._until_done(run.pk)
                await asyncio.sleep(0.25)  # the last frame of this run, before the next run
                started = time.perf_counter()
                await (await socket_.ping())
                pings.append(time.perf_counter() - started)
            listener.cancel()

        def shown_events() -> list[tuple[int, float]]:
            rows = Event.objects.filter(run_id__in=run_ids, kind__in=("claimed", "completed"))
            return [(e.pk, e.created_at.timestamp()) for e in rows]

        events = await asyncio.to_thread(shown_events)
        completed = await asyncio.to_thread(
            lambda: Run.objects.filter(pk__in=run_ids, status="completed").count()
        )
        lines = Path(os.environ[COMMITS]).read_text().splitlines()
        commits = {int(event_id): float(at) for event_id, at in map(str.split, lines)}
        latencies = []
        from_created = []
        missed = 0
        for event_id, created in events:
            arrival = next((t for t, cursor in frames if cursor >= event_id), None)
            if arrival is None:
                missed += 1
            else:
                latencies.append(arrival - commits[event_id])
                from_created.append(arrival - created)
        return {
            "latencies": latencies,
            "from_created": from_created,
            "missed": missed,
            "events": len(events),
            "frames": len(frames),
            "runs_completed": completed,
            "pings": pings,
        }

    @staticmethod
    async def _until_done(run_id: Any, timeout: float = 30.0) -> None:
        from runtime.models import Run

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = await asyncio.to_thread(
                lambda: Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
            )
            if status in ("completed", "failed"):
                return
            await asyncio.sleep(0.01)
        raise TimeoutError(f"run {run_id} did not finish in {timeout:.0f}s")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Server:
    """`manage.py serve` on a free port, with `env`; ready once it accepts connections."""

    def __init__(self, env: dict[str, str], log: Path, processes: int = 1) -> None:
        self.port = _free_port()
        self.log = log
        self.proc = subprocess.Popen(
            serve_command(f"127.0.0.1:{self.port}", f"--processes={processes}"),
            cwd=harness.ROOT,
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise harness.WorkerError(
                        f"the server did not start:\n{log.read_text()}"
                    ) from None
                time.sleep(0.1)

    def pids(self) -> list[int]:
        """The server's processes: the one started here, and those it started (--processes)."""
        return [self.proc.pid, *children(self.proc.pid)]

    def peak_rss_mb(self) -> float:
        """The largest of its processes' peaks."""
        from bench.worker import peak_rss_mb

        return max(peak_rss_mb(pid) for pid in self.pids())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _setup(name: str, env: dict[str, str], tmp: Path, runs: int, *, celery: bool) -> dict[str, Any]:
    """Server (and Celery worker) up, a warm-up, then `runs` measured runs."""
    # Embedded, the client's own enqueue would go to its own in-memory broker: the server's
    # sweep finds the runs instead.
    client_env = env if celery else {**env, "AGENTOPS_DISPATCH": ""}
    variant = Variant(name, name, "", "bench.live:Client")
    with harness.workers([variant], client_env, warmup=0) as (client,):
        server = Server(env, tmp / f"serve-{name}.log")
        workers = CeleryWorkers(1, env, tmp) if celery else None
        try:
            client.request(cmd="call", method="measure", kwargs={"port": server.port, "runs": 2})
            result = client.request(
                cmd="call", method="measure", kwargs={"port": server.port, "runs": runs}
            )["result"]
            result["server_rss_mb"] = server.peak_rss_mb()
            if workers is not None:
                result["worker_rss_mb"] = workers.peak_rss_mb()
        finally:
            if workers is not None:
                workers.stop()
            server.stop()
    return dict(result)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.live", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--runs", type=int, default=30, help="runs per setup (2 events each)")
    parser.add_argument(
        "--postgres", default=os.environ.get("BENCH_POSTGRES_URL", harness.DEFAULT_POSTGRES)
    )
    parser.add_argument(
        "--redis", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379")
    )
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    started = time.monotonic()
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="agentops-bench-") as tmpdir:
        tmp = Path(tmpdir)
        base = harness.worker_env(tmp)
        base.pop("AGENTOPS_DISPATCH")
        base["AGENTOPS_PUBLISH"] = "bench.live.publish"
        base["AGENTOPS_LOG_LEVEL"] = "WARNING"
        embedded = {
            **base,
            "AGENTOPS_SQLITE_PATH": str(tmp / "live.sqlite3"),
            "CELERY_BROKER_URL": "memory://localhost/",
            # The embedded worker learns of runs submitted by another process from its sweep.
            "AGENTOPS_SWEEP_SECONDS": "0.05",
            COMMITS: str(tmp / "commits-embedded.txt"),
        }
        print(f"bench.live: {args.runs} runs per setup")
        print("  embedded …")
        results["embedded"] = _setup("embedded", embedded, tmp, args.runs, celery=False)
        problem = harness.postgres_reachable(args.postgres) or _redis_problem(args.redis)
        if problem is None:
            print("  redis …")
            redis_url = args.redis.rstrip("/")
            queue = f"agentops-bench-live-{os.getpid()}"
            networked = {
                **base,
                "DATABASE_URL": harness.fresh_postgres_database(args.postgres, DATABASE),
                "CELERY_BROKER_URL": f"{redis_url}/{BROKER_DB}",
                "REDIS_URL": f"{redis_url}/{CHANNELS_DB}",
                "AGENTOPS_QUEUE": queue,
                COMMITS: str(tmp / "commits-redis.txt"),
            }
            try:
                results["redis"] = _setup("redis", networked, tmp, args.runs, celery=True)
            finally:
                harness.drop_postgres_database(args.postgres, DATABASE)
                _forget_queue(redis_url, queue)
        else:
            print(f"PostgreSQL or Redis not reachable ({problem}): the embedded setup only.")
    print()
    print(_report(results, args.runs))
    print(
        f"\nMachine: {', '.join(f'{k} {v}' for k, v in harness.machine().items())}; "
        f"took {time.monotonic() - started:.0f} s"
    )
    harness.write_json(args.json, {"benchmark": "live", **results})
    return 0


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, round(share * len(ordered)) - 1)]


def _report(results: dict[str, dict[str, Any]], runs: int) -> str:
    labels = {
        "embedded": "embedded: SQLite, in-memory layer, serve's own worker",
        "redis": "PostgreSQL + Redis layer, 1 Celery worker",
    }
    rows = []
    for name, value in results.items():
        latencies = [1000 * v for v in value["latencies"]]
        from_created = [1000 * v for v in value["from_created"]]
        pings = [1000 * v for v in value["pings"]]
        rows.append(
            [
                labels[name],
                f"{len(latencies)}/{value['events']}",
                statistics.median(latencies) if latencies else None,
                _percentile(latencies, 0.95) if latencies else None,
                statistics.median(from_created) if from_created else None,
                _percentile(from_created, 0.95) if from_created else None,
                statistics.median(pings) if pings else None,
                f"{value['server_rss_mb']:.0f}, "
                + (f"{value['worker_rss_mb']:.0f}" if "worker_rss_mb" in value else "(in server)"),
            ]
        )
    lines = [
        f"Live latency: event commit -> websocket frame on the inbox, {runs} runs per setup "
        "(their claim and completion events), ms; also from the event's created_at, taken "
        "before its statement ran.",
        "",
        harness.table(
            [
                "setup",
                "events seen",
                "p50",
                "p95",
                "from created_at: p50",
                "p95",
                "baseline: ws ping p50",
                "peak RSS MB: server, worker",
            ],
            rows,
            align="lrrrrrrr",
        ),
        "",
    ]
    for name, value in results.items():
        latencies = [1000 * v for v in value["latencies"]]
        if latencies:
            p95 = _percentile(latencies, 0.95)
            lines.append(
                f"Target p95 under {TARGET_MS} ms, {name}: "
                f"{'MET' if p95 < TARGET_MS else 'MISSED'} "
                f"({p95:.0f} ms)"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
