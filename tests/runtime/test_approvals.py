"""Approvals and questions: respond, reject with a reason, the same answer twice, conflicts."""

from __future__ import annotations

import json

import pytest

from runtime import (
    InteractionClosed,
    InteractionConflict,
    InvalidInput,
    NotFound,
    cancel,
    respond,
    submit,
)
from runtime.models import Event, EventKind, Interaction, InteractionStatus, Operation, RunStatus
from runtime.testing import recover, run_until_idle
from tests.conftest import call, make_agent, one_call, say


def waiting_run(define, script=None):
    agent = define(make_agent(script or one_call("refund")))
    run = run_until_idle(submit(agent.name, "refund A1", actor="alice").pk)
    return run, Interaction.objects.get(run=run)


def test_it_waits_for_approval_before_writing_the_intent(define, effects):
    run, interaction = waiting_run(define)
    assert run.status == RunStatus.WAITING
    assert interaction.kind == "tool_approval"
    assert interaction.payload == {"arguments": {"order_id": "A1", "amount_cents": 500}}
    assert not Operation.objects.filter(run=run, kind="tool").exists()
    assert effects.total == 0


def test_it_runs_the_tool_once_approved(define, effects):
    run, interaction = waiting_run(define)
    respond(interaction.pk, {"approved": True}, actor="bob")
    run = run_until_idle(run.pk)
    assert run.status == RunStatus.COMPLETED
    assert effects.total == 1
    granted = Event.objects.get(run=run, kind=EventKind.APPROVAL_GRANTED)
    assert granted.actor == "bob"


def test_it_gives_the_model_the_rejection_reason(define, effects):
    run, interaction = waiting_run(define)
    respond(interaction.pk, {"approved": False, "reason": "amount looks wrong"}, actor="bob")
    run = run_until_idle(run.pk)
    assert run.status == RunStatus.COMPLETED
    assert effects.total == 0
    tool_result = run.transcript[2]["content"][0]
    assert tool_result["is_error"] is True
    assert json.loads(tool_result["content"])["reason"] == "amount looks wrong"


def test_it_requires_a_reason_to_reject(define):
    _run, interaction = waiting_run(define)
    with pytest.raises(InvalidInput, match="reason"):
        respond(interaction.pk, {"approved": False, "reason": "  "}, actor="bob")
    interaction.refresh_from_db()
    assert interaction.status == InteractionStatus.PENDING
    assert not Event.objects.filter(kind__startswith="approval_").exists()


def test_it_treats_the_same_answer_twice_as_harmless(define, effects):
    run, interaction = waiting_run(define)
    respond(interaction.pk, {"approved": True}, actor="bob")
    again = respond(interaction.pk, {"approved": True}, actor="carol")
    assert again.responded_by == "bob"
    assert Event.objects.filter(kind=EventKind.APPROVAL_GRANTED).count() == 1
    run_until_idle(run.pk)
    assert effects.total == 1


def test_it_refuses_a_conflicting_answer_naming_who_answered(define, effects):
    _run, interaction = waiting_run(define)
    respond(interaction.pk, {"approved": True}, actor="bob")
    with pytest.raises(InteractionConflict, match="approved by bob at "):
        respond(interaction.pk, {"approved": False, "reason": "no"}, actor="carol")
    interaction.refresh_from_db()
    assert interaction.response == {"approved": True, "reason": ""}
    assert interaction.responded_by == "bob"


def test_it_never_approves_on_restart_or_redelivery(define, effects):
    run, interaction = waiting_run(define)
    # A restarted worker, a redelivered task and a swept queue all try to advance it.
    for _ in range(3):
        run = recover(run.pk)
    assert run.status == RunStatus.WAITING
    interaction.refresh_from_db()
    assert interaction.status == InteractionStatus.PENDING
    assert effects.total == 0


def test_it_answers_a_question_with_the_operators_words(define):
    script = [call(("ask_operator", {"question": "Which order?"}), step=1), say("thanks")]
    run, interaction = waiting_run(define, script)
    assert interaction.kind == "question"
    assert interaction.payload == {"question": "Which order?"}
    respond(interaction.pk, {"answer": "A1"}, actor="bob")
    run = run_until_idle(run.pk)
    assert run.status == RunStatus.COMPLETED
    assert json.loads(run.transcript[2]["content"][0]["content"]) == {"answer": "A1"}
    assert Event.objects.get(kind=EventKind.QUESTION_ANSWERED).actor == "bob"


@pytest.mark.parametrize(
    "response",
    [{}, {"approved": "yes"}, {"approved": True, "extra": 1}, None, [], "approve", {"answer": "x"}],
)
def test_it_rejects_malformed_approval_responses(define, response):
    _run, interaction = waiting_run(define)
    with pytest.raises(InvalidInput):
        respond(interaction.pk, response, actor="bob")
    interaction.refresh_from_db()
    assert interaction.status == InteractionStatus.PENDING
    assert Event.objects.filter(actor="bob").count() == 0


def test_it_rejects_an_empty_or_unstorable_answer(define):
    script = [call(("ask_operator", {"question": "?"}), step=1), say("ok")]
    _run, interaction = waiting_run(define, script)
    for bad in ({"answer": ""}, {"answer": "nul\x00"}, {"answer": "\ud800"}):
        with pytest.raises(InvalidInput):
            respond(interaction.pk, bad, actor="bob")
    interaction.refresh_from_db()
    assert interaction.status == InteractionStatus.PENDING


def test_it_says_an_unknown_interaction_does_not_exist(db):
    for bad in ("0b2d7c4e-0000-4000-8000-000000000000", "not-a-uuid", None):
        with pytest.raises(NotFound):
            respond(bad, {"approved": True}, actor="bob")


def test_it_closes_the_interaction_of_a_cancelled_run(define, effects):
    run, interaction = waiting_run(define)
    cancel(run.pk, actor="bob")
    with pytest.raises(InteractionClosed):
        respond(interaction.pk, {"approved": True}, actor="carol")
    assert effects.total == 0
