"""Console fixtures: the personas, and real runs in every state an operator meets.

Runs are made by the runtime's verbs and the crash harness, never by writing rows by hand.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls.resolvers import URLResolver

from runtime import Agent, ModelRetry, ToolContext, ask_operator, cancel, submit, tool
from runtime.llm.scripted import ScriptedModel, call, say
from runtime.models import Interaction, InteractionStatus, Run
from runtime.testing import SimulatedCrash, crash_at, recover, run_until_idle
from tests.conftest import EFFECTS, TOOLS, Amount, Receipt, make_agent, one_call
from tests.support.personas import CONSOLE_PERSONAS, console_user, logged_in

PERSONAS = list(CONSOLE_PERSONAS)
HOSTILE = (
    '<script>alert(1)</script><img src=x onerror=alert(2)> <a href="javascript:alert(3)">x</a>'
    ' <div hx-get="/admin/" hx-trigger="load">y</div> ![i](https://evil.example/p.png)'
)
CSRF = re.compile(r'name="csrfmiddlewaretoken" value="[^"]+"')


@tool(recovery="manual")
def transfer(args: Amount, ctx: ToolContext) -> Receipt:
    """Move money between accounts; cannot look its effect up afterwards."""
    return Receipt(receipt_id=EFFECTS.apply(ctx.operation_id))


def agents() -> list[Agent]:
    """One agent per state, so that one test can hold runs in every state at once."""
    return [
        make_agent(one_call("refund"), name="approvals"),
        make_agent(
            [call(("ask_operator", {"question": "Which order do you mean?"}), step=1), say("ok")],
            name="questions",
        ),
        make_agent(one_call("charge"), name="charges"),
        Agent(
            name="transfers",
            version="1",
            model="claude-test",
            instructions="Move money.",
            tools=[transfer, *TOOLS.values(), ask_operator],
            llm=ScriptedModel(
                [call(("transfer", {"order_id": "A1", "amount_cents": 700}), step=1), say("ok")]
            ),
        ),
        make_agent(
            [RuntimeError("provider overloaded")],
            name="flaky",
            model_retry=ModelRetry(max_attempts=3, initial_delay=60, max_delay=600),
        ),
        make_agent([RuntimeError("provider exploded")], name="broken"),
        make_agent([say("Hello! How can I help?")], name="chatty"),
        # Agent-controlled text everywhere: model text, tool arguments, question, answer.
        make_agent(
            [
                call(("refund", {"order_id": HOSTILE, "amount_cents": 1}), text=HOSTILE, step=1),
                say(HOSTILE),
            ],
            name="hostile-refund",
        ),
        make_agent(
            [call(("ask_operator", {"question": HOSTILE}), text=HOSTILE, step=1), say(HOSTILE)],
            name="hostile-question",
        ),
        make_agent(
            [
                call(("charge", {"order_id": HOSTILE, "amount_cents": 1}), text=HOSTILE, step=1),
                say(HOSTILE),
            ],
            name="hostile-charge",
        ),
    ]


class World:
    """Makes runs in a given state through the runtime."""

    def __init__(self) -> None:
        self.count = 0

    def run(self, state: str, message: str = "please refund order A1") -> Run:
        agent = {
            "waiting": "approvals",
            "question": "questions",
            "blocked": "charges",
            "blocked_no_lookup": "transfers",
            "retry_wait": "flaky",
            "failed": "broken",
            "completed": "chatty",
            "cancelled": "chatty",
            "queued": "chatty",
            "hostile_waiting": "hostile-refund",
            "hostile_question": "hostile-question",
            "hostile_blocked": "hostile-charge",
        }[state]
        self.count += 1
        run = submit(agent, message, actor="alice")
        if state == "queued":
            return run
        if state == "cancelled":
            return cancel(run.pk, actor="alice", reason="not needed")
        if "blocked" in state:
            tool_name = "transfer" if state == "blocked_no_lookup" else "charge"
            with crash_at("after_handler", tool=tool_name), pytest.raises(SimulatedCrash):
                recover(run.pk)
            return recover(run.pk)
        return run_until_idle(run.pk)

    @staticmethod
    def pending(run: Run) -> Interaction:
        return Interaction.objects.get(run=run, status=InteractionStatus.PENDING)


@pytest.fixture
def world(define: Callable[..., Agent], effects: Any) -> World:
    define(*agents())
    return World()


@pytest.fixture
def users(db: None) -> dict[str, User]:
    return {persona: console_user(persona) for persona in CONSOLE_PERSONAS}


@pytest.fixture
def as_user(users: dict[str, User]) -> Callable[[str], Client]:
    """as_user("approver") -> a test client logged in as that persona."""
    return lambda persona: logged_in(users[persona])


def htmx(**extra: Any) -> dict[str, Any]:
    """Headers of an htmx request."""
    return {"HTTP_HX_REQUEST": "true", **extra}


def without_csrf(html: str) -> str:
    """The CSRF token is masked anew on every render; everything else must be equal."""
    return CSRF.sub('name="csrfmiddlewaretoken" value="…"', html)


@pytest.fixture
def rendering(monkeypatch: pytest.MonkeyPatch) -> Callable[[Client, str], tuple[int, int]]:
    """rendering(client, path) -> (templates rendered, URLs reversed) by a GET of the page.

    A list whose rows each render a template or reverse a URL costs that per row: a pinned
    count, like the queries', keeps the work of a page independent of its length."""
    reversed_urls: list[str] = []
    # Every reversal ({% url %}, reverse()) ends in the resolver's one private method.
    reverse = URLResolver._reverse_with_prefix  # type: ignore[attr-defined]  # private

    def counted(resolver: URLResolver, lookup_view: Any, *args: Any, **kwargs: Any) -> str:
        reversed_urls.append(str(lookup_view))
        return reverse(resolver, lookup_view, *args, **kwargs)

    monkeypatch.setattr(URLResolver, "_reverse_with_prefix", counted)

    def render(client: Client, path: str) -> tuple[int, int]:
        reversed_urls.clear()
        response = client.get(path)
        assert response.status_code == 200
        return len(response.templates), len(reversed_urls)

    return render
