"""A crash harness for tests of agents and tools: crash at a named window, then recover.

    with testing.crash_at("after_handler", tool="refund_order"):
        engine.advance(run.pk)          # raises SimulatedCrash where a worker would die
    testing.recover(run.pk)             # the lease expires; a new worker takes over

Windows: before_intent, after_intent, in_handler, after_handler, during_outcome (the outcome
transaction rolls back), after_outcome. A tool is targeted by its name, model requests as
"model" (in every window but in_handler; a failed model request reaches after_outcome too). The
crash is a BaseException, so nothing in the engine or a tool can catch it, exactly like a
process that died.

    with testing.fixed_jitter(1.0):     # backoff delays at their ceiling, for exact timers
        ...

    with testing.fence_hook(watch):     # see (or substitute) the fence of every fenced write
        ...
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from runtime import agents, engine, faults, store
from runtime.models import Run
from runtime.registry import code_defines

__all__ = [
    "SimulatedCrash",
    "code_defines",
    "crash_at",
    "expire_lease",
    "fence_hook",
    "fixed_jitter",
    "recover",
    "run_until_idle",
    "seeded_jitter",
]


class SimulatedCrash(BaseException):
    """The worker 'died' here: nothing after this point ran or committed."""


@contextmanager
def crash_at(window: str, *, tool: str | None = None, times: int = 1) -> Iterator[list[str]]:
    """Crash the first `times` times `window` is reached (for `tool`, or any operation).

    `tool="model"` targets model requests. Yields the list of keys where it crashed.
    """
    if window not in faults.WINDOWS:
        raise ValueError(f"unknown crash window {window!r}; one of {', '.join(faults.WINDOWS)}")
    crashed: list[str] = []

    def crash(reached: str, run: Any, key: str, operation: str) -> None:
        if reached == window and tool in (None, operation) and len(crashed) < times:
            crashed.append(key)
            raise SimulatedCrash(f"crash at {window} of {key}")

    previous, faults.handler = faults.handler, crash
    try:
        yield crashed
    finally:
        faults.handler = previous


@contextmanager
def fence_hook(hook: faults.FenceHook) -> Iterator[None]:
    """Install `hook` around every fenced write of a worker inside the block.

    `hook(run)` is a context manager that yields what the write requires of the run, its fence
    and status (`(run.fence, "running")` to only watch; the run's current ones to show what a
    worker without the check would do) and sees the LeaseLost of a refused write. Worker
    processes of a test may also assign `runtime.faults.fence` for their lifetime.
    """
    previous, faults.fence = faults.fence, hook
    try:
        yield
    finally:
        faults.fence = previous


def expire_lease(run_id: Any) -> None:
    """Make a crashed worker's lease run out now, as the passing of time would."""
    store.expire_lease(run_id)


def run_until_idle(run_id: Any, *, limit: int = 50) -> Run:
    """Advance the run until no worker can claim it (it completed, failed or needs a person)."""
    for _ in range(limit):
        if not engine.advance(run_id, owner="test-worker"):
            break
    return Run.objects.get(pk=run_id)


def recover(run_id: Any) -> Run:
    """What a replacement worker does after a crash: take the run over and go on."""
    expire_lease(run_id)
    return run_until_idle(run_id)


class _Fixed(random.Random):
    def __init__(self, fraction: float) -> None:
        super().__init__()
        self.fraction = fraction

    def random(self) -> float:
        return self.fraction


@contextmanager
def _jitter_source(source: random.Random) -> Iterator[None]:
    previous, agents._random = agents._random, source
    try:
        yield
    finally:
        agents._random = previous


@contextmanager
def fixed_jitter(fraction: float) -> Iterator[None]:
    """Every backoff draws `fraction` (0 to 1) of its ceiling inside the block."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"a jitter fraction is between 0 and 1, got {fraction!r}")
    with _jitter_source(_Fixed(fraction)):
        yield


@contextmanager
def seeded_jitter(seed: int) -> Iterator[None]:
    """Backoff jitter from a generator seeded with `seed`: the same draws on every run."""
    with _jitter_source(random.Random(seed)):
        yield
