"""The runtime's clock: one place to read the time, so tests can freeze and move it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager

from django.utils import timezone

_frozen: dt.datetime | None = None


def now() -> dt.datetime:
    # Aware UTC, as django.utils.timezone.now() gives it with USE_TZ (agentops/settings.py sets
    # it), without that function's look at the settings: every record reads the clock.
    return _frozen if _frozen is not None else dt.datetime.now(dt.UTC)


@contextmanager
def frozen(at: dt.datetime | None = None) -> Iterator[FrozenClock]:
    """Freeze `now()` (at `at`, default the current time) for the duration of the block."""
    global _frozen  # noqa: PLW0603 - the single switch tests flip
    previous = _frozen
    _frozen = at or timezone.now()
    try:
        yield FrozenClock()
    finally:
        _frozen = previous


class FrozenClock:
    def advance(self, seconds: float) -> dt.datetime:
        global _frozen  # noqa: PLW0603
        assert _frozen is not None
        _frozen = _frozen + dt.timedelta(seconds=seconds)
        return _frozen
