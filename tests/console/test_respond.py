"""Approve, reject and answer: plain and htmx, bad input, stale interactions, the race."""

from __future__ import annotations

import pytest

from runtime import cancel, respond
from runtime.models import Event, EventKind, Interaction, InteractionStatus, Run, RunStatus
from tests.console.conftest import htmx


def url(interaction: Interaction) -> str:
    return f"/interactions/{interaction.pk}/respond/"


def unchanged(interaction: Interaction) -> bool:
    interaction.refresh_from_db()
    run = Run.objects.get(pk=interaction.run_id)
    return interaction.status == InteractionStatus.PENDING and run.status == RunStatus.WAITING


def test_it_approves_and_redirects_to_the_run(world, as_user):
    interaction = world.pending(world.run("waiting"))
    response = as_user("approver").post(url(interaction), {"decision": "approve", "reason": ""})
    assert response.status_code == 302
    assert response["Location"] == f"/runs/{interaction.run_id}/"
    interaction.refresh_from_db()
    assert interaction.status == InteractionStatus.ANSWERED
    assert interaction.response == {"approved": True, "reason": ""}
    assert interaction.responded_by == "approver"
    assert Run.objects.get(pk=interaction.run_id).status == RunStatus.QUEUED
    event = Event.objects.get(run_id=interaction.run_id, kind=EventKind.APPROVAL_GRANTED)
    assert event.actor == "approver"


def test_it_shows_the_outcome_on_the_run_page_after_the_redirect(world, as_user):
    interaction = world.pending(world.run("waiting"))
    client = as_user("approver")
    response = client.post(url(interaction), {"decision": "approve"}, follow=True)
    html = response.content.decode()
    assert "Approved refund: the run continues." in html
    assert '<span class="actor">approver</span>' in html  # the timeline names who


def test_it_approves_in_place_with_htmx(world, as_user):
    interaction = world.pending(world.run("waiting"))
    response = as_user("approver").post(url(interaction), {"decision": "approve"}, **htmx())
    assert response.status_code == 200
    html = response.content.decode()
    assert html.startswith(f'<section id="interaction-{interaction.pk}"')
    assert "<html" not in html
    assert "Approved refund: the run continues." in html
    assert 'by <strong class="actor">approver</strong>' in html


def test_it_rejects_with_the_reason_the_model_will_see(world, as_user):
    interaction = world.pending(world.run("waiting"))
    response = as_user("approver").post(
        url(interaction), {"decision": "reject", "reason": "Customer already refunded"}
    )
    assert response.status_code == 302
    interaction.refresh_from_db()
    assert interaction.response == {"approved": False, "reason": "Customer already refunded"}
    assert Event.objects.filter(
        run_id=interaction.run_id, kind=EventKind.APPROVAL_REJECTED
    ).exists()


@pytest.mark.parametrize("headers", [{}, htmx()])
def test_it_refuses_a_rejection_without_a_reason(world, as_user, headers):
    interaction = world.pending(world.run("waiting"))
    response = as_user("approver").post(
        url(interaction), {"decision": "reject", "reason": "  "}, **headers
    )
    assert response.status_code == 400
    assert "a rejection needs a reason: the agent will see it" in response.content.decode()
    assert unchanged(interaction)


def test_it_refuses_an_unknown_decision(world, as_user):
    interaction = world.pending(world.run("waiting"))
    response = as_user("approver").post(url(interaction), {"decision": "maybe"})
    assert response.status_code == 400
    assert "Select a valid choice" in response.content.decode()
    assert unchanged(interaction)


@pytest.mark.parametrize("headers", [{}, htmx()])
def test_it_answers_a_question(world, as_user, headers):
    interaction = world.pending(world.run("question"))
    response = as_user("approver").post(url(interaction), {"answer": "Order A1"}, **headers)
    assert response.status_code == (200 if headers else 302)
    interaction.refresh_from_db()
    assert interaction.response == {"answer": "Order A1"}
    assert Event.objects.get(run_id=interaction.run_id, kind=EventKind.QUESTION_ANSWERED).actor == (
        "approver"
    )


@pytest.mark.parametrize("headers", [{}, htmx()])
def test_it_refuses_an_empty_answer(world, as_user, headers):
    interaction = world.pending(world.run("question"))
    response = as_user("approver").post(url(interaction), {"answer": " "}, **headers)
    assert response.status_code == 400
    assert "This field is required." in response.content.decode()
    assert unchanged(interaction)


def test_it_refuses_a_nul_character(world, as_user):
    interaction = world.pending(world.run("question"))
    response = as_user("approver").post(url(interaction), {"answer": "A1\x00"})
    assert response.status_code == 400
    assert "Null characters are not allowed." in response.content.decode()
    assert unchanged(interaction)


@pytest.mark.parametrize("headers", [{}, htmx()])
def test_it_tells_the_second_operator_who_answered_when_and_what(world, as_user, headers):
    interaction = world.pending(world.run("waiting"))
    respond(interaction.pk, {"approved": False, "reason": "fraud suspected"}, actor="bob")
    response = as_user("approver").post(url(interaction), {"decision": "approve"}, **headers)
    assert response.status_code == 409
    html = response.content.decode()
    assert "already rejected by bob at" in html
    assert "Rejected</strong>" in html
    assert 'by <strong class="actor">bob</strong>' in html
    assert "Reason: fraud suspected" in html
    interaction.refresh_from_db()
    assert interaction.response == {"approved": False, "reason": "fraud suspected"}
    assert interaction.responded_by == "bob"
    assert Event.objects.filter(run_id=interaction.run_id, actor="approver").count() == 0


def test_it_takes_the_same_answer_twice_without_harm(world, as_user):
    interaction = world.pending(world.run("waiting"))
    respond(interaction.pk, {"approved": True, "reason": ""}, actor="bob")
    response = as_user("approver").post(url(interaction), {"decision": "approve"}, **htmx())
    assert response.status_code == 200
    assert "Already answered by bob, the same way: nothing changed." in response.content.decode()
    assert (
        Event.objects.filter(run_id=interaction.run_id, kind=EventKind.APPROVAL_GRANTED).count()
        == 1
    )


@pytest.mark.parametrize("headers", [{}, htmx()])
def test_it_refuses_to_answer_for_a_cancelled_run(world, as_user, headers):
    run = world.run("waiting")
    interaction = world.pending(run)
    cancel(run.pk, actor="bob")
    response = as_user("approver").post(url(interaction), {"decision": "approve"}, **headers)
    assert response.status_code == 409
    html = response.content.decode()
    assert "was closed: its run was cancelled" in html
    interaction.refresh_from_db()
    assert interaction.status == InteractionStatus.CANCELLED
    assert Run.objects.get(pk=run.pk).status == RunStatus.CANCELLED


def test_it_answers_404_for_an_unknown_interaction(db, as_user):
    response = as_user("approver").post(
        "/interactions/00000000-0000-0000-0000-000000000000/respond/", {"decision": "approve"}
    )
    assert response.status_code == 404


def test_it_refuses_a_get_on_the_action(world, as_user):
    interaction = world.pending(world.run("waiting"))
    assert as_user("approver").get(url(interaction)).status_code == 405
    assert unchanged(interaction)
