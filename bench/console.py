"""Benchmark 3: the console at scale — server time and queries per page, small and large.

    .venv/bin/python -m bench.console [--requests 20] [--runs 100000] [--events-per-run 10]

Seeds a PostgreSQL database of its own (agentops_bench_console) with the data of a busy
deployment — 100,000 runs, 1,000,000 events, 10,000 pending approvals — in bulk SQL, and measures
the pages an operator lives in: the inbox, the runs list (no filter, a status filter, an agent and
version filter, a text search, an id search, a search in tool results, the next page) and the run
page. Server time is the Django request handling (middleware, view, queries, templates) through
the test client, in the process that holds the data; p50 and p95 over `--requests` requests per
page after a warm-up.

The baseline measured in the same run is the same pages on the same database with 1% of the data
(1,000 runs): the query count of a page must not grow with the data, and its time should not
either. The peak resident memory of that (web) process is printed as well.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import harness
from bench.harness import Variant

DATABASE = "agentops_bench_console"
# One run in ten waits for an approval, one is blocked, one waits to retry, one failed.
STATUS_OF = (
    "CASE g %% 10 WHEN 0 THEN 'waiting' WHEN 1 THEN 'needs_attention' "
    "WHEN 2 THEN 'retry_wait' WHEN 3 THEN 'failed' ELSE 'completed' END"
)
EVENT_KINDS = "(ARRAY['submitted','claimed','intent','outcome','intent','outcome','intent',"
EVENT_KINDS += "'outcome','completed','approval_granted'])"


class Seeded:
    """A web process's view of a seeded database: seed more, then time the pages."""

    def __init__(self, options: dict[str, Any]) -> None:
        from django.contrib.auth.models import User
        from django.core.management import call_command
        from django.test import Client

        from bench import scenario
        from runtime import register

        call_command("migrate", verbosity=0, interactive=False)
        register([scenario.bench_agent], actor="bench")
        self.fingerprint = scenario.bench_agent.fingerprint
        self.events_per_run = int(options["events_per_run"])
        self.seeded = 0
        user = User.objects.create_superuser("bench", "bench@example.com", "x")
        self.client = Client()
        self.client.force_login(user)

    def run(self) -> None:  # the worker's warm-up: nothing to do before the data is there
        pass

    def check(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass

    def seed(self, runs: int) -> dict[str, Any]:
        """Grow the data to `runs` runs (each with its session, events and two operations)."""
        from django.db import connection

        first, last = self.seeded + 1, runs
        started = time.perf_counter()
        params: dict[str, Any] = {"first": first, "last": last, "fingerprint": self.fingerprint}
        statements = [
            # Sessions and runs: ids derived from the number, newest run = the highest number.
            "INSERT INTO agentops_session (id, agent, title, created_at) "
            "SELECT md5('s' || g)::uuid, 'bench', 'Order A-' || g, "
            "  now() - make_interval(secs => %(last)s - g) "
            "FROM generate_series(%(first)s, %(last)s) g",
            "INSERT INTO agentops_run (id, session_id, seq, agent, version, fingerprint, status, "
            "  input, output, error, transcript, attention_reason, attention_detail, "
            "  blocked_operation, lease_owner, lease_expires_at, fence, steps, next_attempt_at, "
            "  error_kind, crashed_claims, last_crash, created_at, updated_at, finished_at) "
            "SELECT md5('r' || g)::uuid, md5('s' || g)::uuid, 1, 'bench', '1', %(fingerprint)s, "
            f"  {STATUS_OF}, 'Where is order A-' || g || '?', "
            "  CASE WHEN g %% 10 >= 4 THEN 'It shipped.' ELSE '' END, "
            "  CASE WHEN g %% 10 = 3 THEN 'model error: overloaded' ELSE '' END, '[]'::jsonb, "
            "  CASE WHEN g %% 10 = 1 THEN 'version_unregistered' ELSE '' END, "
            "  CASE WHEN g %% 10 = 1 THEN "
            '    \'{"message": "bench version 1 is not registered", "differences": []}\' '
            "  ELSE '{}' END::jsonb, '', '', NULL, 1, 1, "
            "  CASE WHEN g %% 10 = 2 THEN now() + interval '1 hour' END, '', 0, '', "
            "  now() - make_interval(secs => %(last)s - g), "
            "  now() - make_interval(secs => %(last)s - g), "
            "  CASE WHEN g %% 10 >= 3 THEN now() - make_interval(secs => %(last)s - g) END "
            "FROM generate_series(%(first)s, %(last)s) g",
            # Two operations per run: the model request and the tool call it asked for.
            "INSERT INTO agentops_operation (run_id, key, kind, name, policy, status, input, "
            "  input_hash, result, is_error, error, usage, attempts, intent_at, outcome_at) "
            "SELECT md5('r' || g)::uuid, 'step-1/model', 'model', 'bench-model', '', "
            "  CASE WHEN g %% 10 = 2 THEN 'failed' ELSE 'completed' END, "
            '  \'{"model": "bench-model", "message_count": 1}\'::jsonb, md5(\'i\' || g), '
            '  (\'{"content": [{"type": "text", "text": "Checking."}, {"type": '
            '  "tool_use", "id": "toolu_01_0", "name": "get_order", "input": '
            '  {"order_id": "A-\' || g || \'"}}], "stop_reason": "tool_use"}\')::jsonb, '
            "  false, '', NULL, 1, now(), now() "
            "FROM generate_series(%(first)s, %(last)s) g",
            "INSERT INTO agentops_operation (run_id, key, kind, name, policy, status, input, "
            "  input_hash, result, is_error, error, usage, attempts, intent_at, outcome_at) "
            "SELECT md5('r' || g)::uuid, 'step-1/tool/toolu_01_0', 'tool', 'get_order', 'safe', "
            '  \'completed\', (\'{"tool": "get_order", "arguments": {"order_id": "A-\' '
            "  || g || '\"}}')::jsonb, md5('t' || g), "
            '  (\'{"order_id": "A-\' || g || \'", "customer": "Customer \' || g || \'", '
            '  "status": "paid"}\')::jsonb, false, \'\', '
            "  NULL, 1, now(), now() "
            "FROM generate_series(%(first)s, %(last)s) g WHERE g %% 10 <> 0",
            # The pending approvals of the waiting runs (one run in ten).
            "INSERT INTO agentops_interaction (id, run_id, operation_key, kind, tool_name, "
            "  payload, status, response, responded_by, responded_at, created_at) "
            "SELECT md5('a' || g)::uuid, md5('r' || g)::uuid, 'step-1/tool/toolu_01_0', "
            "  'tool_approval', 'get_order', "
            "  ('{\"arguments\": {\"order_id\": \"A-' || g || '\"}}')::jsonb, 'pending', NULL, "
            "  '', NULL, now() - make_interval(secs => %(last)s - g) "
            "FROM generate_series(%(first)s, %(last)s) g WHERE g %% 10 = 0",
            # The events: the timeline of every run.
            "INSERT INTO agentops_event (run_id, kind, actor, operation_key, data, created_at) "
            f"SELECT md5('r' || g)::uuid, {EVENT_KINDS}[e], "
            "  CASE WHEN e = 10 THEN 'alice' ELSE 'runtime' END, "
            "  CASE WHEN e BETWEEN 3 AND 8 THEN 'step-1/model' ELSE '' END, '{}'::jsonb, "
            "  now() - make_interval(secs => %(last)s - g) "
            "FROM generate_series(%(first)s, %(last)s) g, generate_series(1, %(events)s) e",
        ]
        params["events"] = self.events_per_run
        with connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement, params)
            cursor.execute("ANALYZE")
        self.seeded = runs
        counts = {}
        with connection.cursor() as cursor:
            for table in ("run", "event", "operation", "interaction"):
                cursor.execute(f"SELECT count(*) FROM agentops_{table}")
                counts[table] = cursor.fetchone()[0]
        return {"seconds": time.perf_counter() - started, "rows": counts}

    def pages(self) -> dict[str, str]:
        number = max(1, self.seeded - 15)  # a waiting run, in the middle of the newest page
        waiting = (number // 10) * 10 or 10
        completed = waiting + 5
        from agentops import selectors
        from runtime.models import Run

        first_page = selectors.runs_page(selectors.RunFilters())
        return {
            "inbox": "/",
            "runs list": "/runs/",
            "runs list, status filter": "/runs/?status=waiting",
            "runs list, agent + version": "/runs/?agent=bench&version=1",
            "runs list, text search": f"/runs/?q=A-{completed}",
            "runs list, id search": f"/runs/?q={_uuid('r', completed)}",
            # Found only in a tool call's result (a customer's name).
            "runs list, result search": f"/runs/?q=Customer {completed}",
            "runs list, next page": f"/runs/?before={first_page.older}",
            "run page (completed)": f"/runs/{Run.objects.get(pk=_uuid('r', completed)).pk}/",
            "run page (waiting)": f"/runs/{_uuid('r', waiting)}/",
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


def _uuid(prefix: str, number: int) -> str:
    import hashlib
    import uuid

    return str(uuid.UUID(hashlib.md5(f"{prefix}{number}".encode()).hexdigest()))


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
                base["p50_ms"],
                base["queries"],
            ]
        )
    print()
    print(
        f"Console at scale on PostgreSQL: {seeded['rows']['run']:,} runs, "
        f"{seeded['rows']['event']:,} events, {seeded['rows']['operation']:,} operations, "
        f"{seeded['rows']['interaction']:,} pending approvals; baseline: the same pages with "
        f"{small:,} runs. Server time in ms over {requests} requests per page."
    )
    print()
    print(
        harness.table(
            ["page", "p50", "p95", "queries", "baseline p50", "baseline queries"],
            rows,
            align="lrrrrr",
        )
    )
    worst = max(value["p95_ms"] for value in at_scale.values())
    constant = all(at_scale[n]["queries"] == baseline[n]["queries"] for n in at_scale)
    print()
    print(
        f"Targets: p95 under 100 ms on every page: {'MET' if worst < 100 else 'MISSED'} "
        f"(worst {worst:.0f} ms); query counts independent of the data size: "
        f"{'MET' if constant else 'MISSED'}."
    )
    slow = {n: v for n, v in at_scale.items() if v["p95_ms"] >= 100}
    if slow:
        print("\nThe slowest query of each page over the target (last request):")
        for name, value in slow.items():
            sql = " ".join(value["slowest_query"].split())
            times = ", ".join(f"{t:g}" for t in value["query_ms"])
            print(f"  {name}: its queries took {times} ms; the slowest: {sql[:300]}")
    print(f"Peak RSS of the web process: {peak:.0f} MB.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.console", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--events-per-run", type=int, default=10)
    parser.add_argument("--requests", type=int, default=20, help="timed requests per page")
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
    with tempfile.TemporaryDirectory(prefix="agentops-bench-") as tmpdir:
        url = harness.fresh_postgres_database(args.postgres, DATABASE)
        env = harness.worker_env(Path(tmpdir))
        env["DATABASE_URL"] = url
        variant = Variant(
            "console",
            "console",
            "PostgreSQL",
            "bench.console:Seeded",
            options={"events_per_run": args.events_per_run},
        )
        try:
            with harness.workers([variant], env, warmup=0) as (web,):

                def call(method: str, **kwargs: Any) -> Any:
                    return web.request(cmd="call", method=method, kwargs=kwargs)["result"]

                seeded_small = call("seed", runs=small)
                print(f"  seeded {seeded_small['rows']} in {seeded_small['seconds']:.1f} s")
                baseline = call("measure", requests=args.requests)
                seeded = call("seed", runs=args.runs)
                print(f"  seeded {seeded['rows']} in {seeded['seconds']:.1f} s")
                at_scale = call("measure", requests=args.requests)
                peak = web.peak_rss_mb()
        finally:
            harness.drop_postgres_database(args.postgres, DATABASE)
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
