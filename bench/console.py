"""Benchmark 3: the console at scale — server time and queries per page, small and large.

    .venv/bin/python -m bench.console [--requests 20] [--runs 1000000] [--events-per-run 10]

Seeds a PostgreSQL database of its own (agentops_bench_console_1000000) with the data of a busy
deployment — 1,000,000 runs, 10,000,000 events, 10,000 pending approvals — in bulk SQL
(bench.seed, with the secondary indexes dropped during the load and built after it), and
measures the pages an operator lives in: the inbox, the runs list (no filter, each filter, a
text search, an id search, a search in tool results, the next page), the run page, the audit log
and the version board. Server time is the Django request handling (middleware, view, queries,
templates) through the test client, in the process that holds the data; p50 and p95 over
`--requests` requests per page after a warm-up.

Seeding a million runs takes minutes, so the seeded database is kept and reused by the next run
when it holds the same seed (SEED_VERSION, runs, events per run); new migrations are applied to
it. `--reseed` starts it over. The baseline measured in the same run is the same pages on a
database with 1% of the data (agentops_bench_console_small, seeded afresh every run): the query
count of a page must not grow with the data, and its time should not either. The peak resident
memory of the (web) process at scale is printed as well.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import harness, seed
from bench.harness import Variant

# The kept database of a size: agentops_bench_console_1000000 for the default.
DATABASE = "agentops_bench_console_{runs}"
SMALL_DATABASE = "agentops_bench_console_small"
# Bump when the seeded data changes: a kept database of another version is seeded again.
SEED_VERSION = 3
TARGET_MS = 50
# Of every 100 runs: one waits for an approval (the pending approvals: 1%), one is blocked
# (one in ten of those by its version: the version board's), one waits to retry, one failed,
# one was cancelled; the rest completed.
STATUS_OF = (
    "CASE g %% 100 WHEN 0 THEN 'waiting' WHEN 1 THEN 'needs_attention' "
    "WHEN 2 THEN 'retry_wait' WHEN 3 THEN 'failed' WHEN 4 THEN 'cancelled' ELSE 'completed' END"
)
VERSION_BLOCKED = "g %% 1000 = 1"
EVENT_KINDS = "(ARRAY['submitted','claimed','intent','outcome','intent','outcome','intent',"
EVENT_KINDS += "'outcome','completed','approval_granted'])"
TABLES = ("session", "run", "operation", "interaction", "event")


class Seeded(harness.Called):
    """A web process's view of a seeded database: seed it, then time the pages."""

    def __init__(self, options: dict[str, Any]) -> None:
        from django.contrib.auth.models import User
        from django.core.management import call_command
        from django.test import Client

        from bench import scenario
        from runtime import register
        from runtime.models import AgentVersion

        call_command("migrate", verbosity=0, interactive=False)
        if not AgentVersion.objects.filter(agent=scenario.bench_agent.name).exists():
            register([scenario.bench_agent], actor="bench")  # a kept database has it already
        self.fingerprint = scenario.bench_agent.fingerprint
        self.events_per_run = int(options["events_per_run"])
        self.seeded = int(options.get("seeded", 0))
        user = User.objects.filter(username="bench").first() or User.objects.create_superuser(
            "bench", "bench@example.com", "x"
        )
        self.client = Client()
        self.client.force_login(user)

    def rows(self) -> dict[str, int]:
        from django.db import connection

        with connection.cursor() as cursor:
            return seed.count(cursor, ("run", "event", "operation", "interaction"))

    def seed(self, runs: int) -> dict[str, Any]:
        """Seed `runs` runs (each with its session, events and two operations) into the empty
        tables: the secondary indexes and the triggers are off during the load; the indexes
        are built after it and the counts taken once, as migration 0008 does."""
        from django.db import connection, transaction

        started = time.perf_counter()
        params = seed.params(
            1, runs, fingerprint=self.fingerprint, events_per_run=self.events_per_run
        )
        tables = [f"agentops_{table}" for table in TABLES] + ["integrations_toolcalltext"]
        counts = importlib.import_module("runtime.migrations.0008_status_counts")
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL maintenance_work_mem = '512MB'")
            # Secondary indexes (not those of a constraint), rebuilt after the load in bulk.
            cursor.execute(
                "SELECT i.indexname, i.indexdef FROM pg_indexes i "
                "WHERE i.schemaname = 'public' AND i.tablename = ANY(%s) AND NOT EXISTS "
                "(SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)",
                [tables],
            )
            indexes = cursor.fetchall()
            for name, _ in indexes:
                cursor.execute(f'DROP INDEX "{name}"')
            # No trigger fires during the load: neither the counts' nor the foreign keys' checks
            # (the data is consistent by construction). Needs a superuser, as the seed does.
            cursor.execute("SET LOCAL session_replication_role = replica")
            for statement in _statements():
                cursor.execute(statement, params)
            for _, definition in indexes:
                cursor.execute(definition)
            cursor.execute("SET LOCAL session_replication_role = origin")
            for statement in counts.BACKFILL:
                cursor.execute(statement)
            cursor.execute(
                "CREATE TABLE IF NOT EXISTS bench_seed "
                "(version integer, runs integer, events_per_run integer)"
            )
            cursor.execute("DELETE FROM bench_seed")
            cursor.execute(
                "INSERT INTO bench_seed VALUES (%s, %s, %s)",
                [SEED_VERSION, runs, self.events_per_run],
            )
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
        self.seeded = runs
        return {"seconds": time.perf_counter() - started, "rows": self.rows()}

    def pages(self) -> dict[str, str]:
        number = max(1, self.seeded - 150)  # a waiting run, on the newest pages
        waiting = (number // 100) * 100 or 100
        completed = waiting + 5
        middle = self.seeded // 2 + 5  # a completed run in the middle of the history
        from agentops import selectors
        from runtime.models import Run

        first_page = selectors.runs_page(selectors.RunFilters())
        halfway = selectors.run_cursor(Run.objects.get(pk=seed.uuid_of("r", middle)))
        return {
            "inbox": "/",
            "runs list": "/runs/",
            "runs list, status filter": "/runs/?status=waiting",
            "runs list, rare status": "/runs/?status=needs_attention",
            "runs list, agent": "/runs/?agent=bench",
            "runs list, agent + version": "/runs/?agent=bench&version=1",
            "runs list, version": "/runs/?version=1",
            "runs list, status + agent": "/runs/?status=failed&agent=bench",
            "runs list, session": f"/runs/?session={seed.uuid_of('s', completed)}",
            "runs list, text search": f"/runs/?q=A-{completed}",
            "runs list, old text search": f"/runs/?q=A-{middle}",
            "runs list, search, no match": "/runs/?q=nothing-like-this",
            "runs list, id search": f"/runs/?q={seed.uuid_of('r', completed)}",
            "runs list, id prefix search": f"/runs/?q={seed.uuid_of('r', middle)[:8]}",
            # Found only in a tool call's result (a customer's name).
            "runs list, result search": f"/runs/?q=Customer {completed}",
            "runs list, next page": f"/runs/?before={first_page.older}",
            "runs list, page halfway": f"/runs/?before={halfway}",
            "run page (completed)": f"/runs/{seed.uuid_of('r', completed)}/",
            "run page (waiting)": f"/runs/{seed.uuid_of('r', waiting)}/",
            "audit log": "/audit/",
            "audit log, actor": "/audit/?actor=alice",
            "version board": "/versions/",
        }

    def measure(self, requests: int) -> dict[str, dict[str, Any]]:
        """p50/p95 server time (ms) and queries of each page."""
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        results = {}
        for name, url in self.pages().items():
            for _ in range(3):
                assert self.client.get(url).status_code == 200, url
            times = []
            queries = 0
            for _ in range(requests):
                with CaptureQueriesContext(connection) as captured:
                    started = time.perf_counter()
                    response = self.client.get(url)
                    times.append(time.perf_counter() - started)
                assert response.status_code == 200, (url, response.status_code)
                queries = len(captured.captured_queries)
            ranked = sorted(captured.captured_queries, key=lambda q: -float(q["time"]))
            slowest = ranked[0]
            times.sort()
            results[name] = {
                "p50_ms": statistics.median(times) * 1000,
                "p95_ms": times[max(0, round(0.95 * len(times)) - 1)] * 1000,
                "queries": queries,
                "slowest_query_ms": float(slowest["time"]) * 1000,
                "slowest_query": slowest["sql"],
                "query_ms": [round(float(q["time"]) * 1000, 1) for q in ranked],
            }
        return results


def _statements() -> list[str]:
    """The seed, in bulk SQL: the newest run the highest g."""
    ago = "now() - make_interval(secs => %(last)s - g)"
    return [
        seed.sessions(ago),
        seed.runs(
            status=STATUS_OF,
            created_at=ago,
            finished_at=f"CASE WHEN g %% 100 >= 3 THEN {ago} END",
            output="CASE WHEN g %% 100 >= 5 THEN 'It shipped.' ELSE '' END",
            error="CASE WHEN g %% 100 = 3 THEN 'model error: overloaded' ELSE '' END",
            attention_reason=f"CASE WHEN {VERSION_BLOCKED} THEN 'version_unregistered' "
            "WHEN g %% 100 = 1 THEN 'uncertain_operation' ELSE '' END",
            attention_detail=f"CASE WHEN {VERSION_BLOCKED} THEN "
            '\'{"message": "bench version 1 is not registered", "differences": []}\' '
            "ELSE '{}' END::jsonb",
            blocked_operation=f"CASE WHEN g %% 100 = 1 AND NOT {VERSION_BLOCKED} "
            "THEN 'step-1/tool/toolu_01_0' ELSE '' END",
            next_attempt_at="CASE WHEN g %% 100 = 2 THEN now() + interval '1 hour' END",
        ),
        # Two operations per run: the model request and the tool call it asked for.
        seed.INSERT_OPERATION
        + f"SELECT {seed.RUN_ID}, 'step-1/model', 'model', 'bench-model', '', "
        "  CASE WHEN g %% 100 = 2 THEN 'failed' ELSE 'completed' END, "
        '  \'{"model": "bench-model", "message_count": 1}\'::jsonb, md5(\'i\' || g), '
        '  (\'{"content": [{"type": "text", "text": "Checking."}, {"type": '
        '  "tool_use", "id": "toolu_01_0", "name": "get_order", "input": '
        '  {"order_id": "A-\' || g || \'"}}], "stop_reason": "tool_use"}\')::jsonb, '
        "  false, '', NULL, 1, now(), now() "
        f"FROM {seed.SERIES}",
        seed.INSERT_OPERATION
        + f"SELECT {seed.RUN_ID}, 'step-1/tool/toolu_01_0', 'tool', 'get_order', 'safe', "
        '  \'completed\', (\'{"tool": "get_order", "arguments": {"order_id": "A-\' '
        "  || g || '\"}}')::jsonb, md5('t' || g), "
        '  (\'{"order_id": "A-\' || g || \'", "customer": "Customer \' || g || \'", '
        '  "status": "paid"}\')::jsonb, false, \'\', '
        "  NULL, 1, now(), now() "
        f"FROM {seed.SERIES} WHERE g %% 100 <> 0",
        # The pending approvals of the waiting runs (one run in a hundred).
        "INSERT INTO agentops_interaction (id, run_id, operation_key, kind, tool_name, "
        "  payload, status, response, responded_by, responded_at, created_at) "
        f"SELECT md5('a' || g)::uuid, {seed.RUN_ID}, 'step-1/tool/toolu_01_0', "
        "  'tool_approval', 'get_order', "
        "  ('{\"arguments\": {\"order_id\": \"A-' || g || '\"}}')::jsonb, 'pending', NULL, "
        f"  '', NULL, {ago} "
        f"FROM {seed.SERIES} WHERE g %% 100 = 0",
        # The events: the timeline of every run.
        seed.INSERT_EVENT + f"SELECT {seed.RUN_ID}, {EVENT_KINDS}[e], "
        "  CASE WHEN e = 10 THEN 'alice' ELSE 'runtime' END, "
        "  CASE WHEN e BETWEEN 3 AND 8 THEN 'step-1/model' ELSE '' END, '{}'::jsonb, "
        f"  {ago} "
        f"FROM {seed.SERIES}, generate_series(1, %(events)s) e",
        # The tool calls' search text, folded through the newest event (search_index).
        "INSERT INTO integrations_toolcalltext (operation_id, text) "
        "SELECT id, input::text || ' ' || coalesce(result::text, '') FROM agentops_operation "
        "WHERE kind = 'tool'",
        "INSERT INTO integrations_outboxcursor (name, position) "
        "SELECT 'search', coalesce(max(id), 0) FROM agentops_event "
        "ON CONFLICT (name) DO UPDATE SET position = excluded.position",
    ]


def _report(
    at_scale: dict[str, Any],
    baseline: dict[str, Any],
    seeded: dict[str, Any],
    *,
    small: int,
    requests: int,
    peak: float,
) -> None:
    rows = []
    for name, value in at_scale.items():
        base = baseline[name]
        rows.append(
            [
                name,
                value["p50_ms"],
                value["p95_ms"],
                value["queries"],
                sum(value["query_ms"]),
                base["p50_ms"],
                base["queries"],
            ]
        )
    print()
    print(
        f"Console at scale on PostgreSQL: {seeded['rows']['run']:,} runs, "
        f"{seeded['rows']['event']:,} events, {seeded['rows']['operation']:,} operations, "
        f"{seeded['rows']['interaction']:,} pending approvals ({seeded['how']}); baseline: "
        f"the same pages with "
        f'{small:,} runs. Server time in ms over {requests} requests per page; "their ms": '
        "the time of the page's queries in its last request."
    )
    print()
    print(
        harness.table(
            ["page", "p50", "p95", "queries", "their ms", "baseline p50", "baseline queries"],
            rows,
            align="lrrrrrr",
        )
    )
    worst = max(value["p95_ms"] for value in at_scale.values())
    constant = all(at_scale[n]["queries"] == baseline[n]["queries"] for n in at_scale)
    print()
    print(
        f"Targets: p95 under {TARGET_MS} ms on every page: "
        f"{'MET' if worst < TARGET_MS else 'MISSED'} "
        f"(worst {worst:.0f} ms); query counts independent of the data size: "
        f"{'MET' if constant else 'MISSED'}."
    )
    slow = {n: v for n, v in at_scale.items() if v["p95_ms"] >= TARGET_MS}
    if slow:
        print("\nThe slowest query of each page over the target (last request):")
        for name, value in slow.items():
            sql = " ".join(value["slowest_query"].split())
            times = ", ".join(f"{t:g}" for t in value["query_ms"])
            print(f"  {name}: its queries took {times} ms; the slowest: {sql[:300]}")
    print(f"Peak RSS of the web process: {peak:.0f} MB.")


def kept_seed(server: str, database: str) -> dict[str, int] | None:
    """The seed a kept benchmark database holds, or None if there is none (or no database)."""
    import psycopg

    try:
        with psycopg.connect(harness.postgres_url(server, database), connect_timeout=3) as conn:
            row = conn.execute("SELECT version, runs, events_per_run FROM bench_seed").fetchone()
    except psycopg.Error:
        return None
    if row is None:
        return None
    return {"version": row[0], "runs": row[1], "events_per_run": row[2]}


def _measure_database(
    url: str, tmpdir: str, *, runs: int, events_per_run: int, requests: int, reuse: bool
) -> tuple[dict[str, Any], dict[str, Any], float]:
    """Seed (unless `reuse`) the database at `url` with `runs` runs, then time its pages."""
    env = harness.worker_env(Path(tmpdir))
    env["DATABASE_URL"] = url
    variant = Variant(
        "console",
        "console",
        "PostgreSQL",
        "bench.console:Seeded",
        options={"events_per_run": events_per_run, "seeded": runs if reuse else 0},
    )
    with harness.workers([variant], env, warmup=0) as (web,):

        def call(method: str, **kwargs: Any) -> Any:
            return web.request(cmd="call", method=method, kwargs=kwargs)["result"]

        if reuse:
            seeded = {"seconds": 0.0, "rows": call("rows"), "how": "kept from an earlier run"}
        else:
            seeded = call("seed", runs=runs)
            seeded["how"] = f"seeded in {seeded['seconds']:.0f} s"
        print(f"  {runs:,} runs: {seeded['rows']}, {seeded['how']}", flush=True)
        measured = call("measure", requests=requests)
        return seeded, measured, web.peak_rss_mb()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.console", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--events-per-run", type=int, default=10)
    parser.add_argument("--requests", type=int, default=20, help="timed requests per page")
    parser.add_argument("--reseed", action="store_true", help="seed the kept database again")
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
    wanted = {"version": SEED_VERSION, "runs": args.runs, "events_per_run": args.events_per_run}
    database = DATABASE.format(runs=args.runs)
    reuse = not args.reseed and kept_seed(args.postgres, database) == wanted
    with tempfile.TemporaryDirectory(prefix="agentops-bench-") as tmpdir:
        url = harness.fresh_postgres_database(args.postgres, SMALL_DATABASE)
        try:
            _, baseline, _ = _measure_database(
                url,
                tmpdir,
                runs=small,
                events_per_run=args.events_per_run,
                requests=args.requests,
                reuse=False,
            )
        finally:
            harness.drop_postgres_database(args.postgres, SMALL_DATABASE)
        if reuse:
            url = harness.postgres_url(args.postgres, database)
        else:
            url = harness.fresh_postgres_database(args.postgres, database)
        # Kept for the next run (`--reseed` or a new SEED_VERSION seeds it again).
        seeded, at_scale, peak = _measure_database(
            url,
            tmpdir,
            runs=args.runs,
            events_per_run=args.events_per_run,
            requests=args.requests,
            reuse=reuse,
        )
    _report(at_scale, baseline, seeded, small=small, requests=args.requests, peak=peak)
    machine = harness.machine()
    machine["postgresql"] = harness.postgres_version(args.postgres)
    print(
        f"\nMachine: {', '.join(f'{k} {v}' for k, v in machine.items())}; "
        f"took {time.monotonic() - started:.0f} s"
    )
    harness.write_json(
        args.json,
        {
            "benchmark": "console",
            "machine": machine,
            "rows": seeded["rows"],
            "baseline_runs": small,
            "at_scale": at_scale,
            "baseline": baseline,
            "peak_rss_mb": peak,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
