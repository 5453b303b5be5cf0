"""Benchmark 6: the console under load — 50 operators in browsers while runs stream in.

    .venv/bin/python -m bench.load [--minutes 1] [--users 50] [--rate 10] [--strict]

Everything runs on loopback, as deployed: `manage.py serve --processes 2` (daphne, one process
per core of this 2-core machine: `--web-processes`) on PostgreSQL with the Redis channel layer,
`celery -A agentops worker` processes on a Redis broker, and the agent of
bench/load_agent.py, whose scripted model does no work. A submitter process starts `--rate` runs
per second; each looks an order up and then waits for an operator to approve a refund. Locust
(bench/locustfile.py) plays `--users` operators, each logged in through the form with a
password and holding the inbox's websocket open: they browse the inbox and the runs list,
search, open run pages, and approve what waits by posting the real form with its CSRF token.

Reported for the duration: p50 and p95 of each page (Locust's client-side time, so it includes
the loopback and the load generator's own scheduling), the live latency — for every websocket
frame, its arrival minus the commit of the newest event it reflects; and for every socket and
inbox event, the wait from the commit to the socket's first frame showing it — the errors, the runs
submitted and completed, and the server's CPU time per page request (its processes' user and
system time over the run, live renders included, divided by the pages and posts served): on a
shared machine the page times are mostly waiting for a core, and this is the server's own
share of the work. Targets: page p95 under 150 ms (logging in aside), live p95 under
250 ms, no errors; `--strict` makes a missed target the exit status.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import csv
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import harness
from bench.harness import Variant
from bench.live import Server
from bench.throughput import BROKER_DB, CHANNELS_DB, CeleryWorkers, _forget_queue, _redis_problem

DATABASE = "agentops_bench_load"
PASSWORD = "load-bench-password"  # a throwaway database's throwaway accounts
PAGE_P95_MS, LIVE_P95_MS = 150.0, 250.0
EXCEPTION = re.compile(r"^[\w.]+(Error|Exception|Exhausted|Timeout)\b.*:")


class Submitter(harness.Called):
    """The process that prepares the database and submits runs, configured like the server."""

    def __init__(self, options: dict[str, Any]) -> None:
        from django.contrib.auth.hashers import make_password
        from django.contrib.auth.models import Group, User
        from django.core.management import call_command

        from bench.load_agent import load_agent
        from runtime import register

        call_command("migrate", verbosity=0, interactive=False)
        register([load_agent], actor="bench")
        # One hash for every account: hashing is slow on purpose.
        password = make_password(PASSWORD)
        operators = Group.objects.get(name="operators")
        for number in range(1, int(options["users"]) + 1):
            user = User.objects.create(username=f"op{number}", password=password)
            user.groups.add(operators)

    def sessions(self) -> list[str]:
        """A logged-in session cookie per operator. Made directly, not through the login form:
        fifty password checks (slow on purpose) would fill the first minute of a 2-core machine,
        and what is measured is the work after logging in."""
        from django.contrib.auth.models import User
        from django.test import Client

        cookies = []
        for user in User.objects.filter(username__startswith="op").order_by("pk"):
            browser = Client()
            browser.force_login(user)
            cookies.append(browser.cookies["sessionid"].value)
        return cookies

    def drive(self, rate: float, seconds: float) -> dict[str, Any]:
        """Submit `rate` runs per second for `seconds`, on a fixed schedule."""
        from bench.load_agent import MESSAGE, load_agent
        from runtime import submit

        started = time.monotonic()
        submitted = 0
        while (due := started + submitted / rate) < started + seconds:
            time.sleep(max(0.0, due - time.monotonic()))
            submit(load_agent.name, MESSAGE, actor="submitter")
            submitted += 1
        return {"submitted": submitted, "seconds": time.monotonic() - started}

    def runs(self) -> dict[str, int]:
        from django.db.models import Count

        from runtime.models import Run

        rows = Run.objects.values("status").annotate(n=Count("id"))
        return {row["status"]: row["n"] for row in rows}

    def committed(self, event_ids: list[int]) -> dict[str, float]:
        """When each event was committed (its created_at, taken just before its INSERT)."""
        from runtime.models import Event

        rows = Event.objects.filter(pk__in=event_ids).values_list("pk", "created_at")
        return {str(pk): created.timestamp() for pk, created in rows}

    def inbox_events(self) -> list[tuple[int, float]]:
        """Every event the inbox is sent (agentops.live.groups_for), with when it committed."""
        from agentops import live
        from runtime.models import Event

        rows = (
            Event.objects.filter(run__isnull=False)
            .exclude(kind__in=live.PROGRESS_KINDS)
            .order_by("pk")
            .values_list("pk", "created_at")
        )
        return [(pk, created.timestamp()) for pk, created in rows]


def cpu_seconds(pid: int | str = "self") -> float:
    """A process's CPU time so far, user and system (Linux: /proc/<pid>/stat), in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # Fields after the command's name, which is in parentheses and may hold spaces: the state
    # is the first, utime and stime the 12th and 13th (fields 14 and 15 of proc(5)).
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def event_waits(
    frames: list[tuple[float, int, int]], events: list[tuple[int, float]]
) -> tuple[list[float], int]:
    """For every socket and every inbox event committed while it was open: the wait from the
    commit to the first frame of that socket showing it (newest event id at least the event's),
    in ms; and how many such events no frame of the socket showed by the end. A socket's first
    entry, with event id 0, is when it opened."""
    by_socket: dict[int, list[tuple[float, int]]] = collections.defaultdict(list)
    for arrival, event, socket in frames:
        by_socket[socket].append((arrival, event))
    waits: list[float] = []
    unshown = 0
    for received in by_socket.values():
        received.sort()
        # The first frame showing event id >= n: a running maximum of the ids, searched.
        newest = list(itertools.accumulate((event for _, event in received), max))
        opened = received[0][0]
        for event, committed in events:
            if committed < opened:
                continue
            at = bisect.bisect_left(newest, event)
            if at == len(newest):
                unshown += 1
            else:
                waits.append(1000 * (received[at][0] - committed))
    return waits, unshown


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, round(share * len(ordered)) - 1)]


