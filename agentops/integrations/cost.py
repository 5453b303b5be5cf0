"""Token usage and what it cost, from the operations' recorded usage and the price table.

AGENTOPS_MODEL_PRICES maps a model name to its prices in dollars per million tokens for input,
output, cache writes and cache reads. A model missing from it has an unknown cost: shown as
unknown, never as 0, and a total that includes such a model is unknown too.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models.functions import TruncDate

from runtime.models import Operation, OperationKind, OperationStatus

# usage field -> price key
PRICED_FIELDS = {
    "input_tokens": "input",
    "output_tokens": "output",
    "cache_creation_input_tokens": "cache_write",
    "cache_read_input_tokens": "cache_read",
}
MILLION = Decimal(1_000_000)


@dataclass
class Usage:
    """Tokens by usage field, and their cost in dollars (None when a model has no price)."""

    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PRICED_FIELDS, 0))
    cost: Decimal | None = Decimal(0)
    unpriced_models: set[str] = field(default_factory=set)

    @property
    def total_tokens(self) -> int:
        return sum(self.tokens.values())

    def add(self, model: str, usage: Any) -> None:
        tokens = counted(usage)
        for name, amount in tokens.items():
            self.tokens[name] += amount
        price = price_of(model, tokens)
        if price is None:
            if tokens:
                self.unpriced_models.add(model)
                self.cost = None
        elif self.cost is not None:
            self.cost += price


def counted(usage: Any) -> dict[str, int]:
    """The priced fields of a request's recorded usage that count: whole, positive numbers."""
    if not isinstance(usage, dict):
        return {}
    return {
        name: amount
        for name in PRICED_FIELDS
        if isinstance(amount := usage.get(name), int) and amount > 0
    }


def prices() -> dict[str, dict[str, float]]:
    return settings.AGENTOPS_MODEL_PRICES


# A pinned snapshot (claude-sonnet-4-5-20250929) or a moving alias (claude-3-5-haiku-latest) is
# priced as its model; the first release of a generation is also called `-0` (claude-opus-4-0).
_SNAPSHOT = re.compile(r"-(\d{8}|latest)$")
_FIRST_RELEASE = re.compile(r"-0$")


def rates_of(model: str) -> dict[str, float] | None:
    """The model's row of the price table: by its id, else by the model a snapshot id names."""
    table = prices()
    for name in (model, base := _SNAPSHOT.sub("", model), _FIRST_RELEASE.sub("", base)):
        if name in table:
            return table[name]
    return None


def price_of(model: str, tokens: dict[str, int]) -> Decimal | None:
    """The cost of these tokens of `model`, or None if the model (or a used rate) has no price."""
    table = rates_of(model)
    if table is None:
        return None
    total = Decimal(0)
    for name, amount in tokens.items():
        rate = table.get(PRICED_FIELDS[name])
        if rate is None:
            return None
        total += Decimal(str(rate)) * amount / MILLION
    return total


def _model_usages(operations: Any) -> Iterable[tuple[Any, str, Any]]:
    return operations.filter(
        kind=OperationKind.MODEL, status=OperationStatus.COMPLETED, usage__isnull=False
    ).values_list("run_id", "name", "usage")


def for_runs(run_ids: Iterable[Any]) -> dict[Any, Usage]:
    """Usage and cost of each run (one query).

    A run's requests are summed per model before they are priced: a price is linear in the
    tokens, and a page of runs makes a few hundred requests of one or two models (priced one at
    a time, they were a tenth of the runs list's time)."""
    ids = list(run_ids)
    summed: dict[tuple[Any, str], Counter[str]] = {}
    if ids:
        for run_id, model, usage in _model_usages(Operation.objects.filter(run_id__in=ids)):
            summed.setdefault((run_id, model), Counter()).update(counted(usage))
    usages: dict[Any, Usage] = {}
    for (run_id, model), tokens in summed.items():
        usages.setdefault(run_id, Usage()).add(model, tokens)
    return usages


def for_run(run_id: Any) -> Usage:
    return for_runs([run_id]).get(run_id, Usage())


def by_agent_and_day(since: dt.datetime, until: dt.datetime) -> dict[tuple[str, dt.date], Usage]:
    """Usage and cost per (agent, day of the request's outcome), between `since` and `until`."""
    rows = (
        Operation.objects.filter(
            kind=OperationKind.MODEL,
            status=OperationStatus.COMPLETED,
            usage__isnull=False,
            outcome_at__gte=since,
            outcome_at__lt=until,
        )
        .annotate(day=TruncDate("outcome_at"))
        .values_list("run__agent", "day", "name", "usage")
    )
    usages: dict[tuple[str, dt.date], Usage] = {}
    for agent, day, model, usage in rows:
        usages.setdefault((agent, day), Usage()).add(model, usage)
    return usages


def format_cost(cost: Decimal | None) -> str:
    if cost is None:
        return "unknown"
    return f"${cost:.4f}" if cost < 1 else f"${cost:.2f}"
