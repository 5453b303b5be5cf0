"""An agent whose one tool works for a long time and stops as soon as its run is cancelled (E4).

Loaded by worker processes through AGENTOPS_AGENT_MODULES; it records what it did in the files of
the fake service ($AGENTOPS_TEST_EFFECTS), one line per event, so a test can read them.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from pydantic import BaseModel

from runtime import Agent, ToolContext, tool
from runtime.llm.scripted import ScriptedModel, call, say
from tests.reliability.agents import EFFECTS_ENV

POLL_SECONDS = 0.1


def note(name: str, *fields: object) -> None:
    path = Path(os.environ[EFFECTS_ENV]) / name
    line = "\t".join(str(f) for f in fields) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


class Work(BaseModel):
    seconds: float


class Worked(BaseModel):
    polls: int


@tool(recovery="safe")
def patient(args: Work, ctx: ToolContext) -> Worked:
    """Work for `seconds`, checking between steps whether the run was cancelled."""
    note("patient", ctx.operation_id, "started")
    polls = 0
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        polls += 1
        if ctx.cancelled():
            note("patient", ctx.operation_id, "cancelled", polls)
            ctx.raise_if_cancelled()
        time.sleep(POLL_SECONDS)
    note("patient", ctx.operation_id, "finished", polls)
    return Worked(polls=polls)


patient_desk = Agent(
    name="patient",
    version="1",
    model="claude-test",
    instructions="Do the long job.",
    tools=[patient],
    llm=ScriptedModel([call(("patient", {"seconds": 60.0}), step=1), say("done")]),
)
