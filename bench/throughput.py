"""Benchmark 2: completed runs per second, with Celery workers and embedded; what a call costs.

    .venv/bin/python -m bench.throughput [--runs 40] [--rounds 3] [--redis redis://127.0.0.1:6379]
    .venv/bin/python -m bench.throughput --count   # only the round trips and commits per call

The scenario of bench.overhead (31 calls per run), submitted `--runs` at a time; a round ends when
every run of it has completed. Setups, each timed in the same interleaved rounds:

  direct     baseline: submit() and advance() in one process, one run after the other, no broker;
  celery-1   PostgreSQL + Redis, 1 `celery -A agentops worker --pool=solo` process;
  celery-2   the same with 2 worker processes;
  celery-4   the same with 4 worker processes;
  embedded   SQLite, the in-process worker of `manage.py serve` (EmbeddedWorker, its default
             AGENTOPS_EMBEDDED_CONCURRENCY task threads) on the memory:// broker;
  direct-sqlite  baseline of the embedded setup: submit() and advance() on the same SQLite.

Production settings otherwise: live publishing on (Redis channel layer on PostgreSQL, the
in-memory layer embedded), heartbeat on. The bench's Redis traffic uses its own database
numbers (12: broker, 13: channel layer) and a queue named after the bench's process, and
PostgreSQL a database named agentops_bench_throughput.

Per call, counted on one run in the direct setups: database round trips (PostgreSQL: messages
answered by ReadyForQuery, from libpq's trace; SQLite: statements, from sqlite3's trace) and
commits (PostgreSQL: distinct transactions that wrote the run's events, each write of ours
writes one; SQLite: COMMITs).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import harness
from bench.harness import Variant
from tests.support.processes import worker_command

CALLS = 31
# Another name (agentops_bench_*) lets two checkouts on one server measure at the same time.
DATABASE = os.environ.get("BENCH_THROUGHPUT_DATABASE", "agentops_bench_throughput")
REDIS_DEFAULT = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379")
BROKER_DB, CHANNELS_DB = 12, 13


class Driver:
    """Submits runs and waits for them, inside a process configured by its environment."""

    def __init__(self, options: dict[str, Any]) -> None:
        from django.core.management import call_command

        from bench import scenario
        from runtime.models import AgentVersion

        if options.get("setup"):
            call_command("migrate", verbosity=0, interactive=False)
        if not AgentVersion.objects.filter(agent=scenario.bench_agent.name).exists():
            from runtime import register

            register([scenario.bench_agent], actor="bench")
        self.embedded: Any = None
        if options.get("embedded"):
            from django.conf import settings

            from agentops.celery import EmbeddedWorker

            self.embedded = EmbeddedWorker(concurrency=settings.AGENTOPS_EMBEDDED_CONCURRENCY)
            self.embedded.start()
        self.direct = bool(options.get("direct"))

    def run(self) -> None:
        """The worker's warm-up: one run, where this process can complete it by itself (the
        Celery driver's runs need workers; they are warmed in each round)."""
        if self.direct or self.embedded is not None:
            self.batch(1)

    def check(self) -> dict[str, Any]:
        return {}

    def batch(self, runs: int, timeout: float = 300.0) -> dict[str, Any]:
        """Submit `runs` runs and wait until all completed; seconds from the first submit."""
        from bench import scenario
        from runtime import advance, submit
        from runtime.models import Run

        started = time.perf_counter()
        ids = []
        for _ in range(runs):
            run = submit(scenario.bench_agent.name, scenario.MESSAGE, actor="bench")
            ids.append(run.pk)
            if self.direct:
                advance(run.pk)
        while True:
            done = Run.objects.filter(pk__in=ids, status__in=("completed", "failed")).count()
            if done == runs:
                break
            if time.perf_counter() - started > timeout:
                raise TimeoutError(f"{done} of {runs} runs finished in {timeout:.0f}s")
            time.sleep(0.02)
        elapsed = time.perf_counter() - started
        failed = Run.objects.filter(pk__in=ids, status="failed").count()
        assert failed == 0, f"{failed} runs failed"
        return {"seconds": elapsed, "runs": runs}

    def count(self) -> dict[str, float]:
        """Round trips and commits of one run, submit included (direct drivers only)."""
        from django.db import connection

        from bench import scenario
        from runtime import advance, submit
        from runtime.models import Event

        assert self.direct
        connection.ensure_connection()
        if connection.vendor == "postgresql":
            from psycopg import pq

            with tempfile.NamedTemporaryFile(mode="w+") as trace:
                pgconn = connection.connection.pgconn
                pgconn.trace(trace.fileno())
                pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
                try:
                    run = submit(scenario.bench_agent.name, scenario.MESSAGE, actor="bench")
                    advance(run.pk)
                finally:
                    pgconn.untrace()
                trace.seek(0)
                round_trips = sum(1 for line in trace if "\tReadyForQuery" in line)
            with connection.cursor() as cursor:
                cursor.execute(
                    f"SELECT count(DISTINCT xmin::text) FROM {Event._meta.db_table} "
                    "WHERE run_id = %s",
                    [run.pk],
                )
                commits = cursor.fetchone()[0]
        else:
            statements: list[str] = []
            connection.connection.set_trace_callback(statements.append)
            try:
                run = submit(scenario.bench_agent.name, scenario.MESSAGE, actor="bench")
                advance(run.pk)
            finally:
                connection.connection.set_trace_callback(None)
            round_trips = len(statements)
            commits = sum(1 for s in statements if s.strip().upper().startswith("COMMIT"))
        return {"round_trips": round_trips / CALLS, "commits": commits / CALLS}

    def close(self) -> None:
        if self.embedded is not None:
            self.embedded.stop()


