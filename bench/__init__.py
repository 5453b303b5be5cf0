"""Benchmarks: each a command that prints its figures beside a baseline measured in the same run.

    .venv/bin/python -m bench              all of them, in turn (make bench)
    .venv/bin/python -m bench.overhead     1. durable overhead per call: bound, floor and peers
    .venv/bin/python -m bench.throughput   2. runs per second, Celery and embedded; round trips
    .venv/bin/python -m bench.console      3. console pages at 100,000 runs / 1,000,000 events
    .venv/bin/python -m bench.live         4. event commit -> websocket frame latency
    .venv/bin/python -m bench.load         6. 50 operators in browsers while runs stream in
    .venv/bin/python -m bench.archive      7. retention: rows archived and deleted per second
    .venv/bin/python -m bench.profile      where a run's time goes in our runtime

Each variant runs in a process of its own (bench.worker), driven by bench.harness; benchmark
databases are their own (PostgreSQL agentops_bench*, SQLite in a temporary directory).
"""
