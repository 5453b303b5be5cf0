"""The agent and the fake external service of the reliability tests, shared with worker processes.

Worker processes load this module through AGENTOPS_AGENT_MODULES (and `--include`). The service
keeps its records in files under $AGENTOPS_TEST_EFFECTS, one line per call and one per effect,
each written with a single O_APPEND write so that concurrent processes never interleave (a
deduplicated call's effect is a marker file, created once); that is how effects are counted
across processes that die.

A run's input is a JSON plan: {"steps": [[[tool, args], ...], ...], "model_errors": [step, ...],
"model_seconds": seconds}.
The scripted model asks for each step's tool calls in turn, then answers "done: <the results it
saw>", so a test can read what the model was shown from `run.output`. The first attempt of the
model request of each step listed in "model_errors" fails (a provider error, retried later); each
model request takes "model_seconds" (default 0), a long request to pause a run in the middle of.

Test-only switches, read when a worker imports this module:
- AGENTOPS_TEST_NO_FENCE=1: the fence check is removed (the fence hook, runtime.faults.fence, makes
  every fenced write require the run's current fence and status instead of the claim's), to
  show that the pause test detects a worker writing after it lost its lease.
- AGENTOPS_TEST_FENCE_LOG=1: every fenced write is logged to `fenced` (run, pid, fence, landed or
  refused). Off otherwise, so that the other tests run the production write path untouched.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from runtime import Agent, ModelRetry, ToolContext, ask_operator, tool
from runtime.errors import LeaseLost, ModelError
from runtime.llm import ModelRequest, ModelResponse
from runtime.llm.scripted import ScriptedModel, assistant_turns, call, say

EFFECTS_ENV = "AGENTOPS_TEST_EFFECTS"
FENCE_LOG_ENV = "AGENTOPS_TEST_FENCE_LOG"
NO_FENCE_ENV = "AGENTOPS_TEST_NO_FENCE"
# Seconds a failed model call waits before its retry (the retry-timer test's due time).
RETRY_DELAY = 8.0


# --- the fake external service -----------------------------------------------------------------


def _effects_dir() -> Path:
    path = os.environ.get(EFFECTS_ENV)
    if not path:
        raise RuntimeError(f"{EFFECTS_ENV} is not set: the fake service has nowhere to write")
    return Path(path)


def _append(name: str, *fields: object) -> None:
    line = "\t".join(str(f) for f in fields) + "\n"
    fd = os.open(_effects_dir() / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _marker(folder: Path, marker: str) -> Path:
    return folder / "markers" / hashlib.sha256(marker.encode()).hexdigest()


def _first_time(marker: str) -> bool:
    """True exactly once per marker, across processes (an O_EXCL create)."""
    path = _marker(_effects_dir(), marker)
    path.parent.mkdir(exist_ok=True)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        return False
    return True


def apply(operation_id: str, *, deduplicate: bool = False) -> str:
    """One call to the service; it takes effect unless it deduplicates a known operation id.

    A deduplicated call's effect is the service's record of its key (one atomic create), as in
    a service that stores the key with the effect: a process killed at any point leaves the
    effect made once or not at all.
    """
    _append("calls", operation_id, os.getpid(), time.time())
    receipt = "rcpt-" + hashlib.sha256(operation_id.encode()).hexdigest()[:10]
    if deduplicate:
        _first_time(f"receipt:{operation_id}")
        return receipt
    _append("effects", operation_id, os.getpid(), time.time())
    return receipt


@dataclass
class Records:
    """What the service saw, read back from its files by a test."""

    calls: Counter[str] = field(default_factory=Counter)
    effects: Counter[str] = field(default_factory=Counter)
    spans: list[tuple[str, int, float, float]] = field(default_factory=list)
    fenced: list[tuple[str, int, int, str, float]] = field(default_factory=list)

    @property
    def total_effects(self) -> int:
        return sum(self.effects.values())

    @property
    def duplicates(self) -> int:
        """Effects beyond the first for an operation id."""
        return sum(n - 1 for n in self.effects.values() if n > 1)


def read_records(folder: Path) -> Records:
    def rows(name: str) -> list[list[str]]:
        path = folder / name
        if not path.exists():
            return []
        return [line.split("\t") for line in path.read_text().splitlines() if line]

    records = Records()
    for row in rows("calls"):
        records.calls[row[0]] += 1
    for row in rows("effects"):
        records.effects[row[0]] += 1
    for operation_id in list(records.calls):  # the deduplicated calls' effects (see `apply`)
        if _marker(folder, f"receipt:{operation_id}").exists():
            records.effects[operation_id] += 1
    records.spans = [(r[0], int(r[1]), float(r[2]), float(r[3])) for r in rows("spans")]
    records.fenced = [(r[0], int(r[1]), int(r[2]), r[3], float(r[4])) for r in rows("fenced")]
    return records


# --- tools, one per recovery policy --------------------------------------------------------------


class Order(BaseModel):
    order_id: str
    seconds: float = 0.0


class Receipt(BaseModel):
    receipt_id: str


@contextmanager
def _span(ctx: ToolContext, seconds: float) -> Iterator[None]:
    """Record when this process ran the call, to check two workers never ran a run at once."""
    started = time.time()
    yield
    if seconds:
        time.sleep(seconds)
    _append("spans", ctx.run_id, os.getpid(), started, time.time())


@tool(recovery="manual")
def charge(args: Order, ctx: ToolContext) -> Receipt:
    """Move money: every call is an effect."""
    with _span(ctx, args.seconds):
        return Receipt(receipt_id=apply(ctx.operation_id))


@tool(recovery="safe")
def lookup(args: Order, ctx: ToolContext) -> Receipt:
    """Read an order: harmless to repeat, but every call is counted."""
    with _span(ctx, args.seconds):
        return Receipt(receipt_id=apply(ctx.operation_id))


@tool(recovery="idempotent")
def ticket(args: Order, ctx: ToolContext) -> Receipt:
    """Open a ticket; the service deduplicates on the operation id."""
    with _span(ctx, args.seconds):
        return Receipt(receipt_id=apply(ctx.operation_id, deduplicate=True))


@tool(recovery="report")
def notify(args: Order, ctx: ToolContext) -> Receipt:
    """Send a message: every call is an effect."""
    with _span(ctx, args.seconds):
        return Receipt(receipt_id=apply(ctx.operation_id))


@tool(recovery="idempotent")
def slow_ticket(args: Order, ctx: ToolContext) -> Receipt:
    """Open a ticket (deduplicated), then take `seconds` to confirm it: a long tool call."""
    _append("slow_started", ctx.operation_id, os.getpid(), time.time())
    receipt = apply(ctx.operation_id, deduplicate=True)
    time.sleep(args.seconds)
    _append("slow_finished", ctx.operation_id, os.getpid(), time.time())
    return Receipt(receipt_id=receipt)


POLICY_TOOLS = {"manual": "charge", "safe": "lookup", "idempotent": "ticket", "report": "notify"}


# --- the model ---------------------------------------------------------------------------------


def plan(
    *steps: list[tuple[str, dict[str, Any]]],
    model_errors: tuple[int, ...] = (),
    model_seconds: float = 0.0,
) -> str:
    """A run input: the tool calls of each step, in order; see the module docstring."""
    return json.dumps(
        {
            "steps": [[[name, args] for name, args in step] for step in steps],
            "model_errors": list(model_errors),
            **({"model_seconds": model_seconds} if model_seconds else {}),
        }
    )


def one_call(tool_name: str, **args: Any) -> str:
    return plan([(tool_name, {"order_id": "A1", **args})])


def _plan_of(request: ModelRequest) -> dict[str, Any]:
    return json.loads(request.messages[0]["content"])


def _script(request: ModelRequest) -> ModelResponse:
    steps = _plan_of(request)["steps"]
    done = assistant_turns(request)
    if done < len(steps):
        return call(*[(name, args) for name, args in steps[done]], step=done + 1)
    seen = request.messages[-1]["content"] if done else []
    results = [block["content"] for block in seen if isinstance(block, dict)]
    return say("done: " + " | ".join(results))


class PlanModel:
    """Follows the run's plan; fails the first attempt of the steps listed in model_errors."""

    def __init__(self) -> None:
        self._scripted = ScriptedModel(_script)

    def complete(self, request: ModelRequest, *, operation_id: str) -> ModelResponse:
        _append("model_calls", operation_id, os.getpid(), time.time())
        time.sleep(_plan_of(request).get("model_seconds", 0))
        step = assistant_turns(request) + 1
        if step in _plan_of(request)["model_errors"] and _first_time(f"model:{operation_id}"):
            raise ModelError("scripted provider error: overloaded")
        return self._scripted.complete(request, operation_id=operation_id)


