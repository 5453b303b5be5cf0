"""Cost in the console: `{% run_cost run %}` on the run page, `{% runs_costs rows as costs %}`
then `{% cost_cell costs run %}` in the runs list (one query for the whole page)."""

from __future__ import annotations

from typing import Any

from django import template

from agentops.integrations import cost

register = template.Library()


@register.inclusion_tag("integrations/cost.html")
def run_cost(run: Any) -> dict[str, Any]:
    return {"usage": cost.for_run(run.pk)}


@register.simple_tag
def runs_costs(runs: Any) -> dict[Any, cost.Usage]:
    return cost.for_runs(run.pk for run in runs)


@register.inclusion_tag("integrations/cost.html")
def cost_cell(costs: dict[Any, cost.Usage], run: Any) -> dict[str, Any]:
    return {"usage": costs.get(run.pk, cost.Usage())}


@register.filter
def dollars(value: Any) -> str:
    return cost.format_cost(value)
