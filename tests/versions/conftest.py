"""Personas and helpers for the agent-version admin and the version board.

agent_admin   staff, may register and unregister versions (agentops.manage_agentversion), sees runs
staff_viewer  staff, sees the versions admin but may change nothing
operator      console user who may retry runs (agentops.control_run)
viewer        console user who may look, not act
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from runtime import respond, submit
from runtime.models import Run, RunStatus
from runtime.testing import run_until_idle
from tests.conftest import ARGS, call, make_agent, say
from tests.support import personas
from tests.support.personas import logged_in, user_with

CHANGELIST = "/admin/agentops/agentversion/"


@pytest.fixture
def agent_admin(db: None) -> Client:
    return logged_in(personas.agent_admin("ada"))


@pytest.fixture
def staff_viewer(db: None) -> Client:
    return logged_in(user_with("sam", "view_agentversion", "view_run", staff=True))


@pytest.fixture
def operator(db: None) -> Client:
    return logged_in(user_with("olga", "control_run", "view_run"))


@pytest.fixture
def viewer(db: None) -> Client:
    return logged_in(user_with("vic", "view_run"))


def approval_script() -> list[Any]:
    """One safe call, then a refund that waits for approval, then the answer."""
    return [
        call(("get_order", ARGS["get_order"]), step=1),
        call(("refund", ARGS["refund"]), step=2),
        say("done"),
    ]


def waiting_runs(agent_name: str, count: int) -> list[Run]:
    """`count` runs of the newest registered version of `agent_name`, each waiting for approval."""
    runs = [run_until_idle(submit(agent_name, "refund A1", actor="alice").pk) for _ in range(count)]
    assert {run.status for run in runs} == {RunStatus.WAITING}
    return runs


def approve_and_resume(run: Run) -> Run:
    respond(run.interactions.get().pk, {"approved": True}, actor="bob")
    return run_until_idle(run.pk)


def act(client: Client, action: str, *keys: str, **extra: str) -> Any:
    """Post an admin action on (agent:version) keys to the versions list; follow the redirect."""
    data: dict[str, Any] = {"action": action, "_selected_action": list(keys), **extra}
    return client.post(CHANGELIST, data, follow=True)


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]]


__all__ = [
    "CHANGELIST",
    "act",
    "approval_script",
    "approve_and_resume",
    "make_agent",
    "messages_of",
    "waiting_runs",
]
