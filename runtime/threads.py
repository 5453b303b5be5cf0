"""The threads the runtime starts, and the rule they all keep: a thread's database connections
are closed when it ends.

A pooled connection goes back to its pool only when it is closed; Django closes a request's at
its end, and nothing closes a thread's. A thread that ended holding one would take it out of the
pool for good (the pool cannot tell a dead thread from a busy one), and a process that starts a
thread per run — the heartbeat — would run its pool dry after max_size runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import connections


def thread(target: Callable[[], object], *, name: str) -> threading.Thread:
    """A daemon thread (not started) running `target`, its connections closed when it ends."""

    def run() -> None:
        try:
            target()
        finally:
            connections.close_all()

    return threading.Thread(target=run, name=name, daemon=True)
