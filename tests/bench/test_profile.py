"""bench.profile --cpu: the worker's CPU per run and per call, with no profiler."""

from __future__ import annotations

import time

import pytest

from bench import scenario
from bench.variants import AgentOps


class _Runs:
    """A variant whose runs the test counts; the clocks are the test's."""

    def __init__(self) -> None:
        self.runs = 0

    def run(self) -> None:
        self.runs += 1


def test_the_cpu_is_the_fastest_batch_per_run_and_per_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Three batches of two runs: 62, 31 and 93 ms of CPU; 100, 300 and 200 ms of wall time.
    cpu = iter([0.0, 0.062, 1.0, 1.031, 2.0, 2.093])
    wall = iter([0.0, 0.100, 1.0, 1.300, 2.0, 2.200])
    monkeypatch.setattr(time, "process_time", lambda: next(cpu))
    monkeypatch.setattr(time, "perf_counter", lambda: next(wall))
    variant = _Runs()

    rows: dict[str, float] = dict(AgentOps.cpu(variant, runs=2, batches=3))  # type: ignore[arg-type]

    assert variant.runs == 6
    assert rows["CPU per run, ms (fastest batch)"] == pytest.approx(15.5)
    assert rows["CPU per call, µs"] == pytest.approx(15_500 / scenario.CALLS)
    assert rows["wall time per run, ms (median batch)"] == pytest.approx(100.0)
