"""Cost in the console: `{% run_cost run %}` on the run page, `{% runs_costs rows as costs %}`
then `{% cost_cell costs run %}` in the runs list (one query for the whole page)."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from agentops.integrations import cost

register = template.Library()


def _cost_html(usage: cost.Usage) -> SafeString:
    """The cost and the tokens it counts. Built here rather than in an included template: the
    runs list shows one per row, and rendering a template per row was a seventh of its time.
    Its numbers need no escaping (with format_html's, the cells were 7.5 % of the list's time
    under load): only the models' names, which come from the configuration, are escaped."""
    tokens = usage.tokens
    if usage.cost is not None:
        amount = cost.format_cost(usage.cost)  # "$" and digits
    elif usage.unpriced_models:
        amount = format_html(
            '<span class="unknown">unknown</span> <span class="muted small">(no price for {})'
            "</span>",
            format_html_join(", ", "{}", ((model,) for model in usage.unpriced_models)),
        )
    else:
        amount = '<span class="unknown">unknown</span>'
    counts = (
        f"{tokens['input_tokens']:d} input, {tokens['output_tokens']:d} output, "
        f"{tokens['cache_creation_input_tokens']:d} cache write, "
        f"{tokens['cache_read_input_tokens']:d} cache read tokens"
    )
    return mark_safe(
        f'<span class="cost" title="{counts}">{amount} '
        f'<span class="muted small">· {usage.total_tokens:d} tokens</span></span>'
    )


@register.simple_tag
def run_cost(run: Any) -> SafeString:
    return _cost_html(cost.for_run(run.pk))


@register.simple_tag
def runs_costs(runs: Any) -> dict[Any, cost.Usage]:
    return cost.for_runs(run.pk for run in runs)


@register.simple_tag
def cost_cell(costs: dict[Any, cost.Usage], run: Any) -> SafeString:
    return _cost_html(costs.get(run.pk, cost.Usage()))
