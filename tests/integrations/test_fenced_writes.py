"""Fenced writes refused: a taken-over worker's outcome is refused, counted in /metrics, and the
run's rows stay as the new owner left them."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection
from pydantic import BaseModel

from agentops.integrations.models import MetricSample
from runtime import Agent, ToolContext, cancel, signals, store, submit, tool
from runtime.engine import advance
from runtime.llm.scripted import ScriptedModel, call, say
from runtime.models import Event, Operation, Run, RunStatus
from runtime.testing import expire_lease
from tests.integrations.conftest import value

taken_over: list[tuple[Any, ...]] = []


class Order(BaseModel):
    order_id: str


class Shipped(BaseModel):
    tracking: str


def state(run_id: Any) -> tuple[Any, ...]:
    """Everything a worker may write about a run."""
    return (
        list(Run.objects.filter(pk=run_id).values()),
        list(Operation.objects.filter(run_id=run_id).order_by("id").values()),
        list(Event.objects.filter(run_id=run_id).order_by("id").values()),
    )


@tool(recovery="idempotent")
def ship(args: Order, ctx: ToolContext) -> Shipped:
    """Ship an order. While it runs, its worker's lease runs out and another worker claims the
    run: the outcome this worker writes next is refused by the fence."""
    expire_lease(ctx.run_id)
    assert store.claim(ctx.run_id, "worker-2") is not None
    taken_over.append(state(ctx.run_id))
    return Shipped(tracking=f"t-{args.order_id}")


@tool(recovery="idempotent")
def pack(args: Order, ctx: ToolContext) -> Shipped:
    """Pack an order. An operator cancels the run while it runs."""
    cancel(ctx.run_id, actor="bob")
    taken_over.append(state(ctx.run_id))
    return Shipped(tracking=f"p-{args.order_id}")


def shipper(name: str, tool_name: str) -> Agent:
    return Agent(
        name=name,
        version="1",
        model="claude-test",
        instructions="Ship what is asked.",
        tools=[ship, pack],
        llm=ScriptedModel([call((tool_name, {"order_id": "A1"}), step=1), say("done")]),
    )


def test_a_taken_over_workers_refused_write_is_counted_and_the_run_is_unchanged(define, scrape):
    taken_over.clear()
    define(shipper("shipper", "ship"))
    run = submit("shipper", "ship A1", actor="alice")
    before = scrape()
    assert value(before, "agentops_fenced_writes_refused_total", agent="shipper") == 0

    assert advance(run.pk, owner="worker-1") is True

    # Nothing the old worker did after the takeover reached the run: not its outcome, not an
    # event, not a status.
    assert state(run.pk) == taken_over[0]
    run.refresh_from_db()
    assert (run.status, run.lease_owner, run.fence) == (RunStatus.RUNNING, "worker-2", 2)
    assert Operation.objects.get(run=run, kind="tool").outcome_at is None
    samples = scrape()
    assert value(samples, "agentops_fenced_writes_refused_total", agent="shipper") == 1
    # The takeover itself is the run's own event, counted beside it.
    assert value(samples, "agentops_lease_takeovers_total", agent="shipper") == 1


def test_a_cancelled_workers_refused_write_is_counted_per_agent(define, scrape):
    taken_over.clear()
    define(shipper("packer", "pack"), shipper("shipper", "ship"))
    for _ in range(2):
        run = submit("packer", "pack A1", actor="alice")
        advance(run.pk, owner="worker-1")
        assert state(run.pk) == taken_over[-1]
        assert Run.objects.get(pk=run.pk).status == RunStatus.CANCELLED
    samples = scrape()
    assert value(samples, "agentops_fenced_writes_refused_total", agent="packer") == 2
    assert value(samples, "agentops_fenced_writes_refused_total", agent="shipper") == 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_refusals_counted_at_once_by_many_processes_are_all_counted():
    """Every worker process counts its own refusals into the same row: concurrent increments
    (each its own connection and transaction, the first ones racing to create the row) lose
    none."""
    workers, each = 6, 25
    barrier = threading.Barrier(workers)

    def worker() -> None:
        try:
            barrier.wait()
            for _ in range(each):
                signals.write_refused.send(sender=None, run_id=None, agent="busy", fence=1)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sample = MetricSample.objects.get(metric="agentops_fenced_writes_refused_total")
    assert sample.value == workers * each
    assert connection.vendor == "postgresql"
