"""The crash harness reaches every window of model requests and of each tool by name (C12)."""

from __future__ import annotations

import signal

import pytest

from runtime import faults, submit
from runtime.models import Operation, OperationStatus, RunStatus
from runtime.testing import SimulatedCrash, crash_at, recover, run_until_idle
from tests.runtime.edge_support import Recorder, edge_agent, reply, text, use

MODEL_WINDOWS = [
    "before_intent",
    "after_intent",
    "after_handler",
    "during_outcome",
    "after_outcome",
]
TOOL_WINDOWS = [*MODEL_WINDOWS[:2], "in_handler", *MODEL_WINDOWS[2:]]
TOOL_NAMES = ["charge", "get_order", "open_ticket", "notify"]


def _agent(define, tool_name: str, name: str = "edge"):
    llm = Recorder(reply(use(tool_name), stop="tool_use"), reply(text("done")))
    return define(edge_agent(llm, name=name))


@pytest.mark.parametrize("window", MODEL_WINDOWS)
def test_c12_every_window_of_a_model_request_can_be_targeted(define, window):
    agent = _agent(define, "get_order")
    run = submit(agent.name, "go", actor="alice")
    with crash_at(window, tool="model") as crashed, pytest.raises(SimulatedCrash):
        run_until_idle(run.pk)
    assert crashed == ["step-1/model"]
    op = Operation.objects.filter(run=run, key="step-1/model").first()
    if window == "before_intent":
        assert op is None
    elif window == "after_outcome":
        assert op.status == OperationStatus.COMPLETED
    else:  # during_outcome rolled the outcome back
        assert op.status == OperationStatus.STARTED
    assert recover(run.pk).status == RunStatus.COMPLETED


@pytest.mark.parametrize("tool_name", TOOL_NAMES)
@pytest.mark.parametrize("window", TOOL_WINDOWS)
def test_c12_every_window_of_each_tool_can_be_targeted_by_name(define, effects, window, tool_name):
    # Another tool's name never fires: the crash is for the named tool only.
    other = next(name for name in TOOL_NAMES if name != tool_name)
    spared = _agent(define, tool_name, name="spared")
    with crash_at(window, tool=other) as missed:
        done = run_until_idle(submit(spared.name, "go", actor="alice").pk)
    assert (missed, done.status) == ([], RunStatus.COMPLETED)
    agent = _agent(define, tool_name)
    run = submit(agent.name, "go", actor="alice")
    with crash_at(window, tool=tool_name) as crashed, pytest.raises(SimulatedCrash):
        run_until_idle(run.pk)
    assert crashed == ["step-1/tool/toolu_1"]


def test_c12_the_crash_variable_targets_the_model_during_its_outcome(define, monkeypatch):
    """AGENTOPS_CRASH_AT=during_outcome:model kills the process inside the model's outcome."""
    kills: list[tuple[str, str]] = []
    reached: list[str] = []

    def recorded_kill(pid: int, sig: int) -> None:
        assert sig == signal.SIGKILL
        kills.append((reached[-1], "model"))

    def watch(window: str, run, key: str, operation: str) -> None:
        reached.append(f"{window}:{operation}")
        faults._kill_at("during_outcome:model")(window, run, key, operation)

    monkeypatch.setattr(faults.os, "kill", recorded_kill)
    monkeypatch.setattr(faults, "handler", watch)
    agent = _agent(define, "get_order")
    run_until_idle(submit(agent.name, "go", actor="alice").pk)
    assert kills == [("during_outcome:model", "model"), ("during_outcome:model", "model")]
    assert "during_outcome:get_order" in reached


def test_c12_the_crash_variable_is_read_as_the_process_starts(define, monkeypatch):
    kills: list[int] = []
    monkeypatch.setattr(faults.os, "kill", lambda pid, sig: kills.append(sig))
    monkeypatch.setattr(faults, "_environment", None)  # restored after the test
    monkeypatch.setenv("AGENTOPS_CRASH_AT", "during_outcome:model")
    faults.read_environment()  # what importing the runtime does in a new worker process
    agent = _agent(define, "get_order")
    run_until_idle(submit(agent.name, "go", actor="alice").pk)
    assert kills == [signal.SIGKILL, signal.SIGKILL]  # the outcomes of both model requests


def test_c12_a_bad_crash_variable_fails_as_the_process_starts(monkeypatch):
    monkeypatch.setattr(faults, "_environment", None)
    monkeypatch.setenv("AGENTOPS_CRASH_AT", "during_lunch")
    with pytest.raises(ValueError, match="unknown window 'during_lunch'"):
        faults.read_environment()
    assert faults._environment is None and not faults.active()
