"""Benchmark 1: what durability costs per call, against the storage's own limit and the peers.

    .venv/bin/python -m bench.overhead [--rounds 20] [--runs 5] [--only sqlite] [--json out.json]

The scenario (bench/scenario.py): 10 steps of one model request and two tool calls, then the final
answer: 31 calls per run; the model and tools do no work. Variants, each in its own process:

  plain      the loop with no durability: the baseline every overhead is measured from;
  bound      the lower bound: the same loop with two bare commits per call, an autocommitted
             INSERT before and after each call, same driver and durability settings (sqlite3
             with our pragmas; psycopg autocommit on the same PostgreSQL server);
  agentops   our runtime: submit() then advance(), as a worker runs it (heartbeat on; no
             executor and no live publishing, which benchmarks 2 and 4 measure);
  dbos       DBOS Transact: a workflow whose model request and tool calls are steps;
  langgraph  LangGraph: model node + one Send task per tool call, checkpointer, durability="sync".

Durable overhead per call = (ms per run - plain's ms per run, same round) / 31. Rounds interleave
every variant in a shuffled order; figures are medians over rounds, and each ratio is taken
within a round (paired) before its median; the interquartile range of the ratio is shown.
PostgreSQL variants run when the server (--postgres, default $BENCH_POSTGRES_URL or the local
one) answers; peers run when their packages are installed (pip install -e '.[bench]').
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import harness
from bench.harness import Variant

CALLS = 31  # bench.scenario.CALLS, without importing Django into the parent
# Their names start with BENCH_OVERHEAD_DATABASE, for checkouts sharing a server.
_PREFIX = os.environ.get("BENCH_OVERHEAD_DATABASE", "agentops_bench")
PG_DATABASES = (_PREFIX, f"{_PREFIX}_records", f"{_PREFIX}_dbos", f"{_PREFIX}_langgraph")
STORAGES = ("SQLite", "PostgreSQL")


def variants(tmp: Path, postgres: str | None) -> list[Variant]:
    found = [
        Variant("plain", "plain loop, no durability", "—", "bench.variants:Plain"),
        Variant(
            "bound-sqlite",
            "bound: 2 bare commits per call (sqlite3)",
            "SQLite",
            "bench.variants:BoundSqlite",
            options={"path": str(tmp / "bound.sqlite3")},
        ),
        Variant(
            "agentops-sqlite",
            "agentops (ours)",
            "SQLite",
            "bench.variants:AgentOps",
            env={"AGENTOPS_SQLITE_PATH": str(tmp / "agentops.sqlite3")},
        ),
        Variant(
            "records-sqlite",
            "floor: our records, no runtime",
            "SQLite",
            "bench.variants:Records",
            env={"AGENTOPS_SQLITE_PATH": str(tmp / "records.sqlite3")},
            options={"path": str(tmp / "records.sqlite3")},
        ),
        Variant(
            "dbos-sqlite",
            "DBOS Transact",
            "SQLite",
            "bench.variants:Dbos",
            options={"url": f"sqlite:///{tmp / 'dbos.sqlite3'}"},
            requires=("dbos",),
        ),
        Variant(
            "langgraph-sqlite",
            "LangGraph + SqliteSaver",
            "SQLite",
            "bench.variants:LangGraph",
            options={"storage": "sqlite", "path": str(tmp / "langgraph.sqlite3")},
            requires=("langgraph", "langgraph.checkpoint.sqlite"),
        ),
    ]
    if postgres is not None:
        ours, records, dbos, langgraph = (
            harness.postgres_url(postgres, name) for name in PG_DATABASES
        )
        found += [
            Variant(
                "bound-postgres",
                "bound: 2 bare commits per call (psycopg)",
                "PostgreSQL",
                "bench.variants:BoundPostgres",
                options={"url": ours},
            ),
            Variant(
                "agentops-postgres",
                "agentops (ours)",
                "PostgreSQL",
                "bench.variants:AgentOps",
                env={"DATABASE_URL": ours},
            ),
            Variant(
                "records-postgres",
                "floor: our records, no runtime",
                "PostgreSQL",
                "bench.variants:Records",
                env={"DATABASE_URL": records},
                options={"url": records},
            ),
            Variant(
                "dbos-postgres",
                "DBOS Transact",
                "PostgreSQL",
                "bench.variants:Dbos",
                options={"url": dbos.replace("postgres://", "postgresql+psycopg://", 1)},
                requires=("dbos",),
            ),
            Variant(
                "langgraph-postgres",
                "LangGraph + PostgresSaver",
                "PostgreSQL",
                "bench.variants:LangGraph",
                options={"storage": "postgres", "url": langgraph},
                requires=("langgraph", "langgraph.checkpoint.postgres"),
            ),
        ]
    return found


def _storage_key(variant: Variant) -> str:
    return variant.storage.lower().replace("postgresql", "postgres")


def summarize(
    chosen: list[Variant], per_round: dict[str, list[float]], info: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Medians, per-call overheads and paired ratios from the per-round seconds per run."""
    plain = per_round["plain"]
    overhead = {
        name: [(t - p) * 1000 / CALLS for t, p in zip(times, plain, strict=True)]
        for name, times in per_round.items()
    }
    rows: dict[str, dict[str, Any]] = {}
    for variant in chosen:
        name = variant.name
        row: dict[str, Any] = {
            "label": variant.label,
            "storage": variant.storage,
            "ms_per_run": harness.median(per_round[name]) * 1000,
            "overhead_ms_per_call": None if name == "plain" else harness.median(overhead[name]),
            "info": info.get(name, {}),
        }
        bound = f"bound-{_storage_key(variant)}"
        if name != "plain" and bound in overhead:
            ratios = harness.paired(overhead[name], overhead[bound])
            row["x_bound"] = harness.median(ratios)
            row["x_bound_iqr"] = harness.quartiles(ratios)
        rows[name] = row
    versus: dict[str, dict[str, Any]] = {}
    for storage in ("sqlite", "postgres"):
        ours = f"agentops-{storage}"
        if ours not in overhead:
            continue
        for peer in ("dbos", "langgraph"):
            other = f"{peer}-{storage}"
            if other in overhead:
                ratios = harness.paired(overhead[ours], overhead[other])
                versus[f"{ours} / {other}"] = {
                    "ratio": harness.median(ratios),
                    "iqr": harness.quartiles(ratios),
                }
    return {"rows": rows, "versus": versus}


