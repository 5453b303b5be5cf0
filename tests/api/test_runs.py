"""Submit (with idempotency keys), read a run, list runs with filters and keyset pages."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from agentops.api.models import IdempotencyKey
from runtime import clock
from runtime.models import Event, EventKind, Run, Session
from tests.api.conftest import Api, error_of, make_account, make_token

KEY = {"Idempotency-Key": "order-7-refund"}


def test_submit_starts_a_run_recorded_under_the_accounts_name(world: Any, api: Api) -> None:
    response = api.post("/runs", {"agent": "chatty", "message": "hello"})
    assert response.status_code == 201
    run = Run.objects.get(pk=response.json()["id"])
    assert (run.agent, run.input, run.status) == ("chatty", "hello", "queued")
    assert response.json()["session"] == str(run.session_id)
    assert Event.objects.get(run=run, kind=EventKind.SUBMITTED).actor == "api:ci"


def test_submit_continues_a_session_and_refuses_a_busy_one(world: Any, api: Api) -> None:
    first = world.run("completed")
    response = api.post(
        "/runs", {"agent": "chatty", "message": "again", "session": str(first.session_id)}
    )
    assert response.status_code == 201
    assert response.json()["seq"] == 2
    busy = api.post(
        "/runs", {"agent": "chatty", "message": "more", "session": str(first.session_id)}
    )
    assert busy.status_code == 409
    assert error_of(busy) == "session_busy"
    assert Run.objects.filter(session_id=first.session_id).count() == 2


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"agent": "nobody", "message": "hi"}, 404, "not_found"),
        ({"agent": "chatty", "message": "hi", "version": "9"}, 404, "not_found"),
        ({"agent": "chatty", "message": "   "}, 422, "invalid_input"),
        ({"agent": "chatty", "message": "a\x00b"}, 422, "invalid_input"),
        ({"agent": "chatty"}, 422, "invalid_request"),
        ({"agent": "chatty", "message": 5}, 422, "invalid_request"),
        ({"agent": "chatty", "message": "hi", "extra": 1}, 422, "invalid_request"),
        ({"agent": "chatty", "message": "hi", "session": "nope"}, 422, "invalid_request"),
        ({"agent": "chatty", "message": "hi", "session": str(uuid.UUID(int=3))}, 404, "not_found"),
        ([1, 2], 422, "invalid_request"),
    ],
)
def test_submit_refuses_bad_input_and_changes_nothing(
    world: Any, api: Api, body: Any, status: int, code: str
) -> None:
    response = api.post("/runs", body, **KEY)
    assert response.status_code == status, response.json()
    assert error_of(response) == code
    assert Run.objects.count() == 0
    assert Session.objects.count() == 0
    # A refused submit does not use up its key.
    assert not IdempotencyKey.objects.exists()


def test_submit_refuses_a_body_that_is_not_json(world: Any, api: Api) -> None:
    response = api.client.post(
        "/api/v1/runs", "{nope", content_type="application/json", headers=api._headers(None)
    )
    assert response.status_code == 400
    assert error_of(response) == "malformed_body"
    assert Run.objects.count() == 0


def test_the_same_key_and_body_return_the_same_run(world: Any, api: Api) -> None:
    body = {"agent": "chatty", "message": "refund order 7"}
    first = api.post("/runs", body, **KEY)
    again = api.post("/runs", {"message": "refund order 7", "agent": "chatty"}, **KEY)
    assert first.status_code == 201
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert Run.objects.count() == 1


def test_the_same_key_with_another_body_is_a_conflict(world: Any, api: Api) -> None:
    api.post("/runs", {"agent": "chatty", "message": "refund order 7"}, **KEY)
    response = api.post("/runs", {"agent": "chatty", "message": "refund order 8"}, **KEY)
    assert response.status_code == 409
    assert error_of(response) == "idempotency_conflict"
    assert Run.objects.count() == 1


def test_keys_belong_to_their_account(world: Any, api: Api) -> None:
    other = Api(make_token(make_account("billing")))
    body = {"agent": "chatty", "message": "hi"}
    first = api.post("/runs", body, **KEY).json()["id"]
    second = other.post("/runs", body, **KEY).json()["id"]
    assert first != second


@pytest.mark.parametrize("key", ["", "x" * 256, "é-key", "tab\there"])
def test_it_refuses_an_unusable_key(world: Any, api: Api, key: str) -> None:
    response = api.post("/runs", {"agent": "chatty", "message": "hi"}, **{"Idempotency-Key": key})
    assert response.status_code == 400
    assert error_of(response) == "invalid_idempotency_key"
    assert Run.objects.count() == 0


def test_get_shows_operations_and_the_pending_interaction(world: Any, api: Api) -> None:
    run = world.run("waiting")
    body = api.get(f"/runs/{run.pk}").json()
    assert body["status"] == "waiting"
    assert [op["key"] for op in body["operations"]] == ["step-1/model"]
    assert body["pending"]["id"] == str(world.pending(run).pk)
    assert body["pending"]["payload"] == {"arguments": {"order_id": "A1", "amount_cents": 500}}
    blocked = api.get(f"/runs/{world.run('blocked').pk}").json()
    assert blocked["blocked_operation"] == "step-1/tool/toolu_01_0"
    assert "reconcile" in blocked["retry_problem"]
    assert blocked["pending"] is None


def test_get_of_an_unknown_or_malformed_id(world: Any, api: Api) -> None:
    assert error_of(api.get(f"/runs/{uuid.UUID(int=9)}")) == "not_found"
    response = api.get("/runs/not-a-uuid")
    assert response.status_code == 422
    assert error_of(response) == "invalid_request"


def test_list_filters_by_status_agent_version_and_session(world: Any, api: Api) -> None:
    waiting, failed, done = world.run("waiting"), world.run("failed"), world.run("completed")

    def ids(**params: Any) -> list[str]:
        response = api.get("/runs", params)
        assert response.status_code == 200, response.json()
        return [item["id"] for item in response.json()["items"]]

    assert ids() == [str(done.pk), str(failed.pk), str(waiting.pk)]
    assert ids(status="failed") == [str(failed.pk)]
    assert ids(agent="approvals") == [str(waiting.pk)]
    assert ids(agent="chatty", version="1") == [str(done.pk)]
    assert ids(version="2") == []
    assert ids(session=str(failed.session_id)) == [str(failed.pk)]
    response = api.get("/runs", {"status": "lost"})
    assert response.status_code == 422
    assert error_of(response) == "invalid_request"


def test_list_pages_with_an_opaque_cursor_without_gaps_or_repeats(world: Any, api: Api) -> None:
    with clock.frozen():  # equal timestamps: the id settles the order
        made = [world.run("queued", message=f"m{i}") for i in range(5)]
    made += [world.run("queued", message=f"n{i}") for i in range(2)]
    seen: list[str] = []
    cursor = None
    while True:
        page = api.get("/runs", {"limit": 2, **({"cursor": cursor} if cursor else {})}).json()
        assert len(page["items"]) <= 2
        seen += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert "." not in cursor  # opaque: not the raw timestamp and id
    assert sorted(seen) == sorted(str(run.pk) for run in made)
    assert len(seen) == len(set(seen)) == 7
    newest_first = sorted(made, key=lambda r: (r.created_at, r.pk.hex), reverse=True)
    assert seen == [str(run.pk) for run in newest_first]


@pytest.mark.parametrize("cursor", ["garbage", "!!!", "MTIz", "eHl6LmFiYw"])
def test_list_refuses_a_cursor_it_did_not_make(world: Any, api: Api, cursor: str) -> None:
    response = api.get("/runs", {"cursor": cursor})
    assert response.status_code == 400
    assert error_of(response) == "invalid_cursor"


@pytest.mark.parametrize("limit", [0, -1, 201, "x"])
def test_list_refuses_a_limit_out_of_range(world: Any, api: Api, limit: Any) -> None:
    response = api.get("/runs", {"limit": limit})
    assert response.status_code == 422
    assert error_of(response) == "invalid_request"
