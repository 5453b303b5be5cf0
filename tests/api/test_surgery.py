"""Pause, resume, fork and bulk jobs through the API: the runtime's verbs, scoped and audited."""

from __future__ import annotations

from typing import Any

from runtime.models import BulkJob, Event, EventKind, Run
from tests.api.conftest import Api, error_of, make_token


def test_pause_and_resume_a_run_as_the_account(world: Any, api: Api) -> None:
    run = world.run("queued")
    response = api.post(f"/runs/{run.pk}/pause", {"reason": "outage"})
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["paused_from"], body["pause_requested_by"]) == (
        "paused",
        "queued",
        "api:ci",
    )
    assert Event.objects.get(run=run, kind=EventKind.PAUSED).actor == "api:ci"
    response = api.post(f"/runs/{run.pk}/resume")
    assert (response.status_code, response.json()["status"]) == (200, "queued")


def test_pause_is_refused_for_a_finished_run_and_changes_nothing(world: Any, api: Api) -> None:
    run = world.run("completed")
    response = api.post(f"/runs/{run.pk}/pause", {})
    assert (response.status_code, error_of(response)) == (409, "invalid_transition")
    assert not Event.objects.filter(run=run, kind=EventKind.PAUSED).exists()


def test_pause_needs_its_scope(world: Any, api: Api, ci: Any) -> None:
    run = world.run("queued")
    reader = Api(make_token(ci, ["read"]))
    response = reader.post(f"/runs/{run.pk}/pause", {})
    assert (response.status_code, error_of(response)) == (403, "scope_missing")
    assert Run.objects.get(pk=run.pk).status == "queued"


def test_fork_preview_then_fork_with_the_acknowledgement(world: Any, api: Api) -> None:
    run = world.run("blocked")
    key = run.blocked_operation
    preview = api.post(f"/runs/{run.pk}/fork/preview", {"operation_key": key})
    assert preview.status_code == 200
    shown = preview.json()
    assert shown["acknowledgements_needed"] == [key]
    assert shown["calls"][0]["policy"] == "manual"
    assert not shown["calls"][0]["safe"]

    refused = api.post(f"/runs/{run.pk}/fork", {"operation_key": key})
    assert (refused.status_code, error_of(refused)) == (409, "fork_refused")
    assert not Run.objects.filter(parent=run).exists()

    forked = api.post(f"/runs/{run.pk}/fork", {"operation_key": key, "acknowledge": [key]})
    assert forked.status_code == 201
    assert (forked.json()["parent"], forked.json()["fork_point"]) == (str(run.pk), key)
    assert Event.objects.get(run_id=forked.json()["id"], kind=EventKind.FORKED).actor == "api:ci"


def test_fork_with_arguments_that_fail_the_schema_is_refused(world: Any, api: Api) -> None:
    run = world.run("blocked")
    response = api.post(
        f"/runs/{run.pk}/fork",
        {"operation_key": run.blocked_operation, "input": {"order_id": 5}},
    )
    assert (response.status_code, error_of(response)) == (422, "invalid_input")
    assert not Run.objects.filter(parent=run).exists()


def test_a_bulk_job_by_filter_is_idempotent_by_key_and_stoppable(world: Any, api: Api) -> None:
    runs = [world.run("queued") for _ in range(3)]
    world.run("completed")
    filters = {"status": ["queued", "completed"], "agent": "chatty"}
    preview = api.post("/bulk/preview", {"filters": filters}).json()
    assert preview["matched"] == 4
    assert (preview["actions"]["cancel"]["touch"], preview["actions"]["cancel"]["refused"]) == (
        3,
        1,
    )

    body = {"action": "cancel", "filters": filters, "reason": "bad prompt"}
    first = api.post("/bulk", body, **{"Idempotency-Key": "incident-7"})
    again = api.post("/bulk", body, **{"Idempotency-Key": "incident-7"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    assert first.json()["total"] == 3
    assert BulkJob.objects.count() == 1

    job_id = first.json()["id"]
    assert api.get(f"/bulk/{job_id}").json()["status"] == "running"
    stopped = api.post(f"/bulk/{job_id}/stop")
    assert (stopped.status_code, stopped.json()["status"]) == (200, "stopped")
    assert stopped.json()["stopped_by"] == "api:ci"
    assert all(Run.objects.get(pk=run.pk).status == "queued" for run in runs)
    assert api.post(f"/bulk/{job_id}/stop").status_code == 409


def test_a_bulk_job_with_a_bad_filter_is_refused(world: Any, api: Api) -> None:
    response = api.post("/bulk", {"action": "cancel", "filters": {"status": ["sleeping"]}})
    assert (response.status_code, error_of(response)) == (422, "invalid_request")
    response = api.post("/bulk", {"action": "explode", "filters": {}})
    assert response.status_code == 422
    assert not BulkJob.objects.exists()
