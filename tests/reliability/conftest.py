"""Fixtures of the reliability tests: a Redis broker, a cluster of real processes, the agent.

The numbers the tests observe (runs, kills, duplicates, fenced writes) are printed as they are
observed (visible with -s) and repeated in a section of the terminal summary.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime import Agent, register

STRICT = os.environ.get("AGENTOPS_STRICT") == "1"
OBSERVED: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """Put the SQLite test database in a file: worker processes and threads must share it.

    (An in-memory SQLite database is private to one process.) AGENTOPS_SQLITE_TEST_PATH, when
    set, already does this.
    """
    del config
    from django.conf import settings

    database = settings.DATABASES["default"]
    test = database.setdefault("TEST", {})
    if database["ENGINE"].endswith("sqlite3") and not test.get("NAME"):
        test["NAME"] = str(Path(tempfile.gettempdir()) / f"agentops-test-{os.getpid()}.sqlite3")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if OBSERVED:
        terminalreporter.section("reliability: what the tests observed")
        for line in OBSERVED:
            terminalreporter.write_line(line)


@pytest.fixture
def observe(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Print a line of observed numbers now and again in the terminal summary."""

    def _observe(line: str) -> None:
        text = f"[{request.node.name}] {line}"
        print(text)
        OBSERVED.append(text)

    return _observe


@pytest.fixture(scope="session")
def broker_url() -> str:
    """The Redis broker of these tests; unreachable fails the strict (CI) run, else skips."""
    import redis

    from tests.reliability.harness import BROKER_URL

    try:
        redis.Redis.from_url(BROKER_URL, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        message = f"Redis broker {BROKER_URL} unreachable: {exc}"
        if STRICT:
            pytest.fail(message + " (AGENTOPS_STRICT=1 requires it)")
        pytest.skip(message)
    return BROKER_URL


def _flush(url: str) -> None:
    import redis

    redis.Redis.from_url(url).flushdb()


@pytest.fixture
def cluster(transactional_db: None, broker_url: str, tmp_path: Path) -> Iterator[Any]:
    """Real worker processes on the test database and a clean broker; all killed at the end.

    Depends on transactional_db so that it is torn down first: no worker still holds a
    connection or a lock when the tables are flushed.
    """
    from tests.reliability.harness import Cluster

    _flush(broker_url)
    cluster = Cluster(tmp_path, broker_url=broker_url)
    try:
        yield cluster
    finally:
        cluster.stop_all()
        _flush(broker_url)


@pytest.fixture
def processes(transactional_db: None, tmp_path: Path) -> Iterator[Any]:
    """Real processes on the test database without a broker (the embedded setup)."""
    from tests.reliability.harness import Cluster

    cluster = Cluster(tmp_path)
    try:
        yield cluster
    finally:
        cluster.stop_all()


@pytest.fixture
def agent(transactional_db: None, settings: Any) -> Agent:
    """The reliability agents, in the code registry (as in the workers) and registered.

    Returns `reliability`; `quick_retry` (a 0.3 s retry timer) is registered too.
    """
    settings.AGENTOPS_AGENT_MODULES = ["tests.reliability.agents"]
    from tests.reliability.agents import quick_retry, reliability

    register([reliability, quick_retry], actor="reliability-test")
    return reliability
