"""What the integrations keep: webhook subscriptions and deliveries, notification routes,
preferences and notifications, the log consumers' cursors, and what is folded from the log: the
metrics, and the tool calls' text that the console's search reads.

Nothing here is written by the runtime, and nothing here writes the runtime's tables.
"""

from __future__ import annotations

from typing import ClassVar

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models
from django.db.models import Q

from agentops.integrations.kinds import KIND_CHOICES
from runtime.models import Operation


class OutboxCursor(models.Model):
    """How far a consumer of the event log has read: every event with id <= position is done.

    The webhook subscriptions keep their own cursor (each starts where it was created); the
    notifier, the metrics fold and the search text's fold have one row each here.
    """

    name = models.CharField(max_length=50, unique=True)
    position = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name} at event {self.position}"


class MessageStatus(models.TextChoices):
    PENDING = "pending"  # due at next_attempt_at (claimed while claimed_until is ahead)
    DELIVERED = "delivered"
    FAILED = "failed"  # gave up after the last attempt; re-enabling the subscription retries


class OutboundMessage(models.Model):
    """One message for one destination, made from one event, sent at least once.

    A sender claims it (a fresh claim token until claimed_until), sends, and records the outcome
    with a guarded UPDATE on that token: a sender that lost its claim (it was too slow, or its
    worker died and another took over) records nothing.
    """

    event = models.ForeignKey("agentops.Event", on_delete=models.PROTECT, related_name="+")
    # The event's run, copied so the in-order-per-run rule needs no join.
    run_id = models.UUIDField(null=True, blank=True)
    status = models.CharField(
        max_length=20, choices=MessageStatus.choices, default=MessageStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    claim = models.UUIDField(null=True, blank=True)
    claimed_until = models.DateTimeField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    # The first AGENTOPS_RESPONSE_EXCERPT_CHARS characters of the last response, or why it failed.
    last_response = models.TextField(blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        abstract = True


class WebhookSubscription(models.Model):
    """A destination for signed webhooks: which event kinds go to which URL."""

    name = models.CharField(max_length=100)
    url = models.URLField(max_length=500)
    # Event kinds to deliver; empty means every kind.
    event_kinds = models.JSONField(default=list, blank=True)
    # The Standard Webhooks secret, encrypted (agentops/integrations/secrets.py).
    secret_sealed = models.TextField(editable=False)
    secret_hint = models.CharField(max_length=10, editable=False)
    enabled = models.BooleanField(default=True)
    # Set when deliveries kept failing and the subscription was turned off; cleared on re-enable.
    failing_since = models.DateTimeField(null=True, blank=True)
    disabled_reason = models.TextField(blank=True)
    # Every event with id <= cursor has been considered (a delivery made, or not subscribed).
    cursor = models.BigIntegerField(default=0)
    created_at = models.DateTimeField()
    created_by = models.CharField(max_length=150)

    def __str__(self) -> str:
        return self.name

    def wants(self, event_kind: str) -> bool:
        return not self.event_kinds or event_kind in self.event_kinds


class WebhookDelivery(OutboundMessage):
    subscription = models.ForeignKey(
        WebhookSubscription, on_delete=models.CASCADE, related_name="deliveries"
    )

    class Meta:
        verbose_name_plural = "webhook deliveries"
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["subscription", "event"], name="one_delivery_per_event")
        ]
        indexes: ClassVar = [
            # Sender: pending deliveries that are due.
            models.Index(
                fields=["next_attempt_at"],
                name="webhook_delivery_due",
                condition=Q(status="pending"),
            ),
            # Sender: is an earlier event of the same run still undelivered (in order per run)?
            models.Index(
                fields=["subscription", "run_id", "event"],
                name="webhook_delivery_open",
                condition=~Q(status="delivered"),
            ),
        ]

    def __str__(self) -> str:
        return f"event {self.event_id} to {self.subscription_id} ({self.status})"


class Channel(models.TextChoices):
    SLACK = "slack", "Slack (incoming webhook)"
    SLACK_BOT = "slack_bot", "Slack (bot token)"
    EMAIL = "email", "Email"


