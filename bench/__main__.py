"""Every benchmark in turn, each printing its tables: what `make bench` runs.

    .venv/bin/python -m bench [--quick] [--json-dir DIR]

About 10 minutes on the 2-core development machine (--quick: about 4). Needs the bench extra
(.venv/bin/pip install -e '.[bench]'); PostgreSQL and Redis where they are reachable (the
benchmarks say what they skipped when they are not).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench import archive, console, live, load, overhead, throughput


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, runs and rows")
    parser.add_argument("--json-dir", help="write each benchmark's figures as JSON here")
    args = parser.parse_args(argv)
    started = time.monotonic()

    def json(name: str) -> list[str]:
        if not args.json_dir:
            return []
        Path(args.json_dir).mkdir(parents=True, exist_ok=True)
        return ["--json", str(Path(args.json_dir) / f"{name}.json")]

    quick = args.quick
    steps = [
        (
            "1. Durable overhead per call",
            overhead.main,
            (["--rounds", "15"] if quick else []) + json("overhead"),
        ),
        (
            "2. Throughput",
            throughput.main,
            (["--runs", "30", "--rounds", "1"] if quick else []) + json("throughput"),
        ),
        (
            "3. Console at scale",
            console.main,
            (["--runs", "20000", "--requests", "10"] if quick else []) + json("console"),
        ),
        ("4. Live latency", live.main, (["--runs", "10"] if quick else []) + json("live")),
        (
            "6. Under load",
            load.main,
            (["--minutes", "0.5"] if quick else ["--minutes", "1"]) + json("load"),
        ),
        (
            "7. Retention at scale",
            archive.main,
            (["--runs", "5000"] if quick else []) + json("archive"),
        ),
    ]
    for title, run, options in steps:
        print(f"\n=== {title} ===\n", flush=True)
        run(options)
    print(
        "\n5. Memory: the peak RSS of each process is in the tables above (benchmark 1: the "
        "runtime's worker process per variant; 2: Celery workers and drivers; 3: the web "
        "process serving the console at scale; 4: the server and the worker)."
    )
    print(f"\nAll benchmarks took {time.monotonic() - started:.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
