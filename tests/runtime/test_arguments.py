"""Every verb checks its arguments first: a typed InvalidInput, and nothing written."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from runtime import InvalidInput, cancel, resolve, respond, retry, submit
from runtime.control import retry_many
from runtime.models import Event, EventKind, Interaction, Operation, Run, Session
from runtime.testing import SimulatedCrash, crash_at, recover, run_until_idle
from tests.conftest import make_agent, one_call

KEY = "step-1/tool/toolu_01_0"
BAD_ACTORS = [
    None,
    7,
    {"name": "alice"},
    ["alice"],
    "",
    "   ",
    "x" * 151,
    "al\x00ice",
    "al\ud800ice",
    "runtime",
]


def snapshot() -> tuple:
    return (
        Session.objects.count(),
        list(Run.objects.order_by("pk").values_list("pk", "status", "fence", "blocked_operation")),
        list(Operation.objects.order_by("pk").values_list("pk", "status", "attempts", "result")),
        list(Interaction.objects.order_by("pk").values_list("pk", "status", "responded_by")),
        list(Event.objects.order_by("pk").values_list("pk", "actor")),
    )


class Runs:
    """One run in each state a verb acts on."""

    def __init__(self, define: Callable[..., Any]) -> None:
        define(
            make_agent(one_call("refund"), name="approvals"),
            make_agent(one_call("charge"), name="charges"),
            make_agent([RuntimeError("down")] * 5, name="broken"),
        )
        self.waiting = run_until_idle(submit("approvals", "refund", actor="alice").pk)
        self.approval = self.waiting.interactions.get()
        blocked = submit("charges", "charge", actor="alice")
        with crash_at("after_handler", tool="charge"), pytest.raises(SimulatedCrash):
            recover(blocked.pk)
        self.blocked = recover(blocked.pk)
        self.failed = run_until_idle(submit("broken", "hi", actor="alice").pk)


@pytest.fixture
def runs(define, effects) -> Runs:
    return Runs(define)


def verbs(runs: Runs, actor: Any) -> dict[str, Callable[[], Any]]:
    return {
        "submit": lambda: submit("broken", "hello", actor=actor),
        "submit to a session": lambda: submit(
            "broken", "hello", actor=actor, session=runs.failed.session_id
        ),
        "respond": lambda: respond(runs.approval.pk, {"approved": True}, actor=actor),
        "resolve": lambda: resolve(
            runs.blocked.pk, KEY, {"receipt_id": "r-1"}, evidence="seen", actor=actor
        ),
        "retry": lambda: retry(runs.failed.pk, actor=actor),
        "retry_many": lambda: retry_many([runs.failed.pk], actor=actor),
        "cancel": lambda: cancel(runs.waiting.pk, actor=actor),
    }


def refused(action: Callable[[], Any], match: str) -> None:
    before = snapshot()
    with pytest.raises(InvalidInput, match=match) as error:
        action()
    assert error.value.code == "invalid_input"
    assert snapshot() == before


@pytest.mark.parametrize("actor", BAD_ACTORS, ids=repr)
def test_every_verb_refuses_an_actor_the_audit_cannot_name(runs, actor):
    for verb, action in verbs(runs, actor).items():
        try:
            refused(action, "actor|runtime")
        except BaseException as exc:
            raise AssertionError(f"{verb} with actor {actor!r}") from exc


def test_every_verb_records_a_150_character_actor_exactly(runs):
    actor = "a" * 150
    actions = verbs(runs, actor)
    for verb in ("submit", "respond", "resolve", "retry", "cancel"):
        actions[verb]()
    kinds = Event.objects.filter(actor=actor).values_list("kind", flat=True)
    assert sorted(kinds) == [
        "approval_granted",
        "cancelled",
        "operation_resolved",
        "retried",
        "submitted",
    ]
    assert Interaction.objects.get(pk=runs.approval.pk).responded_by == actor


def test_an_actor_is_stripped_of_surrounding_spaces(runs):
    retry(runs.failed.pk, actor="  ops  ")
    assert Event.objects.get(run=runs.failed, kind=EventKind.RETRIED).actor == "ops"


@pytest.mark.parametrize("reason", [None, 3, {"why": "x"}, "a\x00", "\udfff", "x" * 4001], ids=repr)
def test_cancel_refuses_a_reason_that_is_not_storable_text(runs, reason):
    refused(lambda: cancel(runs.waiting.pk, actor="ops", reason=reason), "reason")


@pytest.mark.parametrize("title", [None, 5, "t\x00"], ids=repr)
def test_submit_refuses_a_title_that_is_not_storable_text(runs, title):
    refused(lambda: submit("broken", "hello", actor="alice", title=title), "title")


@pytest.mark.parametrize(
    ("arguments", "match"),
    [
        ({"message": None}, "message must be text"),
        ({"message": 42}, "message must be text"),
        ({"agent": None}, "agent name must be text"),
        ({"version": 1}, "version must be text"),
    ],
)
def test_submit_refuses_arguments_of_the_wrong_type(runs, arguments, match):
    call = {"agent": "broken", "message": "hello", "actor": "alice", **arguments}
    agent, message = call.pop("agent"), call.pop("message")
    refused(lambda: submit(agent, message, **call), match)


@pytest.mark.parametrize(
    ("arguments", "match"),
    [
        ({"operation_key": None}, "operation key must be text"),
        ({"operation_key": ["k"]}, "operation key must be text"),
        ({"operation_key": "k" * 201}, "operation key is longer"),
        ({"evidence": None}, "evidence must be text"),
        ({"evidence": 12}, "evidence must be text"),
        ({"outcome": None}, "outcome must be one of"),
        ({"outcome": "maybe"}, "outcome must be one of"),
        ({"outcome": "not_run_again", "result": {"receipt_id": "r"}}, "has no result"),
    ],
    ids=repr,
)
def test_resolve_refuses_arguments_of_the_wrong_type(runs, arguments, match):
    call = {
        "operation_key": KEY,
        "result": {"receipt_id": "r-1"},
        "evidence": "seen",
        "actor": "rita",
        **arguments,
    }
    key, result = call.pop("operation_key"), call.pop("result")
    refused(lambda: resolve(runs.blocked.pk, key, result, **call), match)


def test_retry_many_refuses_one_string_for_a_list_of_ids(runs):
    refused(lambda: retry_many(str(runs.failed.pk), actor="ops"), "list of ids")