class NotificationRoute(models.Model):
    """Notification kinds -> the people of a group -> a channel; optionally for one approval
    rule only (its approvals and questions go there instead of to the routes without a rule)."""

    name = models.CharField(max_length=100)
    kinds = models.JSONField(default=list, help_text="Notification kinds this route sends.")
    group = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="+")
    # A route for one rule is meaningless without it: deleting the rule deletes its routes, and
    # what the rule governed falls back to the routes without a rule.
    rule = models.ForeignKey(
        "agentops.ApprovalRule",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="+",
        help_text="Only what this approval rule governs (then not to routes without one).",
    )
    channel = models.CharField(max_length=10, choices=Channel.choices)
    # Slack: the incoming webhook URL, a secret by Slack's own account; encrypted like webhooks'.
    slack_url_sealed = models.TextField(blank=True, editable=False)
    slack_url_hint = models.CharField(max_length=10, blank=True, editable=False)
    # Slack bot: the bot token (xoxb-…), encrypted the same way, and the channel id it posts to.
    slack_token_sealed = models.TextField(blank=True, editable=False)
    slack_token_hint = models.CharField(max_length=10, blank=True, editable=False)
    slack_channel = models.CharField(
        max_length=30, blank=True, help_text="The channel id a bot token posts to (C0123ABCD)."
    )
    enabled = models.BooleanField(default=True)
    # Set when Slack refused the route itself (a revoked token, a removed webhook, a channel the
    # bot is not in or that was archived) and the route was turned off; cleared when it is
    # enabled again.
    failing_since = models.DateTimeField(null=True, blank=True)
    disabled_reason = models.TextField(blank=True)

    def __str__(self) -> str:
        return self.name


class NotificationPreference(models.Model):
    """What one person does not want to be notified about."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_preference"
    )
    muted_kinds = models.JSONField(default=list, blank=True)

    def __str__(self) -> str:
        return f"preferences of {self.user}"


class Notification(OutboundMessage):
    """One notification of one event by one route: a Slack post, or an email to one person."""

    route = models.ForeignKey(
        NotificationRoute, on_delete=models.CASCADE, related_name="notifications"
    )
    kind = models.CharField(max_length=30, choices=KIND_CHOICES)
    # Email: the address it goes to; Slack: empty (one post per route).
    recipient = models.CharField(max_length=254, blank=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["route", "event", "recipient"], name="one_notification_per_recipient"
            )
        ]
        indexes: ClassVar = [
            # Sender: pending notifications that are due.
            models.Index(
                fields=["next_attempt_at"],
                name="notification_due",
                condition=Q(status="pending"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} via {self.route_id} to {self.recipient or 'channel'}"


class MetricSample(models.Model):
    """A counter folded from the event log: (metric, labels) -> value, shared by all processes."""

    metric = models.CharField(max_length=100)
    # The labels as sorted JSON, so one label set is one row.
    labels = models.CharField(max_length=500)
    value = models.FloatField(default=0.0)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["metric", "labels"], name="one_sample_per_labels")
        ]

    def __str__(self) -> str:
        return f"{self.metric}{self.labels} = {self.value}"


class ToolCallText(models.Model):
    """A tool call's arguments and result as one text: what the console's text search reads on
    PostgreSQL, through the trigram index of migration 0003 (agentops.selectors._pg_search).

    Folded from the event log after the call's records commit (search_index.py), not written by
    them: an index entry made in a record's own statement cost a PostgreSQL run about a tenth of
    its time, and made every outcome's UPDATE rewrite all of the operation's index entries.
    The search also reads the calls of the events not folded yet, so it misses nothing.
    """

    operation = models.OneToOneField(
        Operation, on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    text = models.TextField()

    def __str__(self) -> str:
        return f"text of operation {self.operation_id}"


__all__ = [
    "Channel",
    "MessageStatus",
    "MetricSample",
    "Notification",
    "NotificationPreference",
    "NotificationRoute",
    "OutboxCursor",
    "ToolCallText",
    "WebhookDelivery",
    "WebhookSubscription",
]
