"""Benchmark 1 side by side: this checkout's runtime against another revision's, in the same rounds.

    .venv/bin/python -m bench.compare REV [--rounds 60] [--runs 5] [--only sqlite|postgres]

A change to the hot path moves the time per run by a few percent, and a shared machine moves
it by more from one run of `bench.overhead` to the next. So the two codes run in the same
rounds: `bench.overhead`'s scenario under our runtime, once from a worktree of REV (checked out
in a temporary folder, removed after) and once from this checkout, in shuffled order within
each round, and each round's ratio is taken before their median. Reported per storage: the ms
per run of each and this checkout's time as a fraction of REV's, with its 25th-75th percentile
over rounds. Uncommitted changes count as this checkout's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import harness
from bench.harness import Variant

STORAGES = ("sqlite", "postgres")
# Their names start with BENCH_COMPARE_DATABASE, for checkouts sharing a server.
_PREFIX = os.environ.get("BENCH_COMPARE_DATABASE", "agentops_bench_compare")
SIDES = ("before", "after")


def database(side: str) -> str:
    """The PostgreSQL database of one side."""
    return f"{_PREFIX}_{side}"


def variants(tmp: Path, before: Path, postgres: str | None, storages: list[str]) -> list[Variant]:
    """Our runtime from each checkout, on each storage: REV's first, then this one's."""
    found = []
    for storage in storages:
        for side, root in zip(SIDES, (before, harness.ROOT), strict=True):
            name = f"{storage}-{side}"
            if storage == "sqlite":
                env = {"AGENTOPS_SQLITE_PATH": str(tmp / f"{name}.sqlite3")}
            else:
                assert postgres is not None
                env = {"DATABASE_URL": harness.postgres_url(postgres, database(side))}
            # The worker runs from the checkout, and imports from it first.
            env["PYTHONPATH"] = str(root)
            found.append(
                Variant(name, name, storage, "bench.variants:AgentOps", env=env, root=root)
            )
    return found


def summary(per_round: dict[str, list[float]], storages: list[str]) -> list[list[object]]:
    """Per storage: ms per run before and after (medians over rounds), and after ÷ before
    paired per round, with its 25th-75th percentile."""
    rows: list[list[object]] = []
    for storage in storages:
        before, after = per_round[f"{storage}-before"], per_round[f"{storage}-after"]
        ratios = harness.paired(after, before)
        low, high = harness.quartiles(ratios)
        rows.append(
            [
                storage,
                harness.median(before) * 1000,
                harness.median(after) * 1000,
                f"{harness.median(ratios):.3f} ({low:.3f}-{high:.3f})",
            ]
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.compare", description=__doc__.split("\n")[0]
    )
    parser.add_argument("rev", help="the revision to measure this checkout against")
    parser.add_argument("--rounds", type=int, default=60, help="interleaved rounds (default 60)")
    parser.add_argument("--runs", type=int, default=5, help="runs per side per round (default 5)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed runs per side first")
    parser.add_argument("--only", choices=STORAGES, help="one storage only")
    parser.add_argument(
        "--postgres",
        default=os.environ.get("BENCH_POSTGRES_URL", harness.DEFAULT_POSTGRES),
        help="PostgreSQL server; the bench creates and drops its own agentops_bench_compare_*",
    )
    parser.add_argument("--seed", type=int, default=8)
    args = parser.parse_args(argv)
    started = time.monotonic()
    storages = [args.only] if args.only else list(STORAGES)
    postgres: str | None = args.postgres if "postgres" in storages else None
    if postgres is not None:
        problem = harness.postgres_reachable(postgres)
        if problem is not None:
            print(f"PostgreSQL at {postgres} is not reachable ({problem}): SQLite only.")
            storages, postgres = ["sqlite"], None
    # The databases each side's worker starts afresh on, and which are dropped after it.
    own = [(postgres, database(side)) for side in SIDES] if postgres is not None else []

    with tempfile.TemporaryDirectory(prefix="agentops-bench-") as tmpdir:
        tmp = Path(tmpdir)
        before = tmp / "before"
        git = ["git", "-C", str(harness.ROOT)]
        checkout = [*git, "worktree", "add", "--detach", "-q", str(before), args.rev]
        subprocess.run(checkout, check=True)
        try:
            for server, name in own:
                harness.fresh_postgres_database(server, name)
            chosen = variants(tmp, before, postgres, storages)
            print(f"bench.compare: {args.rev} against this checkout, {args.rounds} rounds")
            with harness.workers(chosen, harness.worker_env(tmp), warmup=args.warmup) as pool:
                per_round = harness.interleave(
                    pool, rounds=args.rounds, runs=args.runs, seed=args.seed
                )
        finally:
            for server, name in own:
                harness.drop_postgres_database(server, name)
            subprocess.run([*git, "worktree", "remove", "--force", str(before)], check=False)

    head = ["storage", f"{args.rev}, ms per run", "this checkout, ms per run", "this ÷ that"]
    print()
    print(harness.table(head, summary(per_round, storages)))
    machine = ", ".join(f"{k} {v}" for k, v in harness.machine().items())
    print(f"\nMachine: {machine}; took {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
