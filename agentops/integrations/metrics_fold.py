"""Counters folded from the event log into the database, so every process sees the same values.

Prometheus counters kept in a process's memory would count only what that process did, and the
workers that make model requests are not the web process that is scraped. So the event log is
folded, in order and once, into `MetricSample` rows: a cursor ("metrics") and the counters move
in one transaction. Histograms are stored as a count per bucket and made cumulative when scraped.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F

from agentops.integrations import outbox
from agentops.integrations.models import MetricSample, OutboxCursor
from runtime import store
from runtime.models import Event, EventKind, Interaction, Operation

CURSOR = "metrics"
TOKEN_TYPES = {
    "input_tokens": "input",
    "output_tokens": "output",
    "cache_creation_input_tokens": "cache_write",
    "cache_read_input_tokens": "cache_read",
}
# Seconds: a model request or a tool call takes from milliseconds to minutes.
OPERATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# Seconds: a person decides in minutes to hours.
DECISION_BUCKETS = (10, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600, 72 * 3600)
DECISION_EVENTS = {
    EventKind.APPROVAL_GRANTED,
    EventKind.APPROVAL_REJECTED,
    EventKind.QUESTION_ANSWERED,
}

# (metric name, its labels as one key) -> how much to add.
Increments = dict[tuple[str, str], float]


def labels_key(labels: dict[str, str]) -> str:
    return json.dumps(labels, sort_keys=True, separators=(",", ":"))


def add(increments: Increments) -> None:
    """Add to the (metric, labels key) counters, creating the rows that do not exist yet."""
    for (metric, key), amount in sorted(increments.items()):
        if MetricSample.objects.filter(metric=metric, labels=key).update(value=F("value") + amount):
            continue
        try:
            with transaction.atomic():
                MetricSample.objects.create(metric=metric, labels=key, value=amount)
        except IntegrityError:  # created meanwhile by another process
            MetricSample.objects.filter(metric=metric, labels=key).update(value=F("value") + amount)


def bucket_for(value: float, buckets: tuple[float, ...]) -> str:
    for bound in buckets:
        if value <= bound:
            return str(float(bound))
    return "+Inf"


def observe(
    into: Increments,
    metric: str,
    labels: dict[str, str],
    value: float,
    buckets: tuple[float, ...],
) -> None:
    into[(f"{metric}_bucket", labels_key({**labels, "le": bucket_for(value, buckets)}))] += 1
    into[(f"{metric}_sum", labels_key(labels))] += value
    into[(f"{metric}_count", labels_key(labels))] += 1


def count_delivery(outcome: str) -> None:
    """One webhook delivery attempt and how it ended (delivered, failed, refused)."""
    with transaction.atomic():
        add({("agentops_webhook_deliveries_total", labels_key({"outcome": outcome})): 1.0})


def count_refused_write(sender: Any, *, agent: str, **_: Any) -> None:
    """runtime.signals.write_refused: a worker's write refused by the fence. Not in the run's
    log (a taken-over worker commits nothing to the run), so counted here, at once: one
    UPDATE ... SET value = value + 1 in its own transaction, right across processes."""
    with transaction.atomic():
        add({("agentops_fenced_writes_refused_total", labels_key({"agent": agent})): 1.0})


def fold(limit: int) -> int:
    """Fold the next settled events into the counters; how many events were read."""
    with transaction.atomic():
        # From the oldest event: the counters count the whole history.
        cursor = outbox.locked_cursor(CURSOR, start_at_newest=False)
        ids, position = store.settled_events(cursor.position, limit=limit)
        if not ids:
            return 0
        events = list(
            Event.objects.filter(pk__in=ids)
            .exclude(run=None)
            .values("kind", "run_id", "run__agent", "operation_key", "data")
        )
        add(_increments(events))
        OutboxCursor.objects.filter(pk=cursor.pk).update(position=position)
    return len(ids)


def _increments(events: Sequence[Mapping[str, Any]]) -> Increments:
    counts: Increments = defaultdict(float)
    outcomes = [e for e in events if e["kind"] == EventKind.OUTCOME]
    operations = _operations(outcomes)
    decisions = _decision_times(e for e in events if e["kind"] in DECISION_EVENTS)
    for event in events:
        agent = event["run__agent"]
        if event["kind"] == EventKind.LEASE_EXPIRED:
            counts[("agentops_lease_takeovers_total", labels_key({"agent": agent}))] += 1
        elif event["kind"] in DECISION_EVENTS:
            seconds = decisions.get(str(event["data"].get("interaction")))
            if seconds is not None:
                labels = {"kind": event["kind"], "rule": str(event["data"].get("rule", ""))}
                observe(counts, "agentops_decision_seconds", labels, seconds, DECISION_BUCKETS)
        elif event["kind"] == EventKind.OUTCOME:
            _fold_outcome(counts, event, operations.get((event["run_id"], event["operation_key"])))
    return counts


def _fold_outcome(
    counts: Increments, event: Mapping[str, Any], op: Mapping[str, Any] | None
) -> None:
    data = event["data"]
    kind = str(data.get("call", ""))
    outcome = str(data.get("status", ""))
    if data.get("is_error") and outcome == "completed":
        outcome = "error"  # a tool's handler raised: an outcome the model saw
    labels = {"agent": event["run__agent"], "kind": kind, "outcome": outcome}
    counts[("agentops_operations_total", labels_key(labels))] += 1
    if op is None:
        return
    if op["outcome_at"] is not None and op["intent_at"] is not None:
        seconds = max(0.0, (op["outcome_at"] - op["intent_at"]).total_seconds())
        observe(
            counts,
            "agentops_operation_duration_seconds",
            {"kind": kind},
            seconds,
            OPERATION_BUCKETS,
        )
    usage = op["usage"] or {}
    if kind == "model" and outcome == "completed" and isinstance(usage, dict):
        for field, token_type in TOKEN_TYPES.items():
            amount = usage.get(field) or 0
            if isinstance(amount, int) and amount > 0:
                token_labels = {
                    "agent": event["run__agent"],
                    "model": op["name"],
                    "type": token_type,
                }
                counts[("agentops_model_tokens_total", labels_key(token_labels))] += amount


def _operations(outcomes: Sequence[Mapping[str, Any]]) -> dict[tuple[Any, str], Mapping[str, Any]]:
    if not outcomes:
        return {}
    runs = {e["run_id"] for e in outcomes}
    keys = {e["operation_key"] for e in outcomes}
    rows = Operation.objects.filter(run_id__in=runs, key__in=keys).values(
        "run_id", "key", "name", "intent_at", "outcome_at", "usage"
    )
    return {(row["run_id"], row["key"]): row for row in rows}


def _decision_times(events: Any) -> dict[str, float]:
    ids = [str(e["data"].get("interaction")) for e in events if e["data"].get("interaction")]
    if not ids:
        return {}
    rows = Interaction.objects.filter(pk__in=ids, responded_at__isnull=False).values_list(
        "pk", "created_at", "responded_at"
    )
    # responded_at is set on every row here (the filter above).
    return {
        str(pk): (answered - asked).total_seconds()
        for pk, asked, answered in rows
        if answered is not None
    }
