"""The chaos soak: refund-desk runs on real workers under random kills, pauses, dropped database
connections and broker restarts; then the invariants (see chaos_support).

`make test` runs the bounded soak with a fresh seed each time; `make soak` runs the long one
(AGENTOPS_SOAK=1, `soak` marker; AGENTOPS_SOAK_RUNS sets its size). AGENTOPS_CHAOS_SEED replays
a seed's schedule (the process timings differ from run to run, so a seed reproduces the faults
and the runs, not every interleaving). A seed that failed goes into REGRESSION_SEEDS.
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime import register
from tests.reliability.chaos_support import (
    AGENT_MODULES,
    OwnRedis,
    Report,
    Settings,
    Soak,
    chaos_desk,
)
from tests.reliability.conftest import STRICT
from tests.reliability.harness import Cluster

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

SOAK = os.environ.get("AGENTOPS_SOAK") == "1"
# Seeds that once found a violation, replayed (smaller) on every `make test`:
# 1978510267 showed a worker paused inside a tool call finishing that call after the takeover;
# the check now tells such calls (their writes refused by the fence) from two live owners.
REGRESSION_SEEDS: list[int] = [1978510267]
BOUNDED = Settings(runs=80, min_fault_seconds=25.0)
REGRESSION = Settings(runs=40, min_fault_seconds=15.0)


class ChaosCluster(Cluster):
    """The harness's cluster, with the chaos agent in the workers' code registry."""

    def _env(self, extra: dict[str, str]) -> dict[str, str]:
        env = super()._env(extra)
        env["AGENTOPS_AGENT_MODULES"] = AGENT_MODULES
        return env


@pytest.fixture
def chaos(transactional_db: None, tmp_path: Path, settings: Any) -> Iterator[Callable[..., Soak]]:
    """soak(seed, size) -> a Soak on its own Redis and workers; everything is stopped after."""
    if shutil.which("redis-server") is None:
        message = "redis-server is not installed: the soak starts (and restarts) its own Redis"
        if STRICT:
            pytest.fail(message)
        pytest.skip(message)
    settings.AGENTOPS_AGENT_MODULES = AGENT_MODULES.split(",")
    register([chaos_desk], actor="chaos-test")
    servers: list[OwnRedis] = []
    clusters: list[Cluster] = []

    def make(seed: int, size: Settings) -> Soak:
        server = OwnRedis(tmp_path)
        servers.append(server)
        server.start()
        cluster = ChaosCluster(tmp_path, broker_url=server.url)
        clusters.append(cluster)
        return Soak(cluster, server, seed, size)

    try:
        yield make
    finally:
        for cluster in clusters:
            cluster.stop_all()
        for server in servers:
            server.stop()


def seed_to_use() -> int:
    chosen = os.environ.get("AGENTOPS_CHAOS_SEED")
    return int(chosen) if chosen else random.SystemRandom().randrange(2**31)


def assert_invariants(report: Report) -> None:
    problems = "\n".join(report.problems)
    assert not report.problems, f"seed {report.seed} (add it to REGRESSION_SEEDS):\n{problems}"
    assert report.lost == 0
    assert report.duplicates == 0
    # The schedule starts with one fault of each kind, so that each is survived every time.
    assert {"kill", "pause", "db_drop", "redis_restart"} <= set(report.faults)


def test_it_keeps_every_invariant_under_random_faults(chaos, observe) -> None:
    seed = seed_to_use()
    print(f"chaos seed={seed}")
    report = chaos(seed, BOUNDED).run()
    observe(report.line())
    assert_invariants(report)
    assert report.runs == BOUNDED.runs


@pytest.mark.parametrize("seed", REGRESSION_SEEDS)
def test_it_keeps_every_invariant_for_the_seeds_that_once_failed(chaos, observe, seed) -> None:
    report = chaos(seed, REGRESSION).run()
    observe(report.line())
    assert_invariants(report)


@pytest.mark.soak
@pytest.mark.timeout(7200)
@pytest.mark.skipif(not SOAK, reason="the long soak: `make soak` (AGENTOPS_SOAK=1)")
def test_the_long_soak_keeps_every_invariant(chaos, observe) -> None:
    seed = seed_to_use()
    runs = int(os.environ.get("AGENTOPS_SOAK_RUNS", "500"))
    print(f"chaos seed={seed} runs={runs}")
    report = chaos(seed, Settings(runs=runs, workers=4, min_fault_seconds=120.0)).run()
    observe(report.line())
    assert_invariants(report)
    assert report.runs == runs
