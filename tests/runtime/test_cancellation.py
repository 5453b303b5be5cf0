"""A running handler can see that its run was cancelled (E4), and stops without writing."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from runtime import Agent, Cancelled, LeaseLost, ToolContext, cancel, submit, tool
from runtime.models import Event, Operation, OperationStatus, RunStatus
from runtime.testing import run_until_idle
from tests.runtime.edge_support import Recorder, reply, text, use

SEEN: list[tuple[str, bool]] = []


class Job(BaseModel):
    steps: int


class Done(BaseModel):
    steps_done: int


@tool(recovery="safe")
def long_job(args: Job, ctx: ToolContext) -> Done:
    """Work in steps, checking for a cancel between them; an operator cancels after step 2."""
    done = 0
    for step in range(args.steps):
        SEEN.append((f"step {step}", ctx.cancelled()))
        if step == 2:
            cancel(ctx.run_id, actor="ops", reason="wrong order")
        ctx.raise_if_cancelled()
        done += 1
    return Done(steps_done=done)


@pytest.fixture
def job_agent(define):
    SEEN.clear()
    llm = Recorder(reply(use("long_job", args={"steps": 10}), stop="tool_use"), reply(text("ok")))
    agent = Agent(
        name="jobs", version="1", model="claude-test", instructions="", tools=[long_job], llm=llm
    )
    return define(agent)


def test_e4_a_running_handler_sees_the_cancel_and_stops_early(job_agent):
    run = run_until_idle(submit(job_agent.name, "run the job", actor="alice").pk)
    assert run.status == RunStatus.CANCELLED
    # Not cancelled while it worked; cancelled as soon as an operator said so; then it stopped.
    assert SEEN == [("step 0", False), ("step 1", False), ("step 2", False)]
    op = Operation.objects.get(run=run, key="step-1/tool/toolu_1")
    assert op.status == OperationStatus.STARTED  # the worker wrote nothing after the cancel
    assert (
        not Event.objects.filter(run=run, kind__in=["outcome", "completed"])
        .exclude(operation_key="step-1/model")
        .exists()
    )


def test_e4_the_stop_is_a_lease_loss_a_handler_cannot_swallow():
    assert issubclass(Cancelled, LeaseLost)
    assert not issubclass(Cancelled, Exception)
