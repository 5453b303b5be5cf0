"""Retry, retry now and cancel, with the runtime's rules and their messages."""

from __future__ import annotations

import pytest

from runtime import submit
from runtime.models import Event, EventKind, Run, RunStatus
from tests.console.conftest import htmx


def test_it_retries_a_failed_run(world, as_user):
    run = world.run("failed")
    response = as_user("operator").post(f"/runs/{run.pk}/retry/")
    assert response.status_code == 302
    assert response["Location"] == f"/runs/{run.pk}/"
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
    assert Event.objects.get(run=run, kind=EventKind.RETRIED).actor == "operator"


def test_it_retries_in_place_with_htmx(world, as_user):
    run = world.run("failed")
    response = as_user("operator").post(f"/runs/{run.pk}/retry/", **htmx())
    assert response.status_code == 200
    html = response.content.decode()
    assert html.startswith('<section id="run-header"')
    assert "Queued for another attempt." in html
    # The rest of the page follows out of band, so the timeline shows the retry at once.
    assert '<section id="run-timeline" class="card timeline" hx-swap-oob="true"' in html
    assert '<span class="actor">operator</span>' in html
    assert 'id="run-operations"' in html
    assert 'id="run-transcript"' in html


def test_it_retries_a_waiting_retry_now(world, as_user):
    run = world.run("retry_wait")
    html = as_user("operator").get(f"/runs/{run.pk}/").content.decode()
    assert "Retry now" in html
    assert "after attempt 1 of 3" in html
    assert "data-countdown" in html
    response = as_user("operator").post(f"/runs/{run.pk}/retry/", **htmx())
    assert response.status_code == 200
    assert "Retrying now." in response.content.decode()
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
    assert run.next_attempt_at is None
    assert Event.objects.get(run=run, kind=EventKind.RETRIED_NOW).actor == "operator"


@pytest.mark.parametrize("headers", [{}, htmx()])
def test_it_refuses_to_retry_a_completed_run(world, as_user, headers):
    run = world.run("completed")
    response = as_user("operator").post(f"/runs/{run.pk}/retry/", **headers)
    assert response.status_code == 409
    assert "a completed run cannot be retried" in response.content.decode()
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    assert not Event.objects.filter(run=run, kind=EventKind.RETRIED).exists()


def test_it_refuses_to_retry_a_run_blocked_on_an_uncertain_operation(world, as_user):
    run = world.run("blocked")
    response = as_user("operator").post(f"/runs/{run.pk}/retry/")
    assert response.status_code == 409
    assert "reconcile it with the verified result, or cancel the run" in response.content.decode()
    assert Run.objects.get(pk=run.pk).status == RunStatus.NEEDS_ATTENTION


def test_it_refuses_to_retry_once_a_later_run_advanced_the_session(world, as_user):
    run = world.run("failed")
    submit("broken", "next message", actor="alice", session=run.session_id)
    response = as_user("operator").post(f"/runs/{run.pk}/retry/", **htmx())
    assert response.status_code == 409
    assert "has advanced the session since this one failed" in response.content.decode()
    assert Run.objects.get(pk=run.pk).status == RunStatus.FAILED


@pytest.mark.parametrize("headers", [{}, htmx()])
def test_it_cancels_with_a_reason(world, as_user, headers):
    run = world.run("waiting")
    response = as_user("operator").post(
        f"/runs/{run.pk}/cancel/", {"reason": "customer withdrew"}, **headers
    )
    assert response.status_code == (200 if headers else 302)
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    event = Event.objects.get(run=run, kind=EventKind.CANCELLED)
    assert event.actor == "operator"
    assert event.data["reason"] == "customer withdrew"


def test_it_cancels_without_a_reason(world, as_user):
    run = world.run("retry_wait")
    assert as_user("operator").post(f"/runs/{run.pk}/cancel/").status_code == 302
    assert Run.objects.get(pk=run.pk).status == RunStatus.CANCELLED


@pytest.mark.parametrize("headers", [{}, htmx()])
def test_it_refuses_to_cancel_a_finished_run(world, as_user, headers):
    run = world.run("completed")
    response = as_user("operator").post(f"/runs/{run.pk}/cancel/", {"reason": "x"}, **headers)
    assert response.status_code == 409
    assert "only unfinished runs can be cancelled" in response.content.decode()
    assert Run.objects.get(pk=run.pk).status == RunStatus.COMPLETED
    assert not Event.objects.filter(run=run, kind=EventKind.CANCELLED).exists()


def test_it_refuses_a_cancel_reason_with_a_nul_character(world, as_user):
    run = world.run("waiting")
    response = as_user("operator").post(f"/runs/{run.pk}/cancel/", {"reason": "a\x00b"})
    assert response.status_code == 400
    assert "Null characters are not allowed." in response.content.decode()
    assert Run.objects.get(pk=run.pk).status == RunStatus.WAITING


@pytest.mark.parametrize("action", ["retry", "cancel"])
def test_it_answers_404_for_an_unknown_run(db, as_user, action):
    response = as_user("operator").post(f"/runs/00000000-0000-0000-0000-000000000000/{action}/")
    assert response.status_code == 404
