"""The event log as an outbox: read committed events in id order, claim and finish messages.

Reading (runtime.store.settled_events). Event ids are drawn as rows are inserted, while
commits happen later and in any order: on PostgreSQL an event with a lower id can become
visible after one with a higher id, and a rolled-back insert leaves a hole for good. So a cursor
moves only over ids without a hole before them; at a hole it waits until the event after the
hole is older than AGENTOPS_OUTBOX_GAP_SECONDS, after which the hole is taken as a rolled-back
insert (runtime.store.holes_settled_before).

Sending. A message (webhook delivery, notification) is claimed with a fresh token for
AGENTOPS_OUTBOX_CLAIM_SECONDS, sent, and finished with a guarded UPDATE on that token. A
sender that died or stalled loses its claim when it runs out, and the next sweep sends the
message again: at least once, never by two senders at the same time.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import Q

from agentops.integrations.models import MessageStatus, OutboundMessage, OutboxCursor
from runtime import clock
from runtime.models import Event


def locked_cursor(name: str, *, start_at_newest: bool) -> OutboxCursor:
    """The named cursor, locked until the end of the transaction; made on first use, either
    after the newest event (only what happens from now on) or before the oldest (everything)."""
    if not OutboxCursor.objects.filter(name=name).exists():
        ids = Event.objects.order_by("-pk" if start_at_newest else "pk").values_list(
            "pk", flat=True
        )
        first = ids.first()
        position = 0 if first is None else (first if start_at_newest else first - 1)
        OutboxCursor.objects.get_or_create(name=name, defaults={"position": position})
    return OutboxCursor.objects.select_for_update().get(name=name)


def events_by_id(ids: list[int], kinds: set[str] | None = None) -> list[Event]:
    """The events with these ids (of these kinds), in id order, with their run."""
    found = Event.objects.filter(pk__in=ids).select_related("run").order_by("pk")
    if kinds is not None:
        found = found.filter(kind__in=sorted(kinds))
    return list(found)


@dataclass(frozen=True)
class Claim:
    pk: int
    token: uuid.UUID


def claim(model: type[OutboundMessage], candidates: Any, *, limit: int) -> list[Claim]:
    """Claim up to `limit` of `candidates` (a queryset of `model`) that are due now."""
    now = clock.now()
    until = now + dt.timedelta(seconds=settings.AGENTOPS_OUTBOX_CLAIM_SECONDS)
    free = Q(claimed_until__isnull=True) | Q(claimed_until__lt=now)
    due = candidates.filter(free, status=MessageStatus.PENDING, next_attempt_at__lte=now)
    claimed = []
    for pk in due.order_by("next_attempt_at", "pk").values_list("pk", flat=True)[:limit]:
        token = uuid.uuid4()
        # Guarded: another sender may have claimed it since the read.
        held = (
            model._default_manager.filter(pk=pk, status=MessageStatus.PENDING)
            .filter(free)
            .update(claim=token, claimed_until=until)
        )
        if held == 1:
            claimed.append(Claim(pk, token))
    return claimed


def backoff_seconds(attempts: int, retry_after: float | None = None) -> float:
    """Exponential backoff after `attempts` failed attempts, capped; honours a Retry-After."""
    base = settings.AGENTOPS_OUTBOX_BACKOFF_SECONDS
    delay = min(settings.AGENTOPS_OUTBOX_BACKOFF_MAX_SECONDS, base * 2 ** (attempts - 1))
    if retry_after is not None:
        delay = min(settings.AGENTOPS_OUTBOX_BACKOFF_MAX_SECONDS, max(delay, retry_after))
    return delay


def finish(
    model: type[OutboundMessage],
    held: Claim,
    *,
    delivered: bool,
    give_up: bool,
    status_code: int | None,
    response: str,
    retry_after: float | None = None,
) -> str | None:
    """Record one attempt's outcome; the message's new status, or None if the claim was lost."""
    now = clock.now()
    current = model._default_manager.filter(pk=held.pk, claim=held.token).values_list(
        "attempts", flat=True
    )
    attempts = next(iter(current), None)
    if attempts is None:
        return None
    attempts += 1
    fields: dict[str, Any] = {
        "attempts": attempts,
        "last_attempt_at": now,
        "last_status_code": status_code,
        "last_response": response[: settings.AGENTOPS_RESPONSE_EXCERPT_CHARS],
        "claim": None,
        "claimed_until": None,
    }
    if delivered:
        fields.update(status=MessageStatus.DELIVERED, finished_at=now)
    elif give_up or attempts >= settings.AGENTOPS_OUTBOX_MAX_ATTEMPTS:
        fields.update(status=MessageStatus.FAILED, finished_at=now)
    else:
        delay = backoff_seconds(attempts, retry_after)
        fields.update(next_attempt_at=now + dt.timedelta(seconds=delay))
    landed = model._default_manager.filter(pk=held.pk, claim=held.token).update(**fields)
    return str(fields.get("status", MessageStatus.PENDING)) if landed == 1 else None


def still_claimed(model: type[OutboundMessage], held: Claim) -> Any:
    """The claimed message, or None when the claim ran out and someone else may send it."""
    return (
        model._default_manager.filter(pk=held.pk, claim=held.token, claimed_until__gt=clock.now())
        .select_related("event", "event__run")
        .first()
    )
