"""Named crash windows of the turn log, for the crash harness and fault-injection tests.

In production nothing is installed and `reach` returns at once. Tests install a handler
(`runtime.testing.crash_at`), or start a worker process with AGENTOPS_CRASH_AT=
window[:operation-name] to make it kill itself with SIGKILL at that window.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

# Where each window is reached. A call's outcome and the next call's intent share one commit
# when the next call is ready to dispatch (the fold, DESIGN "One commit per call"): the outcome
# is held, written but not committed, and the run's next fenced write carries it (the next
# intent, a record, the move out of `running`); a question to a person, a failed model
# request and the `report` policy's error commit their outcome alone. So, for a call A
# followed by a call B:
WINDOWS = (
    "before_intent",  # nothing written for this call yet (A's held outcome neither)
    "after_intent",  # intent committed (with the outcome it carried), not dispatched
    "in_handler",  # the handler returned (its effect happened), result not yet checked
    "after_handler",  # result checked, outcome not yet written
    "during_outcome",  # inside the transaction that commits the outcome (alone, or with B's
    # intent or the run's move), after its statements: a crash rolls it back as a whole
    "after_outcome",  # the outcome committed (with B's intent or the move it was carried by)
    "before_ack",  # the Celery task finished its work, the broker has not been acknowledged
)
# A crash anywhere between A's "after_handler" and the commit that carries its outcome (B's
# "before_intent" included) leaves A's outcome unwritten: recovery sees A as "after_handler"
# says. A's "after_outcome" and B's "after_intent" are then the same moment, reached in that
# order.

# handler(window, run, operation_key, operation_name)
Handler = Callable[[str, Any, str, str], None]
handler: Handler | None = None


def _kill_at(spec: str) -> Handler:
    window, _, name = spec.partition(":")
    if window not in WINDOWS:
        raise ValueError(f"AGENTOPS_CRASH_AT: unknown window {window!r} (one of {WINDOWS})")

    def kill(reached: str, run: Any, key: str, operation: str) -> None:
        if reached == window and name in ("", operation):
            os.kill(os.getpid(), signal.SIGKILL)

    return kill


def read_environment() -> None:
    """Read AGENTOPS_CRASH_AT: once, as the process starts (this module's import), because a
    call reaches its windows four or five times and the environment's lookup cost more than
    the rest of `reach`. A bad value fails here, before anything runs."""
    global _environment  # noqa: PLW0603 - the process's one reading
    spec = os.environ.get("AGENTOPS_CRASH_AT", "")
    _environment = _kill_at(spec) if spec else None


_environment: Handler | None = None
read_environment()


def active() -> bool:
    """Whether a crash can be injected: a test's handler or the crash variable is set. A record
    that is one statement then runs inside a transaction, so that a crash inside it rolls it
    back whole; in production one statement is atomic by itself and no window has width."""
    return handler is not None or _environment is not None


def reach(window: str, run: Any, key: str, operation: str) -> None:
    """Called by the engine at each window; does nothing unless a handler is installed."""
    active = handler or _environment
    if active is not None:
        active(window, run, key, operation)


# The fence as a test harness sees it (runtime.testing.fence_hook): called around every fenced
# write of a worker with the run, it yields what the write requires of the run, its fence and
# status (the claim's: run.fence and "running", unless the harness substitutes others to show
# what a worker without the check would do), and sees the LeaseLost of a refused write. In
# production nothing is installed.
FenceHook = Callable[[Any], AbstractContextManager[tuple[int, str]]]
fence: FenceHook | None = None
