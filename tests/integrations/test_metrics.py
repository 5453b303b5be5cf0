"""/metrics: parsed with prometheus_client's own parser and checked against the database."""

from __future__ import annotations

import datetime as dt

import pytest

from agentops.integrations import pump
from runtime import cancel, clock, store
from runtime.llm import Usage
from runtime.models import EventKind, Interaction, Operation, Run
from runtime.testing import expire_lease
from tests.conftest import call, make_agent, say
from tests.integrations.conftest import TOKEN, finish, value


def paid(text: str, **tokens: int):
    response = (
        say(text)
        if not text.startswith("call:")
        else call(("get_order", {"order_id": "A1"}), step=1)
    )
    return response.model_copy(update={"usage": Usage(**tokens)})


def test_metrics_agree_with_the_database(define, approval_run, scrape):
    define(
        make_agent(
            [
                paid("call:", input_tokens=100, output_tokens=20, cache_read_input_tokens=50),
                paid("done", input_tokens=200, output_tokens=30, cache_creation_input_tokens=10),
            ],
            name="reader",
        )
    )
    from runtime import submit
    from runtime.testing import run_until_idle

    reader = run_until_idle(submit("reader", "look", actor="alice").pk)
    first, interaction = approval_run("one")
    approval_run("two")
    finish(first, interaction)
    samples = scrape()

    for row in Run.objects.values("agent", "status").distinct():
        count = Run.objects.filter(**row).count()
        assert value(samples, "agentops_runs", agent=row["agent"], status=row["status"]) == count
    assert value(samples, "agentops_runs", agent="reader", status="completed") == 1
    assert value(samples, "agentops_queue_items", queue="approvals") == 1
    oldest = Interaction.objects.filter(status="pending").order_by("created_at").first()
    age = value(samples, "agentops_queue_oldest_age_seconds", queue="approvals")
    assert age == pytest.approx((clock.now() - oldest.created_at).total_seconds(), abs=5)
    assert value(samples, "agentops_queue_items", queue="questions") == 0

    model_ops = Operation.objects.filter(kind="model", status="completed")
    assert (
        value(
            samples, "agentops_operations_total", agent="reader", kind="model", outcome="completed"
        )
        == model_ops.filter(run=reader).count()
    )
    tool_ops = Operation.objects.filter(kind="tool").count()
    tool_total = sum(
        v
        for (name, labels), v in samples.items()
        if name == "agentops_operations_total" and ("kind", "tool") in labels
    )
    assert tool_total == tool_ops
    recorded = [op.usage for op in model_ops.filter(run=reader)]
    assert value(
        samples, "agentops_model_tokens_total", agent="reader", model="claude-test", type="input"
    ) == sum(usage["input_tokens"] for usage in recorded)
    assert value(
        samples, "agentops_model_tokens_total", agent="reader", model="claude-test", type="output"
    ) == sum(usage["output_tokens"] for usage in recorded)
    assert (
        value(
            samples,
            "agentops_model_tokens_total",
            agent="reader",
            model="claude-test",
            type="cache_read",
        )
        == 50
    )
    assert value(samples, "agentops_operation_duration_seconds_count", kind="model") == (
        model_ops.count()
    )
    assert (
        value(samples, "agentops_decision_seconds_count", kind=EventKind.APPROVAL_GRANTED, rule="")
        == 1
    )
    # claude-test has no price: its cost is unknown, never 0.
    assert value(samples, "agentops_model_price_unknown", model="claude-test") == 1
    assert (
        "agentops_model_cost_dollars_total",
        (("agent", "reader"), ("model", "claude-test")),
    ) not in samples


def test_cost_by_agent_follows_the_price_table(define, scrape, settings):
    settings.AGENTOPS_MODEL_PRICES = {
        "claude-test": {"input": 3.0, "output": 15.0, "cache_write": 3.75, "cache_read": 0.3}
    }
    define(make_agent([say("done")], name="a"))
    from runtime import submit
    from runtime.testing import run_until_idle

    run = run_until_idle(submit("a", "hi", actor="alice").pk)
    usage = Operation.objects.get(run=run, kind="model").usage
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    expected = (usage["input_tokens"] * 3.0 + usage["output_tokens"] * 15.0) / 1_000_000
    samples = scrape()
    assert value(
        samples, "agentops_model_cost_dollars_total", agent="a", model="claude-test"
    ) == pytest.approx(expected, abs=1e-6)


def test_counters_count_each_event_once_across_scrapes_and_sweeps(approval_run, scrape):
    approval_run()
    first = scrape()
    pump.pump()
    second = scrape()
    name = "agentops_operations_total"
    assert {k: v for k, v in first.items() if k[0] == name} == {
        k: v for k, v in second.items() if k[0] == name
    }


def test_lease_takeovers_are_counted(define, scrape):
    from runtime import submit
    from runtime.engine import advance

    define(make_agent([say("done")], name="slow"))
    run = submit("slow", "hi", actor="alice")
    claimed = store.claim(run.pk, "worker-1")
    assert claimed is not None
    expire_lease(run.pk)
    advance(run.pk, owner="worker-2")
    samples = scrape()
    assert value(samples, "agentops_lease_takeovers_total", agent="slow") == 1


def test_queue_ages_for_runs(approval_run, scrape):
    run, _ = approval_run()
    cancel(run.pk, actor="bob")
    waiting, _ = approval_run("two")
    Run.objects.filter(pk=waiting.pk).update(
        status="needs_attention", updated_at=clock.now() - dt.timedelta(hours=1)
    )
    samples = scrape()
    assert value(samples, "agentops_queue_items", queue="needs_attention") == 1
    age = value(samples, "agentops_queue_oldest_age_seconds", queue="needs_attention")
    assert age == pytest.approx(3600, abs=60)


def test_it_refuses_without_the_token(client, settings, db):
    settings.AGENTOPS_METRICS_TOKEN = TOKEN
    before = Run.objects.count()
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION=TOKEN).status_code == 401
    assert Run.objects.count() == before


def test_it_is_refused_when_nothing_allows_it(client, settings, db):
    settings.AGENTOPS_METRICS_TOKEN = ""
    settings.AGENTOPS_METRICS_ALLOWED_NETWORKS = []
    response = client.get("/metrics")
    assert response.status_code == 403
    assert b"AGENTOPS_METRICS_TOKEN" in response.content


def test_an_allowed_network_needs_no_token(client, settings, db):
    settings.AGENTOPS_METRICS_TOKEN = ""
    settings.AGENTOPS_METRICS_ALLOWED_NETWORKS = ["10.0.0.0/8"]
    assert client.get("/metrics", REMOTE_ADDR="10.2.3.4").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="192.0.2.1").status_code == 403


def test_time_to_decision_is_labelled_with_the_approval_rule(approval_run, scrape):
    from runtime.models import ApprovalRule

    ApprovalRule.objects.create(name="refund desk", agent="clerk", tool="refund")
    run, interaction = approval_run()
    finish(run, interaction)
    samples = scrape()
    counted = value(
        samples,
        "agentops_decision_seconds_count",
        kind=EventKind.APPROVAL_GRANTED,
        rule="refund desk",
    )
    assert counted == 1
    assert (
        value(samples, "agentops_decision_seconds_count", kind=EventKind.APPROVAL_GRANTED, rule="")
        == 0
    )
