"""Respond, resolve, retry and cancel through the API: the runtime's verbs, audited by name."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from runtime.models import Event, EventKind, Interaction, Operation, Run
from runtime.testing import run_until_idle
from tests.api.conftest import Api, error_of


def test_list_pending_interactions_oldest_first_by_kind(world: Any, api: Api) -> None:
    approval = world.pending(world.run("waiting"))
    question = world.pending(world.run("question"))
    world.run("completed")
    items = api.get("/interactions").json()["items"]
    assert [item["id"] for item in items] == [str(approval.pk), str(question.pk)]
    only = api.get("/interactions", {"kind": "question"}).json()["items"]
    assert [item["id"] for item in only] == [str(question.pk)]
    page = api.get("/interactions", {"limit": 1}).json()
    rest = api.get("/interactions", {"limit": 1, "cursor": page["next_cursor"]}).json()
    assert [page["items"][0]["id"], rest["items"][0]["id"]] == [str(approval.pk), str(question.pk)]
    assert rest["next_cursor"] is None


def test_approve_continues_the_run_as_the_account(world: Any, api: Api) -> None:
    run = world.run("waiting")
    interaction = world.pending(run)
    response = api.post(f"/interactions/{interaction.pk}/respond", {"approved": True})
    assert response.status_code == 200
    assert response.json()["status"] == "answered"
    assert response.json()["responded_by"] == "api:ci"
    event = Event.objects.get(run=run, kind=EventKind.APPROVAL_GRANTED)
    assert event.actor == "api:ci"
    assert run_until_idle(run.pk).status == "completed"


def test_q7_reject_with_a_reason_the_agent_sees(world: Any, api: Api) -> None:
    run = world.run("waiting")
    interaction = world.pending(run)
    response = api.post(
        f"/interactions/{interaction.pk}/respond", {"approved": False, "reason": "over limit"}
    )
    assert response.status_code == 200
    assert Event.objects.get(run=run, kind=EventKind.APPROVAL_REJECTED).actor == "api:ci"
    run_until_idle(run.pk)
    op = Operation.objects.get(run=run, key=interaction.operation_key)
    assert "over limit" in str(op.result)


def test_answer_a_question(world: Any, api: Api) -> None:
    run = world.run("question")
    interaction = world.pending(run)
    response = api.post(f"/interactions/{interaction.pk}/respond", {"answer": "order A1"})
    assert response.status_code == 200
    assert Event.objects.get(run=run, kind=EventKind.QUESTION_ANSWERED).data["response"] == {
        "answer": "order A1"
    }


@pytest.mark.parametrize(
    "body",
    [
        {"approved": False},
        {"approved": False, "reason": "  "},
        {"answer": "an approval is not a question"},
        {},
        {"approved": "yes"},
        {"approved": True, "extra": 1},
    ],
)
def test_a_bad_response_is_refused_and_changes_nothing(world: Any, api: Api, body: Any) -> None:
    run = world.run("waiting")
    interaction = world.pending(run)
    response = api.post(f"/interactions/{interaction.pk}/respond", body)
    assert response.status_code == 422
    assert error_of(response) in {"invalid_input", "invalid_request"}
    interaction.refresh_from_db()
    assert interaction.status == "pending"
    assert Run.objects.get(pk=run.pk).status == "waiting"


def test_q5_a_conflicting_response_names_who_answered(world: Any, api: Api) -> None:
    interaction = world.pending(world.run("waiting"))
    api.post(f"/interactions/{interaction.pk}/respond", {"approved": True})
    same = api.post(f"/interactions/{interaction.pk}/respond", {"approved": True})
    assert same.status_code == 200
    other = api.post(f"/interactions/{interaction.pk}/respond", {"approved": False, "reason": "no"})
    assert other.status_code == 409
    assert error_of(other) == "interaction_conflict"
    assert "api:ci" in other.json()["error"]["message"]
    assert Interaction.objects.get(pk=interaction.pk).response == {"approved": True, "reason": ""}


def test_r3_resolve_with_evidence_as_the_account(world: Any, api: Api) -> None:
    run = world.run("blocked")
    key = run.blocked_operation
    body = {
        "operation_key": key,
        "result": {"receipt_id": "rcpt-9"},
        "evidence": "payments: rcpt-9",
    }
    response = api.post(f"/runs/{run.pk}/resolve", body)
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "completed"
    assert response.json()["operation_id"] == f"{run.pk}:{key}"
    event = Event.objects.get(run=run, kind=EventKind.OPERATION_RESOLVED)
    assert (event.actor, event.data["evidence"]) == ("api:ci", "payments: rcpt-9")
    again = api.post(f"/runs/{run.pk}/resolve", body)
    assert again.status_code == 409
    assert error_of(again) == "not_blocked"


@pytest.mark.parametrize(
    ("outcome", "status", "is_error"),
    [("not_run_again", "not_run", False), ("not_run_tell_model", "completed", True)],
)
def test_r4_resolve_a_call_that_did_not_happen(
    world: Any, api: Api, outcome: str, status: str, is_error: bool
) -> None:
    run = world.run("blocked")
    body = {"operation_key": run.blocked_operation, "outcome": outcome, "evidence": "no charge"}
    response = api.post(f"/runs/{run.pk}/resolve", body)
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == status
    assert response.json()["is_error"] is is_error
    event = Event.objects.get(run=run, kind=EventKind.OPERATION_RESOLVED)
    assert (event.actor, event.data["outcome"]) == ("api:ci", outcome)
    assert Run.objects.get(pk=run.pk).status == "queued"


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"outcome": "maybe", "evidence": "x"}, 422, "invalid_input"),
        (
            {"outcome": "not_run_again", "result": {"receipt_id": "r"}, "evidence": "x"},
            422,
            "invalid_input",
        ),
        ({"result": {"receipt_id": 5}, "evidence": "x"}, 422, "invalid_input"),
        ({"result": {"receipt_id": "r"}, "evidence": " "}, 422, "invalid_input"),
        ({"result": {"receipt_id": "r"}}, 422, "invalid_request"),
        ({"result": {"receipt_id": "r"}, "evidence": "x", "key": "other"}, 409, "not_blocked"),
    ],
)
def test_r2_a_bad_resolve_is_refused_and_changes_nothing(
    world: Any, api: Api, body: dict[str, Any], status: int, code: str
) -> None:
    run = world.run("blocked")
    key = body.pop("key", run.blocked_operation)
    body = {**body, "operation_key": key}
    response = api.post(f"/runs/{run.pk}/resolve", body)
    assert response.status_code == status, response.json()
    assert error_of(response) == code
    run.refresh_from_db()
    assert run.status == "needs_attention"
    assert not Event.objects.filter(run=run, kind=EventKind.OPERATION_RESOLVED).exists()


def test_retry_a_failed_run_and_t2_never_a_manual_block(world: Any, api: Api) -> None:
    failed = world.run("failed")
    response = api.post(f"/runs/{failed.pk}/retry")
    assert response.status_code == 200
    assert response.json()["status"] == "queued"
    assert Event.objects.get(run=failed, kind=EventKind.RETRIED).actor == "api:ci"
    blocked = world.run("blocked")
    refused = api.post(f"/runs/{blocked.pk}/retry")
    assert refused.status_code == 409
    assert error_of(refused) == "retry_rejected"
    assert Run.objects.get(pk=blocked.pk).status == "needs_attention"


def test_cancel_closes_the_pending_interaction(world: Any, api: Api) -> None:
    run = world.run("waiting")
    response = api.post(f"/runs/{run.pk}/cancel", {"reason": "duplicate ticket"})
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    event = Event.objects.get(run=run, kind=EventKind.CANCELLED)
    assert (event.actor, event.data["reason"]) == ("api:ci", "duplicate ticket")
    closed = api.post(
        f"/interactions/{Interaction.objects.get(run=run).pk}/respond", {"approved": True}
    )
    assert error_of(closed) == "interaction_closed"
    again = api.post(f"/runs/{run.pk}/cancel", {})
    assert again.status_code == 409
    assert error_of(again) == "invalid_transition"


def test_actions_on_unknown_ids_are_404(world: Any, api: Api) -> None:
    nowhere = uuid.UUID(int=7)
    assert error_of(api.post(f"/runs/{nowhere}/retry")) == "not_found"
    assert error_of(api.post(f"/runs/{nowhere}/cancel", {})) == "not_found"
    assert error_of(api.post(f"/interactions/{nowhere}/respond", {"approved": True})) == "not_found"
