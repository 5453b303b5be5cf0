"""Celery tasks of the integrations: send one claimed message. They decide nothing: the claim
token says whether this delivery may still send (a stale or duplicate message does nothing)."""

from __future__ import annotations

import uuid

from celery import shared_task

from agentops.integrations import notifications, outbox, webhooks
from agentops.integrations.models import MessageStatus

# After a delivery lands, the same task sends the run's next one at once instead of waiting for
# the next sweep; bounded so that one busy run cannot hold a worker.
FOLLOW_ON = 50


@shared_task(
    name="integrations.send_webhook", acks_late=True, reject_on_worker_lost=True, ignore_result=True
)
def send_webhook(delivery_id: int, token: str) -> str | None:
    held = outbox.Claim(delivery_id, uuid.UUID(token))
    status = webhooks.send(held)
    for _ in range(FOLLOW_ON):
        if status != MessageStatus.DELIVERED:
            break
        following = webhooks.claim_next(held.pk)
        if following is None:
            break
        held, status = following, webhooks.send(following)
    return status


@shared_task(
    name="integrations.send_notification",
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
)
def send_notification(notification_id: int, token: str) -> str | None:
    return notifications.send(outbox.Claim(notification_id, uuid.UUID(token)))
