"""/metrics: Prometheus text computed from the database at scrape time.

Why from the database: web processes and workers are many, on many machines, and the worker
that made a model request is not the process that gets scraped. Anything counted in a process's
memory would be a partial, per-process count that resets on restart. The database is the one
place that sees everything, so each scrape (1) folds the event log's newest events into the
shared counters (metrics_fold), and (2) reads the current state with indexed queries:

- runs by status and agent: one GROUP BY served by the (agent, version, status) index;
- queue sizes and the age of their oldest item: pending interactions through their partial
  index, runs waiting by status through the (status, created_at) index;
- counters and histograms: the MetricSample rows, a few hundred at most.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from collections.abc import Iterator
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, Min
from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from agentops.integrations import cost, metrics_fold
from agentops.integrations.models import MessageStatus, MetricSample, WebhookDelivery
from runtime import clock
from runtime.models import Interaction, InteractionKind, InteractionStatus, Run, RunStatus

COUNTERS = {
    "agentops_operations_total": (
        "Model requests and tool calls by agent, kind and outcome",
        ["agent", "kind", "outcome"],
    ),
    "agentops_model_tokens_total": (
        "Model tokens by agent, model and type (input, output, cache_write, cache_read)",
        ["agent", "model", "type"],
    ),
    "agentops_lease_takeovers_total": (
        "Claims that took a run over from a worker whose lease expired",
        ["agent"],
    ),
    "agentops_fenced_writes_refused_total": (
        "Writes of a taken-over or cancelled worker that the fence refused",
        ["agent"],
    ),
    "agentops_webhook_deliveries_total": (
        "Webhook delivery attempts by outcome (delivered, failed, refused)",
        ["outcome"],
    ),
}
HISTOGRAMS = {
    "agentops_operation_duration_seconds": (
        "Time from a call's intent to its outcome, by kind (model, tool)",
        ["kind"],
    ),
    "agentops_decision_seconds": (
        "Time from an approval or question to a person's answer, by how it was answered and "
        "the approval rule it was under",
        ["kind", "rule"],
    ),
}
# queue -> (what it counts, the rows)
RUN_QUEUES = {
    "queued": RunStatus.QUEUED,
    "needs_attention": RunStatus.NEEDS_ATTENTION,
    "retry_wait": RunStatus.RETRY_WAIT,
    "paused": RunStatus.PAUSED,
}
INTERACTION_QUEUES = {
    "approvals": InteractionKind.TOOL_APPROVAL,
    "questions": InteractionKind.QUESTION,
}


class DatabaseCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        metrics_fold.fold(settings.AGENTOPS_METRICS_FOLD_BATCH)
        yield self._runs()
        yield from self._queues()
        samples = _samples()
        yield from self._counters(samples)
        yield from self._histograms(samples)
        yield from self._cost(samples.get("agentops_model_tokens_total", []))
        yield self._deliveries()

    def _runs(self) -> Metric:
        family = GaugeMetricFamily(
            "agentops_runs", "Runs by status and agent", labels=["status", "agent"]
        )
        rows = Run.objects.order_by().values("agent", "status").annotate(n=Count("pk"))
        for row in rows:
            family.add_metric([row["status"], row["agent"]], row["n"])
        return family

    def _queues(self) -> Iterator[Metric]:
        size = GaugeMetricFamily(
            "agentops_queue_items", "Items waiting in each queue", labels=["queue"]
        )
        age = GaugeMetricFamily(
            "agentops_queue_oldest_age_seconds",
            "Age of the oldest item in each queue (0 when empty)",
            labels=["queue"],
        )
        now = clock.now()
        for queue, kind in INTERACTION_QUEUES.items():
            stats = Interaction.objects.filter(
                status=InteractionStatus.PENDING, kind=kind
            ).aggregate(n=Count("pk"), oldest=Min("created_at"))
            size.add_metric([queue], stats["n"])
            age.add_metric([queue], _age(now, stats["oldest"]))
        for queue, status in RUN_QUEUES.items():
            # updated_at: when the run entered the status (nothing else writes a waiting run).
            stats = Run.objects.filter(status=status).aggregate(
                n=Count("pk"), oldest=Min("updated_at")
            )
            size.add_metric([queue], stats["n"])
            age.add_metric([queue], _age(now, stats["oldest"]))
        yield size
        yield age

    def _counters(self, samples: dict[str, list[tuple[dict[str, str], float]]]) -> Iterator[Metric]:
        for name, (documentation, labels) in COUNTERS.items():
            family = CounterMetricFamily(name, documentation, labels=labels)
            for sample_labels, value in samples.get(name, []):
                family.add_metric([sample_labels.get(label, "") for label in labels], value)
            yield family

    def _histograms(
        self, samples: dict[str, list[tuple[dict[str, str], float]]]
    ) -> Iterator[Metric]:
        for name, (documentation, labels) in HISTOGRAMS.items():
            family = HistogramMetricFamily(name, documentation, labels=labels)
            buckets: dict[tuple[str, ...], dict[str, float]] = defaultdict(dict)
            sums: dict[tuple[str, ...], float] = {}
            for sample_labels, value in samples.get(f"{name}_bucket", []):
                key = tuple(sample_labels.get(label, "") for label in labels)
                buckets[key][sample_labels["le"]] = value
            for sample_labels, value in samples.get(f"{name}_sum", []):
                sums[tuple(sample_labels.get(label, "") for label in labels)] = value
            bounds = (
                metrics_fold.OPERATION_BUCKETS
                if name == "agentops_operation_duration_seconds"
                else metrics_fold.DECISION_BUCKETS
            )
            for key, counts in buckets.items():
                cumulative, running = [], 0.0
                for bound in [*(str(float(b)) for b in bounds), "+Inf"]:
                    running += counts.get(bound, 0.0)
                    cumulative.append((bound, running))
                family.add_metric(list(key), cumulative, sum_value=sums.get(key, 0.0))
            yield family

    def _cost(self, tokens: list[tuple[dict[str, str], float]]) -> Iterator[Metric]:
        spent = CounterMetricFamily(
            "agentops_model_cost_dollars",
            "What the model tokens cost, by agent and model, from AGENTOPS_MODEL_PRICES",
            labels=["agent", "model"],
        )
        unknown = GaugeMetricFamily(
            "agentops_model_price_unknown",
            "1 for a model that was used but has no price in AGENTOPS_MODEL_PRICES",
            labels=["model"],
        )
        by_agent_model: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
        for labels, value in tokens:
            field = _USAGE_FIELD[labels["type"]]
            by_agent_model[(labels["agent"], labels["model"])][field] = int(value)
        unpriced = set()
        for (agent, model), counted in sorted(by_agent_model.items()):
            price = cost.price_of(model, counted)
            if price is None:
                unpriced.add(model)
            else:
                spent.add_metric([agent, model], float(price.quantize(Decimal("0.000001"))))
        for model in sorted(unpriced):
            unknown.add_metric([model], 1)
        yield spent
        yield unknown

    def _deliveries(self) -> Metric:
        family = GaugeMetricFamily(
            "agentops_webhook_deliveries", "Webhook deliveries by status", labels=["status"]
        )
        counted = dict(
            WebhookDelivery.objects.order_by().values_list("status").annotate(n=Count("pk"))
        )
        for status in MessageStatus.values:
            family.add_metric([status], counted.get(status, 0))
        return family


_USAGE_FIELD = {token_type: field for field, token_type in metrics_fold.TOKEN_TYPES.items()}


def _age(now: dt.datetime, oldest: dt.datetime | None) -> float:
    return max(0.0, (now - oldest).total_seconds()) if oldest else 0.0


def _samples() -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for metric, labels, value in MetricSample.objects.values_list("metric", "labels", "value"):
        found[metric].append((json.loads(labels), value))
    return found


def exposition() -> bytes:
    """The whole /metrics body: a fresh registry per scrape, nothing kept between scrapes."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector())
    return generate_latest(registry)