TOOLS = [charge, lookup, ticket, notify, slow_ticket, ask_operator]

reliability = Agent(
    name="reliability",
    version="1",
    model="claude-test",
    instructions="Follow the plan.",
    tools=TOOLS,
    # Exact timers (no jitter): the timer test restarts every worker before they are due.
    model_retry=ModelRetry(
        max_attempts=3, initial_delay=RETRY_DELAY, max_delay=RETRY_DELAY, jitter=False
    ),
    llm=PlanModel(),
)

# The same, with a retry timer short enough to make runs claimed several times in one test.
quick_retry = Agent(
    name="quick_retry",
    version="1",
    model="claude-test",
    instructions="Follow the plan.",
    tools=TOOLS,
    model_retry=ModelRetry(max_attempts=3, initial_delay=0.3, max_delay=0.3),
    llm=PlanModel(),
)


# --- test-only instrumentation of the fence, in worker processes ---------------------------------


def _instrument_fence() -> None:
    from runtime import faults
    from runtime.models import Run

    @contextmanager
    def recorded(run: Any) -> Iterator[tuple[int, str]]:
        if os.environ.get(NO_FENCE_ENV) == "1":
            # The fence check removed: the write requires of the run whatever it holds now,
            # which is what a worker without the check could do.
            held = Run.objects.values_list("fence", "status").get(pk=run.pk)
        else:
            held = (run.fence, "running")
        try:
            yield held
        except LeaseLost:
            _append("fenced", run.pk, os.getpid(), run.fence, "refused", time.time())
            raise
        _append("fenced", run.pk, os.getpid(), run.fence, "landed", time.time())

    # For the worker process's lifetime (runtime.testing.fence_hook is the scoped form).
    faults.fence = recorded


if os.environ.get(FENCE_LOG_ENV) == "1" or os.environ.get(NO_FENCE_ENV) == "1":
    _instrument_fence()
