"""What the runtime tells the rest of the process without writing it to a run.

`write_refused` is sent when the fence refused a worker's write (the store raised LeaseLost: the
run was taken over or cancelled under it). The worker must commit nothing more to the run
(CONFORMANCE E2), so the refusal is not in the run's log; a receiver that wants to count it
keeps the count in its own tables. Arguments: `run_id`, `agent`, `fence` (the refused claim's).
"""

from __future__ import annotations

import logging
from typing import Any

from django.dispatch import Signal

from runtime.agents import Cancelled
from runtime.errors import LeaseLost

log = logging.getLogger(__name__)

write_refused = Signal()


def refused(run: Any, lost: LeaseLost) -> None:
    """Tell the receivers that `run`'s claim ended in a refused write. A tool that stopped by
    itself on seeing the run cancelled (Cancelled) wrote nothing, so nothing was refused."""
    if isinstance(lost, Cancelled):
        return
    # A receiver's failure must not turn the worker's orderly stop into a crash.
    for receiver, error in write_refused.send_robust(
        sender=None, run_id=run.pk, agent=run.agent, fence=run.fence
    ):
        if isinstance(error, Exception):
            log.error("run %s: write_refused receiver %r failed: %s", run.pk, receiver, error)