class CeleryWorkers:
    """`count` worker processes of the real `celery -A agentops worker`, with `env`."""

    def __init__(self, count: int, env: dict[str, str], tmp: Path) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []
        for number in range(count):
            log = tmp / f"celery-{count}-{number}.log"
            self.logs.append(log)
            self.procs.append(
                subprocess.Popen(
                    worker_command(f"bench{count}-{number}"),
                    cwd=harness.ROOT,
                    env=env,
                    stdout=log.open("wb"),
                    stderr=subprocess.STDOUT,
                )
            )
        deadline = time.monotonic() + 60
        for proc, log in zip(self.procs, self.logs, strict=True):
            while " ready." not in log.read_text(errors="replace"):
                if proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise harness.WorkerError(f"celery worker did not start:\n{log.read_text()}")
                time.sleep(0.1)

    def peak_rss_mb(self) -> float:
        """The largest peak resident memory among the worker processes."""
        from bench.worker import peak_rss_mb

        return max(peak_rss_mb(proc.pid) for proc in self.procs)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _redis_problem(redis_url: str) -> str | None:
    try:
        import redis

        redis.Redis.from_url(f"{redis_url.rstrip('/')}/{BROKER_DB}", socket_timeout=3).ping()
    except Exception as exc:
        return f"Redis at {redis_url}: {type(exc).__name__}: {exc}"
    return None