def _pages(stats_csv: Path) -> tuple[list[dict[str, Any]], int, int]:
    """Locust's figures per request name: (pages, requests, failures) of the whole run."""
    pages, requests, failures = [], 0, 0
    with stats_csv.open() as rows:
        for row in csv.DictReader(rows):
            if row["Name"] == "Aggregated":
                requests, failures = int(row["Request Count"]), int(row["Failure Count"])
                continue
            pages.append(
                {
                    "type": row["Type"],
                    "name": row["Name"],
                    "requests": int(row["Request Count"]),
                    "failures": int(row["Failure Count"]),
                    "p50_ms": float(row["50%"] or 0),
                    "p95_ms": float(row["95%"] or 0),
                }
            )
    return pages, requests, failures


def _locust(
    host: str, users: int, seconds: float, tmp: Path, *, frames: Path, sessions: list[str]
) -> subprocess.Popen[bytes]:
    (tmp / "sessions.json").write_text(json.dumps(sessions))
    env = {
        **os.environ,
        "LOAD_SESSIONS": str(tmp / "sessions.json"),
        "LOAD_FRAMES": str(frames),
    }
    command = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(harness.ROOT / "bench" / "locustfile.py"),
        "--headless",
        "--users",
        str(users),
        "--spawn-rate",
        str(max(1, users // 5)),
        "--run-time",
        f"{max(1, round(seconds))}s",
        "--host",
        host,
        "--csv",
        str(tmp / "locust"),
        "--only-summary",
        "--stop-timeout",
        "5",
        "--loglevel",
        "WARNING",
    ]
    log = (tmp / "locust.log").open("wb")
    return subprocess.Popen(command, cwd=harness.ROOT, env=env, stdout=log, stderr=log)


def measure(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    seconds = args.minutes * 60
    base = harness.worker_env(tmp)
    base.pop("AGENTOPS_DISPATCH")
    base.pop("AGENTOPS_PUBLISH")
    redis_url = args.redis.rstrip("/")
    queue = f"agentops-bench-load-{os.getpid()}"
    env = {
        **base,
        "AGENTOPS_LOG_LEVEL": "WARNING",
        "AGENTOPS_AGENT_MODULES": "bench.load_agent",
        "DATABASE_URL": harness.fresh_postgres_database(args.postgres, args.database),
        "CELERY_BROKER_URL": f"{redis_url}/{BROKER_DB}",
        "REDIS_URL": f"{redis_url}/{CHANNELS_DB}",
        "AGENTOPS_QUEUE": queue,
    }
    variant = Variant(
        "submitter",
        "submitter",
        "PostgreSQL",
        "bench.load:Submitter",
        options={"users": args.users},
    )
    frames_file = tmp / "frames.json"
    try:
        with harness.workers([variant], env, warmup=0) as (submitter,):

            def call(method: str, **kwargs: Any) -> Any:
                return submitter.request(cmd="call", method=method, kwargs=kwargs)["result"]

            server = Server(env, tmp / "serve.log", processes=args.web_processes)
            workers = CeleryWorkers(args.workers, env, tmp)
            try:
                host = f"http://127.0.0.1:{server.port}"
                print(
                    f"  {args.users} operators, {args.rate:g} runs/s, {seconds:.0f} s "
                    f"({args.web_processes} server processes, {args.workers} Celery workers) …",
                    flush=True,
                )
                sessions = call("sessions")
                # The server's CPU from here: what serving the operators cost, not its start.
                pids = server.pids()
                cpu_before = sum(cpu_seconds(pid) for pid in pids)
                locust = _locust(
                    host, args.users, seconds, tmp, frames=frames_file, sessions=sessions
                )
                # Let the operators log in and open their sockets before the runs start.
                time.sleep(min(5.0, seconds / 10))
                driven = call("drive", rate=args.rate, seconds=seconds - min(5.0, seconds / 10))
                locust.wait(timeout=seconds + 120)
                server_cpu = sum(cpu_seconds(pid) for pid in pids) - cpu_before
                runs = call("runs")
                frames = json.loads(frames_file.read_text()) if frames_file.exists() else []
                committed = call("committed", event_ids=sorted({f[1] for f in frames}))
                inbox_events = call("inbox_events")
                server_rss, worker_rss = server.peak_rss_mb(), workers.peak_rss_mb()
            finally:
                workers.stop()
                server.stop()
    finally:
        harness.drop_postgres_database(args.postgres, args.database)
        _forget_queue(redis_url, queue)
    # The server's own word on its errors: the last line of each traceback, counted.
    raised = collections.Counter(
        line.strip()
        for line in (tmp / "serve.log").read_text(errors="replace").splitlines()
        if EXCEPTION.match(line)
    )
    stats = tmp / "locust_stats.csv"
    if not stats.exists():
        raise harness.WorkerError(f"Locust wrote no figures:\n{(tmp / 'locust.log').read_text()}")
    pages, requests, failures = _pages(stats)
    reasons = tmp / "locust_failures.csv"
    with reasons.open() as rows:
        why = [
            f"{r['Method']} {r['Name']}: {r['Error']} ({r['Occurrences']}x)"
            for r in csv.DictReader(rows)
        ]
    live = [
        1000 * (arrival - committed[str(event)])
        for arrival, event, _ in frames
        if str(event) in committed
    ]
    shown, unshown = event_waits(frames, inbox_events)
    return {
        "seconds": seconds,
        "users": args.users,
        "rate": args.rate,
        "web_processes": args.web_processes,
        "pages": pages,
        "requests": requests,
        "failures": failures,
        "why": why + [f"server: {line} ({n}x)" for line, n in raised.most_common(5)],
        "live_ms": live,
        "event_ms": shown,
        "events_unshown": unshown,
        "frames": sum(1 for _, event, _ in frames if event),
        "submitted": driven["submitted"],
        "runs": runs,
        "server_rss_mb": server_rss,
        "worker_rss_mb": worker_rss,
        "server_cpu_s": server_cpu,
    }


def report(result: dict[str, Any]) -> tuple[str, bool]:
    """The figures as a table and a pass/fail line per target; whether every target was met."""
    http = [p for p in result["pages"] if p["type"] in ("GET", "POST")]
    # Logging in (once per operator, its password hash slow on purpose) is not browsing.
    browsing = [p for p in http if not p["name"].startswith(("log", "login"))]
    rows = [[p["name"], p["requests"], p["failures"], p["p50_ms"], p["p95_ms"]] for p in http]
    served = sum(p["requests"] for p in http)
    cpu_ms = 1000 * result["server_cpu_s"] / served if served else float("nan")
    live = result["live_ms"]
    if live:
        rows.append(
            [
                "live: commit -> frame",
                len(live),
                "",
                statistics.median(live),
                _percentile(live, 0.95),
            ]
        )
    waits = result["event_ms"]
    if waits:
        rows.append(
            [
                "live: commit -> first frame showing it",
                len(waits),
                "",
                statistics.median(waits),
                _percentile(waits, 0.95),
            ]
        )
    completed = result["runs"].get("completed", 0)
    lines = [
        f"Under load: {result['users']} operators (Locust), {result['rate']:g} runs/s submitted "
        f"for {result['seconds']:.0f} s; {result.get('web_processes', 1)} server processes; "
        "PostgreSQL, Redis channel layer and broker; times in ms.",
        "",
        harness.table(["page", "requests", "failures", "p50", "p95"], rows, align="lrrrr"),
        "",
        f"Runs: {result['submitted']} submitted, {completed} completed; at the end "
        + ", ".join(f"{n} {status}" for status, n in sorted(result["runs"].items()))
        + f". Requests: {result['requests']}, failures: {result['failures']}; websocket frames: "
        f"{result['frames']} ({result['events_unshown']} events a socket had not shown by "
        f"the end). Peak RSS: server {result['server_rss_mb']:.0f} MB, "
        f"a worker {result['worker_rss_mb']:.0f} MB.",
        "",
    ]
    worst = max(browsing, key=lambda p: p["p95_ms"], default=None)
    page_ok = worst is not None and worst["p95_ms"] < PAGE_P95_MS
    live_p95 = _percentile(live, 0.95) if live else float("inf")
    live_ok = live_p95 < LIVE_P95_MS
    errors_ok = result["failures"] == 0 and bool(live)
    worst_text = f"{worst['p95_ms']:.0f} ms, {worst['name']}" if worst else "no pages"
    lines += [
        f"Server CPU: {cpu_ms:.1f} ms per request ({result['server_cpu_s']:.1f} s for {served} "
        f"pages and posts), page p95 worst {worst_text}",
        f"Target page p95 under {PAGE_P95_MS:.0f} ms: {'PASS' if page_ok else 'FAIL'} "
        f"(worst {worst_text})",
        f"Target live p95 under {LIVE_P95_MS:.0f} ms: {'PASS' if live_ok else 'FAIL'} "
        f"({live_p95:.0f} ms over {len(live)} frames)",
        f"Target zero errors: {'PASS' if errors_ok else 'FAIL'} ({result['failures']} failures)",
        *(f"  {reason}" for reason in result["why"]),
    ]
    return "\n".join(lines), page_ok and live_ok and errors_ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.load", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--minutes", type=float, default=1.0)
    parser.add_argument("--users", type=int, default=50, help="simulated operators")
    parser.add_argument("--rate", type=float, default=10.0, help="runs submitted per second")
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes")
    parser.add_argument(
        "--web-processes",
        type=int,
        default=2,
        help="the server's processes (`serve --processes`): one per core, as deployed",
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument(
        "--database",
        default=DATABASE,
        help="the database created (and dropped) on the server for the run; "
        "two benchmarks sharing a server need names of their own",
    )
    parser.add_argument(
        "--postgres", default=os.environ.get("BENCH_POSTGRES_URL", harness.DEFAULT_POSTGRES)
    )
    parser.add_argument(
        "--redis", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379")
    )
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    started = time.monotonic()
    problem = harness.postgres_reachable(args.postgres) or _redis_problem(args.redis)
    if problem is not None:
        print(f"PostgreSQL or Redis not reachable ({problem}): nothing to measure.")
        return 1 if args.strict else 0
    with tempfile.TemporaryDirectory(prefix="agentops-bench-") as tmpdir:
        result = measure(args, Path(tmpdir))
    text, met = report(result)
    print()
    print(text)
    print(
        f"\nMachine: {', '.join(f'{k} {v}' for k, v in harness.machine().items())}; "
        f"took {time.monotonic() - started:.0f} s"
    )
    harness.write_json(args.json, {"benchmark": "load", **result})
    return 1 if args.strict and not met else 0


if __name__ == "__main__":
    sys.exit(main())
