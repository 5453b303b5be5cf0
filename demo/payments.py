"""The orders and payments service the refund desk talks to, with idempotency keys."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone

from demo.models import Order, Refund, Ticket

R = TypeVar("R", Refund, Ticket)


class PaymentsError(Exception):
    """The service refused the request; the message says why."""


def _request_hash(**request: Any) -> str:
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()


def get_order(number: str) -> Order:
    try:
        return Order.objects.select_related("customer").get(number=number)
    except Order.DoesNotExist:
        raise PaymentsError(f"order {number} does not exist") from None


def refunded_cents(order: Order) -> int:
    return order.refunds.aggregate(total=Sum("amount_cents"))["total"] or 0


def refund(number: str, amount_cents: int, reason: str, *, idempotency_key: str) -> Refund:
    """Refund `amount_cents` of an order once per idempotency key."""

    def make() -> Refund:
        order = get_order(number)
        left = order.total_cents - refunded_cents(order)
        if amount_cents <= 0 or amount_cents > left:
            raise PaymentsError(
                f"cannot refund {amount_cents} cents of order {number}: {left} cents are refundable"
            )
        return Refund.objects.create(
            receipt_id=f"re_{hashlib.sha256(idempotency_key.encode()).hexdigest()[:12]}",
            order=order,
            amount_cents=amount_cents,
            reason=reason,
            idempotency_key=idempotency_key,
            request_hash=request,
            created_at=timezone.now(),
        )

    request = _request_hash(order=number, amount_cents=amount_cents, reason=reason)
    return _once(Refund, idempotency_key, request, make)


def create_ticket(number: str | None, subject: str, body: str, *, idempotency_key: str) -> Ticket:
    """Open a support ticket once per idempotency key."""

    def make() -> Ticket:
        return Ticket.objects.create(
            ticket_id=f"T-{hashlib.sha256(idempotency_key.encode()).hexdigest()[:8].upper()}",
            order=get_order(number) if number else None,
            subject=subject,
            body=body,
            idempotency_key=idempotency_key,
            request_hash=request,
            created_at=timezone.now(),
        )

    request = _request_hash(order=number, subject=subject, body=body)
    return _once(Ticket, idempotency_key, request, make)


def _once(model: type[R], key: str, request: str, make: Callable[[], R]) -> R:
    """The record of `key`: made now, or the earlier one for the same request.

    The same key with a different request is refused.
    """
    record = model._default_manager.filter(idempotency_key=key).first()
    if record is None:
        try:
            with transaction.atomic():
                return make()
        except IntegrityError:  # the same key arrived twice at once
            record = model._default_manager.get(idempotency_key=key)
    if record.request_hash != request:
        raise PaymentsError(f"idempotency key {key} was already used for a different request")
    return record


def refund_for_key(idempotency_key: str) -> Refund | None:
    """What happened to a refund request: the lookup the reconcile page shows."""
    return Refund.objects.filter(idempotency_key=idempotency_key).first()


def ticket_for_key(idempotency_key: str) -> Ticket | None:
    return Ticket.objects.filter(idempotency_key=idempotency_key).first()
