"""Security fixtures: the console's personas (shared with tests/console) plus the agent admin."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from runtime.models import (
    AgentVersion,
    ApprovalVote,
    BulkJob,
    Event,
    Interaction,
    Operation,
    Run,
    Session,
    WorkItem,
)
from tests.console.conftest import World, as_user, users, world
from tests.support.personas import ALL_PERSONAS, agent_admin, logged_in

__all__ = ["as_user", "everything", "personas", "users", "world"]

# Every persona of the matrix; `agent_admin` manages versions in the admin and sees runs.
PERSONAS = ALL_PERSONAS


@pytest.fixture
def personas(users: dict[str, User]) -> Callable[[str], Client]:
    """personas("agent_admin") -> a logged-in client; "anonymous" -> a client with no login."""
    everyone: dict[str, User | None] = {**users, "agent_admin": agent_admin(), "anonymous": None}
    return lambda persona, **client_options: logged_in(everyone[persona], **client_options)


def everything() -> tuple[Any, ...]:
    """The state a request could change (to prove that it did not)."""
    return (
        list(Run.objects.order_by("pk").values_list("pk", "status", "fence", "updated_at")),
        list(Operation.objects.order_by("pk").values_list("pk", "status", "result")),
        list(Interaction.objects.order_by("pk").values_list("pk", "status", "response")),
        list(Event.objects.order_by("pk").values_list("pk", "kind", "actor")),
        list(AgentVersion.objects.order_by("pk").values_list("pk", "unregistered_at")),
        Session.objects.count(),
        list(WorkItem.objects.order_by("pk").values_list("pk", "claimed_by", "arguments")),
        list(ApprovalVote.objects.order_by("pk").values_list("pk")),
        list(BulkJob.objects.order_by("pk").values_list("pk", "status")),
    )


@pytest.fixture
def scene(world: World) -> dict[str, Any]:
    """One run in each state an operator acts on, and what each action posts."""
    waiting = world.run("waiting")
    question = world.run("question")
    blocked = world.run("blocked")
    failed = world.run("failed")
    return {
        "waiting": waiting,
        "approval": world.pending(waiting),
        "question": world.pending(question),
        "blocked": blocked,
        "failed": failed,
        "completed": world.run("completed"),
        "to_cancel": world.run("waiting"),
        "to_claim": world.pending(world.run("waiting")),
        "to_pause": world.run("waiting"),
    }
