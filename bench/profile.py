"""Where our runtime's time goes on the overhead scenario.

    .venv/bin/python -m bench.profile [--storage sqlite|postgres] [--runs 30] [--tree|--own|--cpu]

Sets the runtime up exactly as `bench.overhead` does (own worker process, fresh benchmark
database) and prints the wall time per run of each part of the runtime (submit, claim, the
intent and outcome writes, the version check, ...). With --tree, pyinstrument's call tree of
the same runs instead. With --own, cProfile's own time (tottime) per call, by whose code it is:
the runtime's row is the engine's own Python, the database's wait is in its driver's rows.
With --cpu, the worker's CPU per run and per call with no profiler (the fastest of 9 batches of
--runs runs): on PostgreSQL, whose server works in processes of its own, what a call costs the
worker in Python, ours with Django's and the driver's.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from bench import harness
from bench.overhead import PG_DATABASES, variants


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.profile", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--storage", choices=("sqlite", "postgres"), default="postgres")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--tree", action="store_true", help="pyinstrument's call tree")
    parser.add_argument("--own", action="store_true", help="cProfile's own time, by package")
    parser.add_argument("--cpu", action="store_true", help="the worker's CPU, no profiler")
    parser.add_argument(
        "--postgres", default=os.environ.get("BENCH_POSTGRES_URL", harness.DEFAULT_POSTGRES)
    )
    args = parser.parse_args(argv)
    postgres = args.postgres if args.storage == "postgres" else None
    with tempfile.TemporaryDirectory(prefix="agentops-bench-") as tmpdir:
        tmp = Path(tmpdir)
        (variant,) = [v for v in variants(tmp, postgres) if v.name == f"agentops-{args.storage}"]
        if postgres is not None:
            harness.fresh_postgres_database(postgres, PG_DATABASES[0])
        try:
            with harness.workers([variant], harness.worker_env(tmp), warmup=3) as (worker,):
                modes = {"tree": "profile", "own": "own_python", "cpu": "cpu"}
                method = next((m for flag, m in modes.items() if getattr(args, flag)), "breakdown")
                result = worker.request(cmd="call", method=method, kwargs={"runs": args.runs})
                if args.tree:
                    print(result["result"])
                elif args.cpu:
                    title = f"agentops on {args.storage}: the worker's CPU, batches of {args.runs}"
                    print(f"\n{title}\n")
                    print(harness.table(["measure", "value"], result["result"]))
                elif args.own:
                    print(f"\nagentops on {args.storage}, {args.runs} runs: cProfile, per call\n")
                    head = ["code", "own time, µs per call", "function calls per call"]
                    print(harness.table(head, result["result"]))
                else:
                    print(f"\nagentops on {args.storage}, {args.runs} runs: wall time per run\n")
                    print(harness.table(["part", "ms per run", "calls per run"], result["result"]))
        finally:
            if postgres is not None:
                harness.drop_postgres_database(postgres, PG_DATABASES[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
