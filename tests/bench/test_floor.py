"""The overhead benchmark's floor and bound: what their records write, measured in their own
worker processes as `python -m bench.overhead` runs them."""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import harness

OPERATION = "key, kind, name, policy, status, input, input_hash, result, is_error, error, usage"
EVENT = "operation_key, kind, data"


Place = Callable[[str], dict[str, Any]]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Place]:
    """Where a variant's worker keeps its records, one place per name: a SQLite file, or a
    PostgreSQL database of its own on the server of the PostgreSQL pass."""
    made: list[str] = []

    def make(name: str) -> dict[str, Any]:
        if request.param == "sqlite":
            path = str(tmp_path / f"{name}.sqlite3")
            return {"env": {"AGENTOPS_SQLITE_PATH": path}, "options": {"path": path}}
        database = f"{harness.BENCH_DB_PREFIX}_test_{name}_{os.getpid()}"
        url = harness.fresh_postgres_database(os.environ["DATABASE_URL"], database)
        made.append(database)
        return {"env": {"DATABASE_URL": url}, "options": {"url": url}}

    yield make
    for database in made:
        harness.drop_postgres_database(os.environ["DATABASE_URL"], database)


def started(factory: str, storage: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """A worker's variant set up, run once and checked, then stopped: what its check said."""
    variant = harness.Variant("under test", "", "", factory, storage["env"], storage["options"])
    worker = harness.Worker(variant, harness.worker_env(tmp_path), warmup=1)
    worker.close()
    return worker.info


def rows(storage: dict[str, Any], query: str) -> list[tuple[Any, ...]]:
    if "path" in storage["options"]:
        with sqlite3.connect(storage["options"]["path"]) as conn:
            return [tuple(row) for row in conn.execute(query)]
    import psycopg

    with psycopg.connect(storage["options"]["url"]) as conn:
        return [tuple(row) for row in conn.execute(query)]


def by_run(found: list[tuple[Any, ...]]) -> dict[str, dict[tuple[str, str], tuple[Any, ...]]]:
    """Rows by run, then by call and kind: a run of the runtime keys its calls as the plain
    loop does ("step-1/model"); the floor prefixes each of its runs' keys."""
    runs: dict[str, dict[tuple[str, str], tuple[Any, ...]]] = {}
    for key, kind, *rest in found:
        prefix, _, call = key.partition("step-")
        runs.setdefault(prefix, {})[call, kind] = tuple(rest)
    return runs


def test_the_floor_writes_what_a_run_of_the_runtime_wrote_for_each_call(
    place: Place, tmp_path: Path
) -> None:
    storage = place("records")
    started("bench.variants:Records", storage, tmp_path)

    operations = by_run(rows(storage, f"SELECT {OPERATION} FROM agentops_operation"))
    events = by_run(
        rows(storage, f"SELECT {EVENT} FROM agentops_event WHERE kind IN ('intent', 'outcome')")
    )
    runtime_ops, runtime_events = operations.pop(""), events.pop("")
    assert len(runtime_ops) == 31 and len(runtime_events) == 62
    # The warm-up run, and the check's run that measures the log (or its three on PostgreSQL).
    assert len(operations) == len(events) >= 2
    for floor_ops in operations.values():
        assert floor_ops == runtime_ops
    for floor_events in events.values():
        assert floor_events == runtime_events
    # A model request's values are not a tool call's: the floor writes each call's own.
    assert {kind for _, kind in runtime_ops} == {"model", "tool"}


def measured(info: dict[str, Any]) -> float:
    match = re.fullmatch(r"log per call ([\d,.]+) (pages of 4 KB|bytes)", info["log"])
    assert match, info["log"]
    return float(match[1].replace(",", ""))


def test_each_records_log_is_measured_per_call(place: Place, tmp_path: Path) -> None:
    bound_place = place("bound")
    bound = "BoundPostgres" if "url" in bound_place["options"] else "BoundSqlite"
    bare = measured(started(f"bench.variants:{bound}", bound_place, tmp_path))
    floor = measured(started("bench.variants:Records", place("records"), tmp_path))
    ours = measured(started("bench.variants:AgentOps", place("ours"), tmp_path))

    if bound == "BoundSqlite":
        # A bare autocommitted INSERT appends two pages, its table's and the sequence's (the
        # key is AUTOINCREMENT), twice per call; now and then one more where a page splits.
        assert 4.0 <= bare < 4.5
    else:
        # Two INSERTs and their commits' records: a few hundred bytes.
        assert 100 < bare < 1_000
    # Our records change more pages, and write more, than two bare commits; the runtime writes
    # what the floor writes and its run's own rows (submitted, claimed, finished).
    assert bare < floor < ours
