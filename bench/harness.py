"""What every benchmark shares: worker processes, interleaved rounds, paired ratios, tables.

Each variant of a benchmark runs in its own long-lived worker process (`bench.worker`), set up
once from environment variables (so one process has one Django database configuration), then
driven by the parent over a pipe. The parent interleaves the variants round by round, one
worker busy at a time, so that the drift of a shared, noisy machine hits every variant alike;
figures are medians over rounds, and ratios are taken within a round before their median.

Benchmark databases are their own: PostgreSQL databases named `agentops_bench*` that the bench
creates and drops, and SQLite files in a temporary directory. Never the dev or the test DBs.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_POSTGRES = "postgres://postgres@127.0.0.1:5432/"
BENCH_DB_PREFIX = "agentops_bench"


# --- variants and their worker processes ---------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """One way of running the scenario, built in a worker by `factory(options)`.

    factory: "module:function" returning an object with run(), check() -> dict and close().
    env: extra environment of its worker (e.g. DATABASE_URL for our runtime on PostgreSQL).
    requires: importable modules it needs; without them it is reported and skipped.
    root: the checkout its worker runs from (its code is that checkout's): this one, unless
    bench.compare measures another revision beside it.
    """

    name: str
    label: str
    storage: str
    factory: str
    env: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    requires: tuple[str, ...] = ()
    root: Path = ROOT

    def missing(self) -> list[str]:
        import importlib.util

        return [module for module in self.requires if importlib.util.find_spec(module) is None]


class Called:
    """A variant driven by `call` commands (seed, archive, measure…) rather than timed runs:
    nothing to warm up, nothing to check, nothing to close."""

    def run(self) -> None:
        pass

    def check(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass


class WorkerError(RuntimeError):
    """A worker failed to start or to run; carries the variant and the worker's traceback."""


class Worker:
    """The parent's handle on one variant's process."""

    def __init__(self, variant: Variant, env: dict[str, str], *, warmup: int) -> None:
        self.variant = variant
        # The worker's stderr, kept for the error message if it fails; closed in close().
        self._log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115
        spec = {
            "factory": variant.factory,
            "options": variant.options,
            "warmup": warmup,
        }
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "bench.worker", json.dumps(spec)],
            cwd=variant.root,
            env={**env, **variant.env},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            bufsize=1,
        )
        self.info: dict[str, Any] = self._reply()["info"]

    def _reply(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            self._proc.wait(timeout=30)
            raise WorkerError(f"{self.variant.name}: the worker died\n{self.log()}")
        reply = json.loads(line)
        if "error" in reply:
            raise WorkerError(f"{self.variant.name}: {reply['error']}\n{self.log()}")
        return dict(reply)

    def log(self) -> str:
        self._log.seek(0)
        return self._log.read()[-4000:]

    def request(self, **command: Any) -> dict[str, Any]:
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(command) + "\n")
        self._proc.stdin.flush()
        return self._reply()

    def run(self, n: int) -> list[float]:
        """Time `n` runs back to back; seconds per run."""
        return [float(t) for t in self.request(cmd="run", n=n)["times"]]

    def peak_rss_mb(self) -> float:
        """The worker's peak resident memory so far."""
        return float(self.request(cmd="rss")["peak_rss_mb"])

    def close(self) -> None:
        if self._proc.poll() is None:
            with contextlib.suppress(WorkerError, BrokenPipeError, OSError):
                self.request(cmd="stop")
            try:
                self._proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._log.close()


@contextmanager
def workers(
    variants: Iterable[Variant], env: dict[str, str], *, warmup: int, say: Any = print
) -> Iterator[list[Worker]]:
    """Start one worker per variant (one at a time, so their setups do not overlap)."""
    started: list[Worker] = []
    try:
        for variant in variants:
            say(f"  starting {variant.name} …")
            started.append(Worker(variant, env, warmup=warmup))
        yield started
    finally:
        for worker in started:
            worker.close()