# The performance targets: our overhead per call at most this many times the two-commit bound,
# and at most this fraction of each peer's overhead on the same storage.
TARGETS = {"sqlite": 1.5, "postgres": 1.0}
PEER_TARGETS = {"langgraph": 0.5, "dbos": 1.0}


def report(summary: dict[str, Any], *, rounds: int, runs: int) -> str:
    rows = summary["rows"]
    lines = [
        f"Durable overhead per call: 10 steps x (1 model request + 2 tool calls) + the final "
        f"answer = {CALLS} calls per run.",
        f"{rounds} interleaved rounds x {runs} runs per variant; medians over rounds; ratios "
        "paired per round (25th-75th percentile in brackets).",
        "",
    ]
    body = []
    for row in rows.values():
        iqr = row.get("x_bound_iqr")
        body.append(
            [
                row["storage"],
                row["label"],
                row["ms_per_run"],
                row["overhead_ms_per_call"],
                None
                if "x_bound" not in row
                else f"{row['x_bound']:.2f} [{iqr[0]:.2f}-{iqr[1]:.2f}]",
            ]
        )
    lines.append(
        harness.table(
            [
                "storage",
                "variant",
                "ms per run",
                "durable overhead, ms per call",
                "x bound",
            ],
            body,
            align="llrrr",
        )
    )
    if summary["versus"]:
        lines += [
            "",
            "Ours against the peers, same storage (overhead ÷ overhead; < 1: we are cheaper):",
            "",
        ]
        lines.append(
            harness.table(
                ["pair", "ratio", "25th-75th"],
                [
                    [pair, value["ratio"], f"{value['iqr'][0]:.2f}-{value['iqr'][1]:.2f}"]
                    for pair, value in summary["versus"].items()
                ],
            )
        )
    lines += ["", "Targets:"]
    for storage, limit in TARGETS.items():
        row = rows.get(f"agentops-{storage}")
        if row is None or "x_bound" not in row:
            continue
        met = row["x_bound"] <= limit
        lines.append(
            f"  {storage}: overhead within {limit}x the two-commit bound: "
            f"{'MET' if met else 'MISSED'} ({row['x_bound']:.2f}x)"
        )
        for pair, value in summary["versus"].items():
            if pair.startswith(f"agentops-{storage} "):
                peer = pair.split(" / ")[1]
                most = PEER_TARGETS[peer.split("-")[0]]
                ok = value["ratio"] <= most
                lines.append(
                    f"  {storage}: at most {most}x {peer}'s overhead: {'MET' if ok else 'MISSED'} "
                    f"({value['ratio']:.2f}x)"
                )
    lines += ["", "What was measured:"]
    for name, row in rows.items():
        info = row["info"]
        details = [info[k] for k in ("version", "rows_per_run", "settings", "log") if info.get(k)]
        if info.get("peak_rss_mb"):
            details.append(f"peak RSS {info['peak_rss_mb']:.0f} MB")
        if details:
            lines.append(f"  {name}: " + "; ".join(str(d) for d in details))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.overhead", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--rounds", type=int, default=60, help="interleaved rounds (default 60)")
    parser.add_argument(
        "--runs", type=int, default=1, help="runs per variant per round (default 1)"
    )
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs per variant first")
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated variant names or storages (sqlite, postgres); plain always runs",
    )
    parser.add_argument(
        "--postgres",
        default=os.environ.get("BENCH_POSTGRES_URL", harness.DEFAULT_POSTGRES),
        help="PostgreSQL server; the bench creates and drops its own agentops_bench* databases",
    )
    parser.add_argument("--no-postgres", action="store_true", help="SQLite variants only")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--seed", type=int, default=8)
    args = parser.parse_args(argv)
    started = time.monotonic()

    postgres: str | None = None if args.no_postgres else args.postgres
    if postgres is not None:
        problem = harness.postgres_reachable(postgres)
        if problem is not None:
            print(f"PostgreSQL at {postgres} is not reachable ({problem}): SQLite only.")
            postgres = None

    with tempfile.TemporaryDirectory(prefix="agentops-bench-") as tmpdir:
        tmp = Path(tmpdir)
        chosen = variants(tmp, postgres)
        if args.only:
            wanted = {w.strip() for w in args.only.split(",") if w.strip()}
            chosen = [
                v
                for v in chosen
                if v.name == "plain" or v.name in wanted or _storage_key(v) in wanted
            ]
        skipped = [(v, v.missing()) for v in chosen if v.missing()]
        for variant, missing in skipped:
            print(
                f"skipped {variant.name}: {', '.join(missing)} not installed "
                "(.venv/bin/pip install -e '.[bench]')"
            )
        chosen = [v for v in chosen if not v.missing()]
        if postgres is not None and any(v.storage == "PostgreSQL" for v in chosen):
            for database in PG_DATABASES:
                harness.fresh_postgres_database(postgres, database)
        try:
            print(
                f"bench.overhead: {len(chosen)} variants, {args.rounds} rounds x {args.runs} runs"
            )
            with harness.workers(chosen, harness.worker_env(tmp), warmup=args.warmup) as pool:
                per_round = harness.interleave(
                    pool, rounds=args.rounds, runs=args.runs, seed=args.seed
                )
                info = {w.variant.name: {**w.info, "peak_rss_mb": w.peak_rss_mb()} for w in pool}
        finally:
            if postgres is not None and any(v.storage == "PostgreSQL" for v in chosen):
                for database in PG_DATABASES:
                    harness.drop_postgres_database(postgres, database)

    summary = summarize(chosen, per_round, info)
    machine = harness.machine()
    if postgres is not None:
        machine["postgresql"] = harness.postgres_version(postgres)
    print()
    print(report(summary, rounds=args.rounds, runs=args.runs))
    print()
    print(
        "Machine: "
        + ", ".join(f"{k} {v}" for k, v in machine.items())
        + f"; took {time.monotonic() - started:.0f} s"
    )
    harness.write_json(
        args.json,
        {
            "benchmark": "overhead",
            "calls_per_run": CALLS,
            "rounds": args.rounds,
            "runs": args.runs,
            "per_round_seconds": per_round,
            "machine": machine,
            **summary,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
