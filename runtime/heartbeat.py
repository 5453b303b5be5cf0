"""The heartbeat: one thread per process renews the lease of every claim that runs long. It is
the only renewal: a claim's records check its fence and leave the lease (runtime/store/sql.py).

Each claim in progress is renewed a third of the lease after its start, then a third of the lease
after each renewal, until it ends or its lease is lost. One thread serves all of the process's
claims: a thread started per claim cost more than a short run's records (`start` waits for the
new thread to be scheduled), and most claims end before their first beat.

The thread closes its database connections after every renewal (runtime.threads says why): a
pooled connection is not kept out of the pool between beats.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from django.db import connections

from runtime import store, threads
from runtime.errors import LeaseLost

log = logging.getLogger(__name__)


@dataclass
class _Claim:
    run: Any
    due: float  # time.monotonic() of its next renewal


class Heartbeats:
    """The claims this process renews, and the thread that renews them."""

    def __init__(self) -> None:
        self._tokens = itertools.count(1)
        self._forget()
        # A forked worker inherits this object but not its thread, and perhaps a lock held by
        # a thread that is not there: it starts afresh.
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._changed = threading.Condition()
        self._claims: dict[int, _Claim] = {}
        self._renewing: set[int] = set()
        self._thread: threading.Thread | None = None

    def add(self, run: Any) -> int:
        """Renew `run`'s lease while its claim lasts: a token for `remove`."""
        with self._changed:
            if self._thread is None:
                self._thread = threads.thread(self._beat, name="agentops-heartbeat")
                self._thread.start()
            token = next(self._tokens)
            self._claims[token] = _Claim(run, time.monotonic() + _interval())
            self._changed.notify()
        return token

    def remove(self, token: int) -> None:
        """The claim ended: no renewal of it starts after this returns, and none is in flight."""
        with self._changed:
            self._claims.pop(token, None)
            while token in self._renewing:
                self._changed.wait()

    def _beat(self) -> None:
        while True:
            with self._changed:
                due = self._due()
                self._renewing.update(token for token, _ in due)
            for token, run in due:
                kept = _renew(run)
                with self._changed:
                    self._renewing.discard(token)
                    claim = self._claims.get(token)
                    if claim is not None:
                        if kept:
                            claim.due = time.monotonic() + _interval()
                        else:
                            del self._claims[token]
                    self._changed.notify_all()

    def _due(self) -> list[tuple[int, Any]]:
        """Waits (holding the condition) until some claims are due: those, with their runs."""
        while True:
            now = time.monotonic()
            due = [(token, c.run) for token, c in self._claims.items() if c.due <= now]
            if due:
                return due
            soonest = min((c.due for c in self._claims.values()), default=None)
            self._changed.wait(None if soonest is None else soonest - now)


def _interval() -> float:
    return store.lease_seconds() / 3


def _renew(run: Any) -> bool:
    """One renewal: whether to go on renewing (False once the lease is lost). Never raises: the
    thread serves every claim of the process."""
    try:
        store.renew(run)
    except LeaseLost:
        return False
    except Exception:  # a dropped connection: the next beat tries again
        log.exception("run %s: heartbeat failed", run.pk)
    finally:
        # Between beats the thread holds no connection (a pooled one goes back), and a claim's
        # `remove` returns once it is given back.
        try:
            connections.close_all()
        except Exception:
            log.exception("heartbeat: closing its connections failed")
    return True


HEARTBEATS = Heartbeats()
