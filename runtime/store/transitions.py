"""Every guarded move of a run is checked against the one transition table, RUN_TRANSITIONS."""

from __future__ import annotations

from collections.abc import Iterable

from runtime.errors import InvalidTransition
from runtime.models import RUN_TRANSITIONS


def check(sources: Iterable[str], target: str) -> None:
    """Refuse a move the table does not allow from any of `sources` to `target`."""
    for source in sources:
        if target not in RUN_TRANSITIONS.get(source, frozenset()):
            raise InvalidTransition(f"a run cannot move from {source} to {target}")
