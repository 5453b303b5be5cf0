"""The published price table in the settings: a recorded usage costs what Anthropic's prices
say, worked out by hand here, cache tokens included."""

from __future__ import annotations

from decimal import Decimal

import pytest

from agentops import settings as project_settings
from agentops.integrations import cost
from runtime import submit
from runtime.llm import Usage
from runtime.models import Operation
from runtime.testing import run_until_idle
from tests.conftest import make_agent, say

PUBLISHED = project_settings.AGENTOPS_MODEL_PRICES
USAGE = Usage(
    input_tokens=12_000,
    output_tokens=3_000,
    cache_creation_input_tokens=40_000,
    cache_read_input_tokens=200_000,
)


@pytest.fixture
def recorded(define, settings):
    """recorded(model) -> a completed run whose model request used USAGE on `model`."""
    settings.AGENTOPS_MODEL_PRICES = PUBLISHED
    define(make_agent([say("done")], name="desk"))

    def record(model: str) -> object:
        run = run_until_idle(submit("desk", "hi", actor="alice").pk)
        # What the Anthropic adapter records for a request to `model` (runtime.llm.anthropic).
        Operation.objects.filter(run=run, kind="model").update(name=model, usage=USAGE.model_dump())
        return run.pk

    return record


@pytest.mark.parametrize(
    ("model", "dollars"),
    [
        # Sonnet 4.5: $3 input, $3.75 5m cache write, $0.30 cache hit, $15 output per million.
        # 12,000 x 3 + 40,000 x 3.75 + 200,000 x 0.30 + 3,000 x 15 = 36,000 + 150,000 + 60,000
        # + 45,000 = 291,000 (per million) = $0.291
        ("claude-sonnet-4-5", "0.291"),
        # Opus 4.1: $15, $18.75, $1.50, $75. 180,000 + 750,000 + 300,000 + 225,000 = $1.455
        ("claude-opus-4-1", "1.455"),
        # Haiku 4.5 under a pinned snapshot id: $1, $1.25, $0.10, $5.
        # 12,000 + 50,000 + 20,000 + 15,000 = $0.097
        ("claude-haiku-4-5-20251001", "0.097"),
    ],
)
def test_a_recorded_usage_costs_what_the_published_prices_say(recorded, model, dollars):
    assert cost.for_run(recorded(model)).cost == Decimal(dollars)


def test_a_model_not_in_the_table_has_an_unknown_cost(recorded):
    usage = cost.for_run(recorded("claude-haiku-5-5"))
    assert usage.cost is None
    assert usage.unpriced_models == {"claude-haiku-5-5"}
    assert cost.format_cost(usage.cost) == "unknown"


def test_every_row_has_every_rate_and_they_keep_anthropics_ratios():
    """A typo guard: Anthropic prices a 5m cache write at 1.25x input and a 1h write at 2x
    (published to the cent: Haiku 3's $0.3125 is $0.30)."""
    for model, rates in PUBLISHED.items():
        assert set(rates) == {"input", "output", "cache_write", "cache_write_1h", "cache_read"}
        assert rates["cache_write"] == pytest.approx(rates["input"] * 1.25, abs=0.02), model
        assert rates["cache_write_1h"] == pytest.approx(rates["input"] * 2, abs=0.02), model
        assert rates["cache_read"] < rates["input"] < rates["output"], model
