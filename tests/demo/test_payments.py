"""The demo payments service enforces idempotency keys and can look a key up."""

from __future__ import annotations

import pytest
from django.utils import timezone

from demo import payments
from demo.models import Customer, Order, Refund


@pytest.fixture
def order(db) -> Order:
    customer = Customer.objects.create(name="Ada", email="ada@example.com")
    return Order.objects.create(
        number="1001", customer=customer, item="Mixer", total_cents=5000, placed_at=timezone.now()
    )


def test_the_same_key_and_request_return_the_same_receipt(order):
    first = payments.refund("1001", 2000, "broken", idempotency_key="run:k")
    again = payments.refund("1001", 2000, "broken", idempotency_key="run:k")
    assert first.receipt_id == again.receipt_id
    assert Refund.objects.count() == 1
    assert payments.refund_for_key("run:k") == first
    assert payments.refund_for_key("run:other") is None


def test_the_same_key_with_another_request_is_refused(order):
    payments.refund("1001", 2000, "broken", idempotency_key="run:k")
    with pytest.raises(payments.PaymentsError, match="already used for a different request"):
        payments.refund("1001", 2500, "broken", idempotency_key="run:k")
    assert Refund.objects.count() == 1


def test_it_never_refunds_more_than_is_left(order):
    payments.refund("1001", 4000, "a", idempotency_key="k1")
    with pytest.raises(payments.PaymentsError, match="1000 cents are refundable"):
        payments.refund("1001", 1500, "b", idempotency_key="k2")
    assert payments.refunded_cents(order) == 4000


def test_tickets_are_deduplicated_too(order):
    first = payments.create_ticket("1001", "s", "b", idempotency_key="k")
    assert payments.create_ticket("1001", "s", "b", idempotency_key="k") == first
    with pytest.raises(payments.PaymentsError):
        payments.create_ticket("1001", "other", "b", idempotency_key="k")
    assert payments.ticket_for_key("k") == first


def test_an_unknown_order_is_a_clear_error(db):
    with pytest.raises(payments.PaymentsError, match="order 9999 does not exist"):
        payments.get_order("9999")
