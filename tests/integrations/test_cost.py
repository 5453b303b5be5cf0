"""Cost: the price table's arithmetic, unknown prices, and where the console shows it."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.contrib.auth.models import Permission, User

from agentops.integrations import cost
from runtime import clock, submit
from runtime.llm import Usage
from runtime.models import Operation
from runtime.testing import run_until_idle
from tests.conftest import make_agent, say

PRICES = {
    "claude-sonnet-4-5": {"input": 3.0, "output": 15.0, "cache_write": 3.75, "cache_read": 0.3},
    "no-cache-model": {"input": 1.0, "output": 2.0},
}


@pytest.fixture(autouse=True)
def _prices(settings):
    settings.AGENTOPS_MODEL_PRICES = PRICES


def test_cost_is_tokens_times_price_per_million():
    usage = cost.Usage()
    usage.add(
        "claude-sonnet-4-5",
        {
            "input_tokens": 1_000_000,
            "output_tokens": 200_000,
            "cache_creation_input_tokens": 400_000,
            "cache_read_input_tokens": 2_000_000,
        },
    )
    # 3.00 + 3.00 + 1.50 + 0.60
    assert usage.cost == Decimal("8.1")
    assert usage.total_tokens == 3_600_000


def test_an_unknown_model_makes_the_cost_unknown_not_zero():
    usage = cost.Usage()
    usage.add("claude-sonnet-4-5", {"input_tokens": 10})
    usage.add("mystery-model", {"input_tokens": 10, "output_tokens": 5})
    assert usage.cost is None
    assert usage.unpriced_models == {"mystery-model"}
    assert usage.tokens["input_tokens"] == 20
    assert cost.format_cost(usage.cost) == "unknown"


def test_a_rate_missing_from_a_known_model_is_unknown_too():
    assert cost.price_of("no-cache-model", {"cache_read_input_tokens": 10}) is None
    assert cost.price_of("no-cache-model", {"input_tokens": 500_000}) == Decimal("0.5")


def test_an_unknown_model_without_tokens_costs_nothing():
    usage = cost.Usage()
    usage.add("mystery-model", {"input_tokens": 0})
    usage.add("mystery-model", None)
    assert usage.cost == Decimal(0)


@pytest.fixture
def priced_run(define):
    define(make_agent([say("done")], name="desk"), make_agent([say("done")], name="mystery"))
    return _priced_run


def _priced_run(name="desk", model="claude-sonnet-4-5"):
    run = run_until_idle(submit(name, "hi", actor="alice").pk)
    Operation.objects.filter(run=run, kind="model").update(
        name=model, usage=Usage(input_tokens=1_000_000, output_tokens=100_000).model_dump()
    )
    return run


def test_per_run_per_agent_and_per_day(priced_run):
    first = priced_run("desk")
    second = priced_run("desk")
    other = priced_run("mystery", model="mystery-model")
    runs = cost.for_runs([first.pk, second.pk, other.pk])
    assert runs[first.pk].cost == Decimal("4.5")
    assert runs[other.pk].cost is None
    today = clock.now()
    daily = cost.by_agent_and_day(today - dt.timedelta(days=1), today + dt.timedelta(days=1))
    assert daily[("desk", today.date())].cost == Decimal("9.0")
    assert daily[("mystery", today.date())].cost is None


@pytest.fixture
def operator(db, client):
    user = User.objects.create_user("olga", "olga@example.test", "pw")
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="agentops"))
    client.force_login(user)
    return client


def test_the_run_page_and_the_runs_list_show_the_cost(priced_run, operator):
    run = priced_run("desk")
    unknown = priced_run("mystery", model="mystery-model")
    page = operator.get(f"/runs/{run.pk}/").content.decode()
    assert "$4.50" in page
    listing = operator.get("/runs/").content.decode()
    assert "$4.50" in listing
    assert "no price for mystery-model" in listing
    unknown_page = operator.get(f"/runs/{unknown.pk}/").content.decode()
    assert "unknown" in unknown_page and "$0" not in unknown_page
