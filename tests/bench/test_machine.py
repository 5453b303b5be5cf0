"""What every benchmark prints as the machine its figures were measured on."""

from __future__ import annotations

import pytest

from bench import harness


def test_the_machine_names_its_processor_and_how_fast_it_runs_python_now() -> None:
    machine = harness.machine()

    assert isinstance(machine["cpu"], str) and machine["cpu"] not in {"", "?"}
    probe = machine["python probe ms"]
    assert isinstance(probe, float) and probe > 0


def test_the_probe_is_the_best_timing_in_ms(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two timings of the workload, 25 ms and 12.34 ms: the probe is the faster, in ms.
    clock = iter([0.0, 0.025, 1.0, 1.01234])
    monkeypatch.setattr(harness.time, "perf_counter", lambda: next(clock))

    assert harness.python_probe_ms(repeat=2) == 12.3
