"""Pause, resume, fork and bulk jobs from the console: real forms, htmx in place, the rules."""

from __future__ import annotations

import pytest

from runtime.models import BulkJob, Event, EventKind, Run, RunStatus
from tests.console.conftest import htmx


def test_it_pauses_and_resumes_a_run_from_its_page(world, as_user):
    run = world.run("queued")
    client = as_user("operator")
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="run-surgery"' in page
    assert f'action="/runs/{run.pk}/pause/"' in page
    response = client.post(f"/runs/{run.pk}/pause/", {"reason": "checking the prompt"})
    assert (response.status_code, response["Location"]) == (302, f"/runs/{run.pk}/")
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED
    paused = Event.objects.get(run=run, kind=EventKind.PAUSED)
    assert (paused.actor, paused.data["reason"]) == ("operator", "checking the prompt")
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "Paused</strong> by operator" in page
    response = client.post(f"/runs/{run.pk}/resume/", **htmx())
    assert response.status_code == 200
    html = response.content.decode()
    assert html.startswith('<section id="run-surgery"')
    assert "Resumed." in html
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED


def test_it_refuses_to_pause_a_finished_run_in_place(world, as_user):
    run = world.run("completed")
    response = as_user("operator").post(f"/runs/{run.pk}/pause/", **htmx())
    assert response.status_code == 409
    assert "only unfinished runs can be paused" in response.content.decode()
    assert not Event.objects.filter(run=run, kind=EventKind.PAUSED).exists()


@pytest.mark.parametrize("in_place", [True, False], ids=["htmx", "form"])
def test_it_refuses_a_pause_reason_with_a_null_character_and_changes_nothing(
    world, as_user, in_place
):
    # Found by the fuzzing at 2,000 examples: Django's form refuses the NUL, and the view went on
    # to read a reason the form never cleaned (a 500).
    run = world.run("queued")
    before = list(Event.objects.filter(run=run).order_by("pk").values_list("pk", flat=True))
    response = as_user("operator").post(
        f"/runs/{run.pk}/pause/", {"reason": "a\x00b"}, **(htmx() if in_place else {})
    )
    if in_place:
        assert response.status_code == 400
        assert "Not paused: Null characters are not allowed." in response.content.decode()
    else:
        assert (response.status_code, response["Location"]) == (302, f"/runs/{run.pk}/")
    run.refresh_from_db()
    assert (run.status, run.pause_requested_by) == (RunStatus.QUEUED, "")
    assert list(Event.objects.filter(run=run).order_by("pk").values_list("pk", flat=True)) == before


@pytest.mark.parametrize("persona", ["viewer", "approver"])
def test_only_operators_pause_fork_and_act_in_bulk(world, as_user, persona):
    run = world.run("blocked")
    client = as_user(persona)
    assert client.post(f"/runs/{run.pk}/pause/").status_code == 403
    assert client.post(f"/runs/{run.pk}/fork/start/", {"at": "x"}).status_code == 403
    assert client.post("/runs/bulk/start/", {"action": "cancel", "key": "k"}).status_code == 403
    run.refresh_from_db()
    assert run.status == RunStatus.NEEDS_ATTENTION
    assert not Run.objects.filter(parent=run).exists()
    assert (
        'action="/runs/'
        not in client.get(f"/runs/{run.pk}/")
        .content.decode()
        .split('id="run-surgery"')[1]
        .split("</section>")[0]
    )


def test_the_fork_page_previews_and_refuses_an_unacknowledged_manual_rerun(world, as_user):
    run = world.run("blocked")
    key = run.blocked_operation
    client = as_user("operator")
    page = client.get(f"/runs/{run.pk}/fork/", {"at": key}).content.decode()
    assert f'data-plan="rerun" data-key="{key}"' in page
    assert "NOT safe to repeat" in page
    assert f'name="acknowledge" value="{key}"' in page

    response = client.post(f"/runs/{run.pk}/fork/start/", {"at": key, "start": "1"}, **htmx())
    assert response.status_code == 409
    assert "acknowledge each" in response.content.decode()
    assert not Run.objects.filter(parent=run).exists()

    response = client.post(
        f"/runs/{run.pk}/fork/start/", {"at": key, "start": "1", "acknowledge": [key]}
    )
    child = Run.objects.get(parent=run)
    assert (response.status_code, response["Location"]) == (302, f"/runs/{child.pk}/")
    child_page = client.get(f"/runs/{child.pk}/").content.decode()
    assert f'href="/runs/{run.pk}/"' in child_page
    assert "A fork of run" in child_page
    assert f'href="/runs/{child.pk}/"' in client.get(f"/runs/{run.pk}/").content.decode()


def test_the_fork_preview_with_edited_arguments_checks_them(world, as_user):
    run = world.run("blocked")
    key = run.blocked_operation
    response = as_user("operator").post(
        f"/runs/{run.pk}/fork/start/",
        {"at": key, "preview": "1", "input": '{"order_id": 5}'},
        **htmx(),
    )
    assert response.status_code == 400
    assert "invalid arguments for charge" in response.content.decode()
    response = as_user("operator").post(
        f"/runs/{run.pk}/fork/start/", {"at": key, "preview": "1", "input": "{not json"}, **htmx()
    )
    assert response.status_code == 400
    assert not Run.objects.filter(parent=run).exists()


def test_a_bulk_job_from_the_runs_list_with_its_progress(world, as_user):
    runs = [world.run("queued") for _ in range(2)]
    world.run("completed")
    client = as_user("operator")
    assert "/runs/bulk/?" in client.get("/runs/").content.decode()
    page = client.get("/runs/bulk/", {"agent": "chatty"}).content.decode()
    assert "<strong>3</strong> runs match" in page
    assert "Pause 2 runs" in page
    form = {"action": "pause", "key": "k-1", "agent": "chatty", "reason": "outage"}
    response = client.post("/runs/bulk/start/", form)
    job = BulkJob.objects.get()
    assert (response.status_code, response["Location"]) == (302, f"/bulk/{job.pk}/")
    again = client.post("/runs/bulk/start/", form)
    assert again["Location"] == f"/bulk/{job.pk}/"  # submitted twice: one job
    assert BulkJob.objects.count() == 1
    progress = client.get(f"/bulk/{job.pk}/", **htmx()).content.decode()
    assert progress.startswith('<section id="bulk-job"')
    assert 'hx-trigger="every 1s"' in progress
    assert 'max="2" value="0"' in progress
    response = client.post(f"/bulk/{job.pk}/stop/", **htmx())
    assert response.status_code == 200
    stopped = response.content.decode()
    assert "every 1s" not in stopped  # a finished job stops polling
    assert "Stopped by" in stopped
    assert all(Run.objects.get(pk=r.pk).status == RunStatus.QUEUED for r in runs)


def test_a_bulk_filter_with_bad_input_says_so(world, as_user):
    response = as_user("operator").get("/runs/bulk/", {"status": "sleeping"})
    assert response.status_code == 400
    assert "sleeping" in response.content.decode()
