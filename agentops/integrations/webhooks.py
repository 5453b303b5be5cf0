"""Standard Webhooks from the event log: one delivery per (subscription, event), in order per run.

Each subscription has its own cursor into the event log; `dispatch` turns the settled events after
it into deliveries and moves it, in one transaction holding the subscription's row. A delivery
is sent only when every earlier delivery of the same run to the same subscription was delivered,
so a receiver sees a run's events in order even across retries. The event id is the webhook-id:
a receiver that saw it already can drop the duplicate that at-least-once sometimes brings.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef
from standardwebhooks import Webhook

from agentops.integrations import outbound, outbox, secrets
from agentops.integrations.metrics_fold import count_delivery
from agentops.integrations.models import MessageStatus, WebhookDelivery, WebhookSubscription
from runtime import clock, store
from runtime.models import Event

log = logging.getLogger(__name__)


def create_subscription(
    *, name: str, url: str, event_kinds: list[str], actor: str
) -> tuple[WebhookSubscription, str]:
    """A new subscription starting after the newest event, and its secret (shown once)."""
    secret = secrets.new_webhook_secret()
    newest = Event.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    subscription = WebhookSubscription.objects.create(
        name=name,
        url=url,
        event_kinds=event_kinds,
        secret_sealed=secrets.seal(secret),
        secret_hint=secrets.hint(secret),
        cursor=newest,
        created_at=clock.now(),
        created_by=actor,
    )
    return subscription, secret


def rotate_secret(subscription: WebhookSubscription) -> str:
    secret = secrets.new_webhook_secret()
    WebhookSubscription.objects.filter(pk=subscription.pk).update(
        secret_sealed=secrets.seal(secret), secret_hint=secrets.hint(secret)
    )
    return secret


def enable(subscription: WebhookSubscription) -> int:
    """Turn a subscription back on; its given-up deliveries are due again. Returns their count."""
    with transaction.atomic():
        WebhookSubscription.objects.filter(pk=subscription.pk).update(
            enabled=True, failing_since=None, disabled_reason=""
        )
        return WebhookDelivery.objects.filter(
            subscription=subscription, status=MessageStatus.FAILED
        ).update(
            status=MessageStatus.PENDING,
            next_attempt_at=clock.now(),
            finished_at=None,
            attempts=0,
        )


def dispatch(limit: int) -> int:
    """Make deliveries for the settled events after each enabled subscription's cursor."""
    made = 0
    for pk in WebhookSubscription.objects.filter(enabled=True).values_list("pk", flat=True):
        with transaction.atomic():
            subscription = (
                WebhookSubscription.objects.select_for_update().filter(pk=pk, enabled=True).first()
            )
            if subscription is None:
                continue
            ids, position = store.settled_events(subscription.cursor, limit=limit)
            if not ids:
                continue
            now = clock.now()
            wanted = [
                WebhookDelivery(
                    subscription=subscription,
                    event_id=event_id,
                    run_id=run_id,
                    next_attempt_at=now,
                    created_at=now,
                )
                for event_id, kind, run_id in Event.objects.filter(pk__in=ids)
                .order_by("pk")
                .values_list("pk", "kind", "run_id")
                if subscription.wants(kind)
            ]
            WebhookDelivery.objects.bulk_create(wanted, ignore_conflicts=True)
            WebhookSubscription.objects.filter(pk=pk).update(cursor=position)
            made += len(wanted)
    return made


def _heads() -> Any:
    """Deliveries of enabled subscriptions with no undelivered earlier event of their run."""
    earlier_open = WebhookDelivery.objects.filter(
        subscription=OuterRef("subscription"),
        run_id=OuterRef("run_id"),
        event_id__lt=OuterRef("event_id"),
    ).exclude(status=MessageStatus.DELIVERED)
    return WebhookDelivery.objects.filter(subscription__enabled=True).exclude(Exists(earlier_open))


def claim_due(limit: int) -> list[outbox.Claim]:
    """Claim the due deliveries that head their run's queue."""
    return outbox.claim(WebhookDelivery, _heads(), limit=limit)


def claim_next(delivered_id: int) -> outbox.Claim | None:
    """Claim the delivery that follows `delivered_id` in its run's queue, if it is due."""
    done = WebhookDelivery.objects.filter(pk=delivered_id).values("subscription_id", "run_id")
    first = next(iter(done), None)
    if first is None or first["run_id"] is None:
        return None
    following = _heads().filter(subscription_id=first["subscription_id"], run_id=first["run_id"])
    claimed = outbox.claim(WebhookDelivery, following, limit=1)
    return claimed[0] if claimed else None


def payload(event: Event) -> dict[str, Any]:
    """The body of an event's webhook: the same bytes on every attempt."""
    run = event.run
    return {
        "type": f"run.{event.kind}",
        "timestamp": event.created_at.isoformat(),
        "data": {
            "event_id": event.pk,
            "kind": event.kind,
            "actor": event.actor,
            "run_id": None if run is None else str(run.pk),
            "agent": None if run is None else run.agent,
            "version": None if run is None else run.version,
            "operation_key": event.operation_key,
            "data": event.data,
        },
    }


def signed_headers(secret: str, message_id: str, body: str) -> dict[str, str]:
    now = dt.datetime.now(dt.UTC)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(secret).sign(message_id, now, body),
    }


def send(held: outbox.Claim) -> str | None:
    """Send one claimed delivery and record the attempt; its new status (None: claim lost)."""
    delivery = outbox.still_claimed(WebhookDelivery, held)
    if delivery is None:
        return None
    subscription = WebhookSubscription.objects.get(pk=delivery.subscription_id)
    body = json.dumps(payload(delivery.event), separators=(",", ":"), sort_keys=True)
    refused = ""
    status_code = None
    reply = None
    try:
        secret = secrets.unseal(subscription.secret_sealed)
        reply = outbound.post(
            subscription.url, body.encode(), signed_headers(secret, str(delivery.event_id), body)
        )
        status_code = reply.status
        text = reply.body
    except (outbound.DestinationRefused, secrets.SecretUnreadable) as exc:
        refused = str(exc)
        text = f"refused: {exc}"
    except Exception as exc:  # the receiver is down, slow or speaks no HTTP: retried
        text = f"{type(exc).__name__}: {exc}"
    delivered = status_code is not None and 200 <= status_code < 300
    status = outbox.finish(
        WebhookDelivery,
        held,
        delivered=delivered,
        give_up=bool(refused),
        status_code=status_code,
        response=text,
        retry_after=reply.retry_after if reply else None,
    )
    if status is None:
        log.info("webhook delivery %s: claim lost, outcome not recorded", held.pk)
        return None
    count_delivery(
        "delivered" if delivered else "refused" if refused else "failed",
    )
    if status == MessageStatus.FAILED:
        _disable(subscription, refused or f"event {delivery.event_id} failed: {text}")
    return status


def _disable(subscription: WebhookSubscription, why: str) -> None:
    WebhookSubscription.objects.filter(pk=subscription.pk, enabled=True).update(
        enabled=False, failing_since=clock.now(), disabled_reason=why[:2000]
    )
    log.warning("webhook subscription %s disabled: %s", subscription.pk, why)