def worker_env(tmp: Path) -> dict[str, str]:
    """The environment every worker starts from: our settings, nothing pointing at a dev DB."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "AGENTOPS_CRASH_AT", "AGENTOPS_SQLITE_TEST_PATH"}
    }
    env.update(
        DJANGO_SETTINGS_MODULE="agentops.settings",
        DJANGO_DEBUG="0",
        AGENTOPS_DEMO="0",
        AGENTOPS_AGENT_MODULES="bench.scenario",
        # Runs are advanced in the worker's own thread: no executor, no live push.
        AGENTOPS_DISPATCH="",
        AGENTOPS_PUBLISH="",
        AGENTOPS_LOG_LEVEL="ERROR",
        # Every worker has a SQLite path of its own, even those that never open it.
        AGENTOPS_SQLITE_PATH=str(tmp / "unused.sqlite3"),
        PYTHONHASHSEED="0",
    )
    return env


# --- interleaved rounds ---------------------------------------------------------------------------


def interleave(
    pool: Sequence[Worker], *, rounds: int, runs: int, seed: int = 8, say: Any = print
) -> dict[str, list[float]]:
    """Per variant, the median seconds per run of each round; the order is shuffled per round."""
    rng = random.Random(seed)
    per_round: dict[str, list[float]] = {w.variant.name: [] for w in pool}
    for number in range(1, rounds + 1):
        order = list(pool)
        rng.shuffle(order)
        for worker in order:
            per_round[worker.variant.name].append(statistics.median(worker.run(runs)))
        if number % max(1, rounds // 5) == 0 or number == rounds:
            say(f"  round {number}/{rounds}")
    return per_round


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def quartiles(values: Sequence[float]) -> tuple[float, float]:
    """The 25th and 75th percentiles (the spread of a paired ratio over rounds)."""
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def paired(numerator: Sequence[float], denominator: Sequence[float]) -> list[float]:
    """Per-round ratios of two series measured in the same rounds."""
    return [a / b for a, b in zip(numerator, denominator, strict=True) if b > 0]


# --- output ---------------------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, align: str = "") -> str:
    """A Markdown table (readable in a terminal as well); `align` is one l/r per column."""
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    align = align or "l" + "r" * (len(headers) - 1)

    def line(row: Sequence[str]) -> str:
        parts = [
            v.ljust(w) if a == "l" else v.rjust(w)
            for v, w, a in zip(row, widths, align, strict=True)
        ]
        return "| " + " | ".join(parts) + " |"

    rule = (
        "|"
        + "|".join(
            ("-" * (w + 1) + ":") if a == "r" else ("-" * (w + 2))
            for w, a in zip(widths, align, strict=True)
        )
        + "|"
    )
    return "\n".join([line(cells[0]), rule, *(line(row) for row in cells[1:])])


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.2f}" if abs(value) >= 0.995 or value == 0 else f"{value:.3f}"
    return str(value)


def write_json(path: str | None, payload: dict[str, Any]) -> None:
    if path:
        Path(path).write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    import platform
    import sqlite3

    import django

    try:
        import psycopg

        psycopg_version = psycopg.__version__
    except ImportError:  # pragma: no cover - a dependency of the project
        psycopg_version = "?"
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "cpu": cpu_model(),
        "python probe ms": python_probe_ms(),
        "sqlite": sqlite3.sqlite_version,
        "django": django.__version__,
        "psycopg": psycopg_version,
    }


def cpu_model() -> str:
    """The processor's model name (Linux), or the platform's word for it."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def python_probe_ms(repeat: int = 5) -> float:
    """How fast this host runs Python now: the best of `repeat` timings of a fixed workload of
    dicts, strings and JSON, in ms. Hosts of the same kind differ: on two of them the same
    console took 20 and 40 ms of CPU per request, so figures of two days compare only beside
    this."""

    def work() -> int:
        total = 0
        for number in range(20_000):
            total += len(json.dumps({"n": number, "text": str(number), "list": [number, 1.5]}))
        return total

    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return round(best * 1000, 1)


# --- benchmark databases --------------------------------------------------------------------------


def postgres_url(server: str, database: str) -> str:
    """`server` (any postgres:// URL) pointed at the benchmark database `database`."""
    if not database.startswith(BENCH_DB_PREFIX):
        raise ValueError(f"benchmark databases are named {BENCH_DB_PREFIX}*, not {database!r}")
    parsed = urlparse(server)
    return urlunparse(parsed._replace(path="/" + database))


def postgres_reachable(server: str) -> str | None:
    """None if the server answers, else why not."""
    try:
        import psycopg

        with psycopg.connect(_maintenance(server), connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
    return None


def postgres_version(server: str) -> str:
    import psycopg

    with psycopg.connect(_maintenance(server)) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "?"


def fresh_postgres_database(server: str, database: str) -> str:
    """Drop and create the benchmark database `database`; its URL."""
    import psycopg
    from psycopg import sql

    url = postgres_url(server, database)
    with psycopg.connect(_maintenance(server), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    return url


def drop_postgres_database(server: str, database: str) -> None:
    import psycopg
    from psycopg import sql

    postgres_url(server, database)  # refuses any name that is not a benchmark database
    with psycopg.connect(_maintenance(server), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
        )


def _maintenance(server: str) -> str:
    return urlunparse(urlparse(server)._replace(path="/postgres"))