def _forget_queue(redis_url: str, queue: str) -> None:
    """Delete what the bench's queue left in the broker (only keys that name the queue)."""
    import redis

    broker = redis.Redis.from_url(f"{redis_url}/{BROKER_DB}")
    for key in broker.scan_iter(match=f"*{queue}*"):
        broker.delete(key)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.throughput", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--runs", type=int, default=40, help="runs per round (default 40)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument(
        "--postgres", default=os.environ.get("BENCH_POSTGRES_URL", harness.DEFAULT_POSTGRES)
    )
    parser.add_argument("--redis", default=REDIS_DEFAULT, help="Redis server (no database)")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument(
        "--count", action="store_true", help="only count round trips and commits per call"
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    postgres: str | None = args.postgres
    problem = harness.postgres_reachable(args.postgres) or _redis_problem(args.redis)
    if problem is not None:
        print(f"PostgreSQL or Redis not reachable ({problem}): the embedded setup only.")
        postgres = None

    with tempfile.TemporaryDirectory(prefix="agentops-bench-") as tmpdir:
        tmp = Path(tmpdir)
        base = harness.worker_env(tmp)
        # Production's hooks: hand runs to Celery after commit, publish events live.
        base.pop("AGENTOPS_DISPATCH")
        base.pop("AGENTOPS_PUBLISH")
        base["AGENTOPS_LOG_LEVEL"] = "WARNING"
        sqlite = {"AGENTOPS_SQLITE_PATH": str(tmp / "throughput.sqlite3")}
        setups: list[tuple[str, str, dict[str, str], dict[str, Any]]] = [
            (
                "direct-sqlite",
                "SQLite",
                {**sqlite, "AGENTOPS_DISPATCH": ""},
                {"direct": True, "setup": True},
            ),
            (
                "embedded",
                "SQLite",
                {**sqlite, "CELERY_BROKER_URL": "memory://localhost/"},
                {"embedded": True},
            ),
        ]
        pg_env: dict[str, str] = {}
        if postgres is not None:
            url = harness.fresh_postgres_database(postgres, DATABASE)
            redis_url = args.redis.rstrip("/")
            pg_env = {
                "DATABASE_URL": url,
                "CELERY_BROKER_URL": f"{redis_url}/{BROKER_DB}",
                "REDIS_URL": f"{redis_url}/{CHANNELS_DB}",
                "AGENTOPS_QUEUE": f"agentops-bench-{os.getpid()}",
            }
            setups = [
                (
                    "direct",
                    "PostgreSQL",
                    {**pg_env, "AGENTOPS_DISPATCH": ""},
                    {"direct": True, "setup": True},
                ),
                ("celery", "PostgreSQL", pg_env, {}),
                *setups,
            ]
        if args.count:  # one run in each direct setup, nothing timed
            setups = [setup for setup in setups if setup[3].get("direct")]
            args.rounds = 0
        try:
            results = _measure(args, tmp, base, setups, pg_env)
        finally:
            if postgres is not None:
                harness.drop_postgres_database(postgres, DATABASE)
                _forget_queue(args.redis.rstrip("/"), pg_env["AGENTOPS_QUEUE"])
    print()
    print(_report(results, args))
    machine = harness.machine()
    print(
        f"\nMachine: {', '.join(f'{k} {v}' for k, v in machine.items())}; "
        f"took {time.monotonic() - started:.0f} s"
    )
    harness.write_json(args.json, {"benchmark": "throughput", "machine": machine, **results})
    return 0


def _measure(
    args: Any,
    tmp: Path,
    base: dict[str, str],
    setups: list[tuple[str, str, dict[str, str], dict[str, Any]]],
    pg_env: dict[str, str],
) -> dict[str, Any]:
    variants = [
        Variant(name, name, storage, "bench.throughput:Driver", env=env, options=options)
        for name, storage, env, options in setups
    ]
    per_round: dict[str, list[float]] = {}
    counts: dict[str, dict[str, float]] = {}
    rss: dict[str, float] = {}
    print(f"bench.throughput: {args.rounds} rounds x {args.runs} runs per setup")
    with harness.workers(variants, base, warmup=2) as pool:
        drivers = {w.variant.name: w for w in pool}
        for name in ("direct", "direct-sqlite"):
            if name in drivers:
                counts[name] = drivers[name].request(cmd="call", method="count")["result"]
        configs: list[tuple[str, int]] = [(name, 0) for name in drivers if name not in ("celery",)]
        if "celery" in drivers:
            configs[1:1] = [("celery-1", 1), ("celery-2", 2), ("celery-4", 4)]
        for number in range(1, args.rounds + 1):
            for label, processes in configs:
                if processes:
                    celery = CeleryWorkers(processes, {**base, **pg_env}, tmp)
                    try:
                        drivers["celery"].request(
                            cmd="call", method="batch", kwargs={"runs": 2}
                        )  # warm the workers
                        result = drivers["celery"].request(
                            cmd="call", method="batch", kwargs={"runs": args.runs}
                        )["result"]
                        rss[label] = max(rss.get(label, 0.0), celery.peak_rss_mb())
                    finally:
                        celery.stop()
                else:
                    result = drivers[label].request(
                        cmd="call", method="batch", kwargs={"runs": args.runs}
                    )["result"]
                per_round.setdefault(label, []).append(result["runs"] / result["seconds"])
            print(f"  round {number}/{args.rounds}")
        for name in ("direct", "direct-sqlite", "embedded"):
            if name in drivers:
                rss[name] = drivers[name].peak_rss_mb()
    return {
        "runs_per_second": per_round,
        "per_call": counts,
        "peak_rss_mb": rss,
        "runs": args.runs,
        "rounds": args.rounds,
    }


def _report(results: dict[str, Any], args: Any) -> str:
    rate = results["runs_per_second"]
    baseline = {
        "celery-1": "direct",
        "celery-2": "direct",
        "celery-4": "direct",
        "direct": "direct",
        "embedded": "direct-sqlite",
        "direct-sqlite": "direct-sqlite",
    }
    labels = {
        "direct": ("PostgreSQL", "direct: submit + advance in one process (baseline)"),
        "celery-1": ("PostgreSQL + Redis", "1 Celery worker process (solo pool)"),
        "celery-2": ("PostgreSQL + Redis", "2 Celery worker processes (solo pool)"),
        "celery-4": ("PostgreSQL + Redis", "4 Celery worker processes (solo pool)"),
        "direct-sqlite": ("SQLite", "direct: submit + advance in one process (baseline)"),
        "embedded": ("SQLite", "embedded worker (memory:// broker, thread pool)"),
    }
    rows = []
    for name, values in rate.items():
        base = rate.get(baseline[name])
        ratio = (
            statistics.median(harness.paired(values, base))
            if base and name != baseline[name]
            else None
        )
        storage, label = labels[name]
        rows.append(
            [
                storage,
                label,
                statistics.median(values),
                ratio,
                statistics.median(values) * CALLS,
                results["peak_rss_mb"].get(name),
            ]
        )
    lines = [
        f"Throughput: {args.runs} runs of {CALLS} calls submitted at once, until all completed; "
        f"medians of {args.rounds} interleaved rounds.",
        "",
        harness.table(
            [
                "storage",
                "setup",
                "runs per second",
                "x baseline",
                "calls per second",
                "peak RSS per process, MB",
            ],
            rows,
            align="llrrrr",
        ),
    ]
    if args.count:
        lines = []
    if results["per_call"]:
        lines += ["", "Per call, counted on one run (submit and claim included):", ""]
        lines.append(
            harness.table(
                ["storage", "database round trips per call", "commits per call"],
                [
                    [
                        "PostgreSQL" if name == "direct" else "SQLite (statements)",
                        value["round_trips"],
                        value["commits"],
                    ]
                    for name, value in results["per_call"].items()
                ],
            )
        )
        lines.append(
            "\nTargets on PostgreSQL: at most 1.5 round trips and 1.2 commits per call "
            "(one commit per call is the fold's limit, docs/performance.md)."
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
