"""Benchmark 6: retention at scale — rows archived and deleted per second by `archive_runs`.

    .venv/bin/python -m bench.archive [--runs 20000] [--events-per-run 10] [--batch 1000]

Seeds a PostgreSQL database of its own (agentops_bench_archive) in bulk SQL (bench.seed) with
finished runs 200 days old — each with its session, two operations and its events — and as many
recent unfinished ones that must stay, then archives everything older than 90 days into a gzip
file in a temporary directory (runtime.retention.archive_runs, as `manage.py archive_runs` does)
and reports rows per second, bytes per row and the batches.

The baseline measured in the same run is the same archive over 1% of the runs: the rate should
not fall as the data grows (each batch's queries are by primary key and index).

Meanwhile a second process plays a worker and an operator on the same database, in turns: a run
submitted and advanced to its end (31 durable calls), then the runs list as the console serves
it, beside both archives. It also does so for a while alone before the archive at scale: its
times alone and beside that archive say whether the archive gets in their way.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench import harness, seed
from bench.harness import Variant

DATABASE = "agentops_bench_archive"


class Archiving(harness.Called):
    """A process on the benchmark database: seed finished runs, archive them, count what is left."""

    def __init__(self, options: dict[str, Any]) -> None:
        from django.core.management import call_command

        from bench import scenario
        from runtime import register

        call_command("migrate", verbosity=0, interactive=False)
        register([scenario.bench_agent], actor="bench")
        self.fingerprint = scenario.bench_agent.fingerprint
        self.events_per_run = int(options["events_per_run"])
        self.seeded = 0
        self.directory = Path(options["directory"])

    def seed(self, runs: int) -> dict[str, Any]:
        """`runs` finished runs 200 days old, and one recent queued run per ten that stays."""
        from django.db import connection

        first, last = self.seeded + 1, self.seeded + runs
        started = time.perf_counter()
        values = seed.params(
            first, last, fingerprint=self.fingerprint, events_per_run=self.events_per_run
        )
        old = "now() - interval '200 days'"
        statements = [
            seed.sessions(old),
            seed.runs(
                status="CASE WHEN g %% 10 = 0 THEN 'queued' ELSE 'completed' END",
                created_at=f"CASE WHEN g %% 10 = 0 THEN now() ELSE {old} END",
                finished_at=f"CASE WHEN g %% 10 = 0 THEN NULL ELSE {old} END",
            ),
            seed.INSERT_OPERATION
            + f"SELECT {seed.RUN_ID}, k.key, k.kind, k.name, '', 'completed', "
            '  \'{"order_id": "A-1"}\'::jsonb, md5(k.key || g), '
            "  '{\"status\": \"paid\"}'::jsonb, false, '', NULL, 1, now(), now() "
            f"FROM {seed.SERIES}, (VALUES "
            "  ('step-1/model', 'model', 'bench-model'), "
            "  ('step-1/tool/toolu_01_0', 'tool', 'get_order')) AS k(key, kind, name)",
            seed.INSERT_EVENT + f"SELECT {seed.RUN_ID}, 'intent', 'runtime', 'step-1/model', "
            f"  ('{{\"n\": ' || e || '}}')::jsonb, {old} "
            f"FROM {seed.SERIES}, generate_series(1, %(events)s) e",
        ]
        with connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement, values)
            cursor.execute("ANALYZE")
        self.seeded = last
        return {"seconds": time.perf_counter() - started, "rows": self.counts()}

    def counts(self) -> dict[str, int]:
        from django.db import connection

        with connection.cursor() as cursor:
            return seed.count(cursor, ("run", "operation", "event"))

    def archive(self, batch: int) -> dict[str, Any]:
        from runtime.retention import archive_runs

        report = archive_runs(dt.timedelta(days=90), to=self.directory, batch=batch)
        assert report.path is not None
        report.path.unlink()  # the bytes are counted; the disk is shared
        return {
            "runs": report.runs,
            "rows": report.total_rows,
            "by_table": report.rows,
            "bytes": report.bytes,
            "batches": report.batches,
            "seconds": report.seconds,
            "rows_per_second": report.rows_per_second,
            "left": self.counts(),
        }


class Traffic(harness.Called):
    """A worker and an operator on the benchmark database, in turns, until told to stop."""

    def __init__(self, options: dict[str, Any]) -> None:
        from django.contrib.auth.models import User
        from django.test import Client

        user = User.objects.create_superuser("bench", "bench@example.com", "x")
        self.client = Client()
        self.client.force_login(user)

    def serve(self, seconds: float, stop: str | None = None) -> dict[str, Any]:
        """Runs and pages in turns for `seconds`, or until the file `stop` exists: their times."""
        from django.urls import reverse

        from bench import scenario
        from runtime import advance, submit
        from runtime.models import Run

        page = reverse("console:runs")
        runs: list[float] = []
        pages: list[float] = []
        errors = 0
        until = time.monotonic() + seconds
        while time.monotonic() < until and not (stop and Path(stop).exists()):
            started = time.perf_counter()
            run = submit(scenario.bench_agent.name, scenario.MESSAGE, actor="bench")
            advance(run.pk)
            runs.append(time.perf_counter() - started)
            errors += Run.objects.get(pk=run.pk).status != "completed"
            started = time.perf_counter()
            errors += self.client.get(page).status_code != 200
            pages.append(time.perf_counter() - started)
        return {"runs": _summary(runs), "pages": _summary(pages), "errors": errors}


def _summary(seconds: list[float]) -> dict[str, float]:
    ms = sorted(1000 * s for s in seconds)
    if not ms:
        return {"n": 0, "p50": 0.0, "p95": 0.0}
    return {"n": len(ms), "p50": statistics.median(ms), "p95": ms[int(0.95 * (len(ms) - 1))]}


def _call(worker: harness.Worker, method: str, **kwargs: Any) -> Any:
    return worker.request(cmd="call", method=method, kwargs=kwargs)["result"]


def _archive_beside(
    archiver: harness.Worker, traffic: harness.Worker, batch: int, stop: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The archive, with the traffic process serving beside it until it ends: both results."""
    during: dict[str, Any] = {}
    beside = threading.Thread(
        target=lambda: during.update(_call(traffic, "serve", seconds=86400, stop=str(stop)))
    )
    beside.start()
    try:
        archived = _call(archiver, "archive", batch=batch)
    finally:
        stop.touch()
        beside.join()
    return archived, during


