"""One pass of the outbox: fold the metrics and the search text, make deliveries and
notifications, claim what is due.

Every worker runs `sweep` on its timer (agentops/integrations/worker.py): the database work
happens there, and each claimed message is handed to a task, so a slow receiver holds a task
slot, never the timer. `drain` does the same passes and sends in the calling thread, for
`manage.py outbox` and the tests.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connections

from agentops.integrations import metrics_fold, notifications, outbox, search_index, webhooks

log = logging.getLogger(__name__)


@dataclass
class Claimed:
    webhooks: list[outbox.Claim] = field(default_factory=list)
    notifications: list[outbox.Claim] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.webhooks or self.notifications)


def pump() -> Claimed:
    batch = settings.AGENTOPS_OUTBOX_BATCH
    metrics_fold.fold(batch)
    search_index.fold(batch)
    webhooks.dispatch(batch)
    notifications.dispatch(batch)
    return Claimed(webhooks.claim_due(batch), notifications.claim_due(batch))


def sweep() -> None:
    """The timer's pass: claim, and hand each claim to a task. Never raises (logged; the next
    pass tries again); holds no connection between passes (see agentops.tasks.sweep)."""
    from agentops.integrations import tasks

    try:
        claimed = pump()
        for held in claimed.webhooks:
            tasks.send_webhook.delay(held.pk, str(held.token))
        for held in claimed.notifications:
            tasks.send_notification.delay(held.pk, str(held.token))
    except Exception:
        log.exception("outbox sweep failed; the next one tries again")
    finally:
        connections.close_all()


def drain(rounds: int = 100) -> int:
    """Pump and send in this thread until nothing is due; how many messages were attempted."""
    attempted = 0
    for _ in range(rounds):
        claimed = pump()
        if not claimed:
            break
        for held in claimed.webhooks:
            webhooks.send(held)
        for held in claimed.notifications:
            notifications.send(held)
        attempted += len(claimed.webhooks) + len(claimed.notifications)
    return attempted
