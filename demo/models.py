"""The payments service's own tables: customers, orders, refunds and tickets.

Refunds and tickets carry the caller's idempotency key: the same key with the same request
returns the same receipt; the same key with a different request is refused.
"""

from __future__ import annotations

from typing import ClassVar

from django.db import models


class Customer(models.Model):
    name = models.CharField(max_length=100)
    email = models.EmailField()

    def __str__(self) -> str:
        return self.name


class Order(models.Model):
    number = models.CharField(max_length=20, unique=True)
    customer = models.ForeignKey(Customer, on_delete=models.PROTECT, related_name="orders")
    item = models.CharField(max_length=200)
    total_cents = models.PositiveIntegerField()
    status = models.CharField(max_length=20, default="delivered")
    placed_at = models.DateTimeField()

    def __str__(self) -> str:
        return self.number


class Refund(models.Model):
    receipt_id = models.CharField(max_length=40, unique=True)
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="refunds")
    amount_cents = models.PositiveIntegerField()
    reason = models.CharField(max_length=500)
    idempotency_key = models.CharField(max_length=300, unique=True)
    # A digest of the request, so a reused key with another request is refused.
    request_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField()

    class Meta:
        ordering: ClassVar = ["created_at"]

    def __str__(self) -> str:
        return self.receipt_id


class Ticket(models.Model):
    ticket_id = models.CharField(max_length=40, unique=True)
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="tickets", null=True)
    subject = models.CharField(max_length=200)
    body = models.TextField()
    idempotency_key = models.CharField(max_length=300, unique=True)
    request_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField()

    def __str__(self) -> str:
        return self.ticket_id
