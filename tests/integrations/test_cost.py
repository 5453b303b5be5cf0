"""Cost: the price table's arithmetic, unknown prices, and where the console shows it."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.contrib.auth.models import Permission, User
from hypothesis import given, settings
from hypothesis import strategies as st

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


# A request's recorded usage as the providers and our fakes write it, odd values included.
usages = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {},
        optional={
            name: st.one_of(st.integers(-5, 3_000_000), st.booleans(), st.none(), st.just("9"))
            for name in cost.PRICED_FIELDS
        },
    ),
)
requests = st.lists(
    st.tuples(st.sampled_from(["r1", "r2"]), st.sampled_from([*PRICES, "mystery"]), usages),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(requests=requests)
def test_a_runs_cost_summed_per_model_is_its_requests_priced_one_by_one(requests):
    """for_runs sums a run's requests per model before pricing them (a page of runs makes a few
    hundred): the same tokens, cost and unpriced models as pricing each request."""
    one_by_one: dict[str, cost.Usage] = {}
    summed: dict[tuple[str, str], dict[str, int]] = {}
    for run, model, usage in requests:
        one_by_one.setdefault(run, cost.Usage()).add(model, usage)
        tokens = summed.setdefault((run, model), {})
        for name, amount in cost.counted(usage).items():
            tokens[name] = tokens.get(name, 0) + amount
    at_once: dict[str, cost.Usage] = {}
    for (run, model), tokens in summed.items():
        at_once.setdefault(run, cost.Usage()).add(model, tokens)
    for run, usage in one_by_one.items():
        assert at_once[run] == usage, run


def test_a_page_of_runs_is_priced_once_per_run_and_model(priced_run, monkeypatch):
    runs = [priced_run("desk"), priced_run("desk"), priced_run("mystery", model="mystery-model")]
    for run in runs:  # three requests each
        request = Operation.objects.get(run=run, kind="model")
        for step in (2, 3):
            request.pk, request.key = None, f"step-{step}/model"
            request.save()
    priced: list[str] = []
    price_of = cost.price_of

    def counting(model: str, tokens: dict[str, int]) -> Decimal | None:
        priced.append(model)
        return price_of(model, tokens)

    monkeypatch.setattr(cost, "price_of", counting)
    usages = cost.for_runs(run.pk for run in runs)
    assert sorted(priced) == ["claude-sonnet-4-5", "claude-sonnet-4-5", "mystery-model"]
    assert [usages[run.pk].cost for run in runs] == [Decimal("13.5"), Decimal("13.5"), None]
    assert usages[runs[0].pk].total_tokens == 3 * 1_100_000


def test_the_cost_cell_says_the_cost_and_its_tokens_and_escapes_a_models_name():
    from agentops.integrations.templatetags.integrations import _cost_html

    priced = cost.Usage()
    priced.add("claude-sonnet-4-5", {"input_tokens": 1_000_000, "cache_read_input_tokens": 7})
    assert _cost_html(priced) == (
        '<span class="cost" title="1000000 input, 0 output, 0 cache write, 7 cache read tokens">'
        '$3.00 <span class="muted small">· 1000007 tokens</span></span>'
    )
    hostile = cost.Usage()
    hostile.add("<img src=x onerror=alert(1)>", {"output_tokens": 5})
    html = _cost_html(hostile)
    assert "<img" not in html
    assert "(no price for &lt;img src=x onerror=alert(1)&gt;)" in html
    assert _cost_html(cost.Usage(cost=None)).startswith(
        '<span class="cost" title="0 input, 0 output, 0 cache write, 0 cache read tokens">'
        '<span class="unknown">unknown</span> '
    )