def _print_traffic(alone: dict[str, Any], during: dict[str, Any]) -> None:
    print("\nA worker and an operator in turns, alone, then while the archive at scale worked:\n")
    print(
        harness.table(
            ["", "runs", "ms per run p50 / p95", "runs list", "ms p50 / p95", "errors"],
            [
                [
                    when,
                    t["runs"]["n"],
                    f"{t['runs']['p50']:.0f} / {t['runs']['p95']:.0f}",
                    t["pages"]["n"],
                    f"{t['pages']['p50']:.0f} / {t['pages']['p95']:.0f}",
                    t["errors"],
                ]
                for when, t in (("alone", alone), ("while archiving", during))
            ],
            align="lrrrrr",
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.archive", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--events-per-run", type=int, default=10)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument(
        "--traffic-seconds", type=float, default=20, help="runs and pages alone, before archiving"
    )
    parser.add_argument(
        "--postgres", default=os.environ.get("BENCH_POSTGRES_URL", harness.DEFAULT_POSTGRES)
    )
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    started = time.monotonic()
    problem = harness.postgres_reachable(args.postgres)
    if problem is not None:
        print(f"PostgreSQL at {args.postgres} is not reachable ({problem}): nothing to measure.")
        return 0
    small = max(100, args.runs // 100)
    results: dict[str, dict[str, Any]] = {}
    alone: dict[str, Any] = {}
    during: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="agentops-bench-") as tmpdir:
        url = harness.fresh_postgres_database(args.postgres, DATABASE)
        env = harness.worker_env(Path(tmpdir))
        env["DATABASE_URL"] = url
        variant = Variant(
            "archive",
            "archive",
            "PostgreSQL",
            "bench.archive:Archiving",
            options={"events_per_run": args.events_per_run, "directory": tmpdir},
        )
        traffic_variant = Variant(
            "traffic", "traffic", "PostgreSQL", "bench.archive:Traffic", options={}
        )
        try:
            with harness.workers([variant, traffic_variant], env, warmup=0) as workers:
                archiver, traffic = workers
                for name, runs in (("baseline", small), ("at scale", args.runs)):
                    seeded = _call(archiver, "seed", runs=runs)
                    print(f"  seeded {seeded['rows']} in {seeded['seconds']:.1f} s", flush=True)
                    if name == "at scale":
                        alone = _call(traffic, "serve", seconds=args.traffic_seconds)
                    # The baseline too has the traffic beside it, so the rates compare.
                    results[name], during = _archive_beside(
                        archiver, traffic, args.batch, Path(tmpdir) / f"stop-{runs}"
                    )
                    results[name]["seeded"] = runs
        finally:
            harness.drop_postgres_database(args.postgres, DATABASE)
    rows = [
        [
            name,
            f"{r['seeded']:,}",
            f"{r['runs']:,}",
            f"{r['rows']:,}",
            r["batches"],
            r["seconds"],
            f"{r['rows_per_second']:,.0f}",
            r["bytes"] / max(1, r["rows"]),
        ]
        for name, r in results.items()
    ]
    print()
    print(
        f"Retention on PostgreSQL: finished runs 200 days old (each: 2 operations, "
        f"{args.events_per_run} events), one recent queued run in ten left alone; batches of "
        f"{args.batch} runs, each its own transaction, fsynced before its delete."
    )
    print()
    print(
        harness.table(
            ["", "runs seeded", "archived", "rows", "batches", "s", "rows/s", "bytes/row"],
            rows,
            align="lrrrrrrr",
        )
    )
    scale, base = results["at scale"], results["baseline"]
    ratio = scale["rows_per_second"] / max(1e-9, base["rows_per_second"])
    print(
        f"\nRate at scale / baseline: {ratio:.2f}. Left after archiving: {scale['left']} "
        "(the queued runs, the runs played beside it, and their history)."
    )
    _print_traffic(alone, during)
    machine = harness.machine()
    machine["postgresql"] = harness.postgres_version(args.postgres)
    print(
        f"Machine: {', '.join(f'{k} {v}' for k, v in machine.items())}; "
        f"took {time.monotonic() - started:.0f} s"
    )
    harness.write_json(
        args.json,
        {
            "benchmark": "archive",
            "machine": machine,
            **results,
            "traffic": {"alone": alone, "while archiving": during},
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
