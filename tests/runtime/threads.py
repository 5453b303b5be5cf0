"""Calls made at the same moment, each on its own thread and database connection."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from django.db import connection


def at_once(calls: Sequence[Callable[[], Any]]) -> list[Any]:
    """Start every call together (a barrier); each call's value, or the exception it raised."""
    outcomes: list[Any] = [None] * len(calls)
    barrier = threading.Barrier(len(calls), timeout=60)

    def side(i: int) -> None:
        try:
            barrier.wait()
            outcomes[i] = calls[i]()
        except BaseException as exc:  # judged by the test, whatever it is
            outcomes[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=side, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def won(outcome: Any) -> bool:
    return not isinstance(outcome, BaseException)
