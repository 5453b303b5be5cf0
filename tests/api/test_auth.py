"""Tokens, scopes and permissions: who may call what, and what a token leaves behind."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest
from django.contrib.auth.models import User

from agentops.api.models import ApiToken, Scope, ServiceAccount, token_digest
from runtime import clock
from runtime.models import Event, Run
from tests.api.conftest import ALL_SCOPES, Api, error_of, make_account, make_token

NOWHERE = uuid.UUID(int=1)
# Every endpoint, the scope it needs, and a request that changes nothing when allowed (its
# target does not exist): allowed answers 404 or 422, refused answers 403.
CALLS: list[tuple[str, str, str, Any]] = [
    (Scope.READ, "GET", "/runs", None),
    (Scope.READ, "GET", f"/runs/{NOWHERE}", None),
    (Scope.READ, "GET", "/interactions", None),
    (Scope.SUBMIT, "POST", "/runs", {"agent": "nobody", "message": "hi"}),
    (Scope.RESPOND, "POST", f"/interactions/{NOWHERE}/respond", {"approved": True}),
    (
        Scope.RESOLVE,
        "POST",
        f"/runs/{NOWHERE}/resolve",
        {"operation_key": "k", "result": {}, "evidence": "e"},
    ),
    (Scope.RETRY, "POST", f"/runs/{NOWHERE}/retry", None),
    (Scope.CANCEL, "POST", f"/runs/{NOWHERE}/cancel", {}),
]


def send(client: Api, method: str, path: str, body: Any) -> Any:
    return client.get(path) if method == "GET" else client.post(path, body)


@pytest.mark.parametrize("scope", ALL_SCOPES)
def test_it_allows_each_scope_exactly_its_verbs(ci: ServiceAccount, scope: str) -> None:
    client = Api(make_token(ci, [scope]))
    for needed, method, path, body in CALLS:
        response = send(client, method, path, body)
        if needed == scope:
            assert response.status_code in (200, 404), (path, response.json())
        else:
            assert response.status_code == 403, (path, response.json())
            assert error_of(response) == "scope_missing"
    assert Run.objects.count() == 0


def test_it_refuses_a_scope_the_accounts_permissions_do_not_cover(db: None) -> None:
    viewer = make_account("dashboard", groups=("viewers",))
    client = Api(make_token(viewer))  # every scope, but the account may only look
    for needed, method, path, body in CALLS:
        response = send(client, method, path, body)
        if needed == Scope.READ:
            assert response.status_code in (200, 404)
        else:
            assert response.status_code == 403
            assert error_of(response) == "permission_denied"
            assert "dashboard" in response.json()["error"]["message"]


def test_an_approver_account_may_respond_but_not_resolve_retry_or_cancel(world: Any) -> None:
    approver = make_account("pager", groups=("approvers",))
    client = Api(make_token(approver))
    run = world.run("blocked")
    assert error_of(client.post(f"/runs/{run.pk}/retry")) == "permission_denied"
    assert error_of(client.post(f"/runs/{run.pk}/cancel", {})) == "permission_denied"
    resolve = {
        "operation_key": run.blocked_operation,
        "result": {"receipt_id": "r"},
        "evidence": "x",
    }
    assert error_of(client.post(f"/runs/{run.pk}/resolve", resolve)) == "permission_denied"
    run.refresh_from_db()
    assert run.status == "needs_attention"
    waiting = world.run("waiting")
    interaction = world.pending(waiting)
    response = client.post(f"/interactions/{interaction.pk}/respond", {"approved": True})
    assert response.status_code == 200


@pytest.mark.parametrize(
    "authorization",
    ["", "Bearer", "Bearer ", "Bearer aot_not-a-token", "Basic dXNlcjpwYXNz", "aot_x"],
)
def test_it_refuses_missing_and_unknown_tokens_with_401(api: Api, authorization: str) -> None:
    client = Api(None)
    headers = {"Authorization": authorization} if authorization else {}
    response = client.get("/runs", **headers)
    assert response.status_code == 401
    assert error_of(response) == "unauthenticated"
    assert response["WWW-Authenticate"].startswith("Bearer")
    response = client.post("/runs", {"agent": "chatty", "message": "hi"}, **headers)
    assert response.status_code == 401
    assert Run.objects.count() == 0


def test_a_revoked_token_is_refused(ci: ServiceAccount) -> None:
    secret = make_token(ci)
    client = Api(secret)
    assert client.get("/runs").status_code == 200
    ApiToken.objects.filter(digest=token_digest(secret)).update(revoked_at=clock.now())
    response = client.get("/runs")
    assert response.status_code == 401
    assert error_of(response) == "unauthenticated"


def test_an_inactive_accounts_tokens_are_refused(ci: ServiceAccount) -> None:
    client = Api(make_token(ci))
    User.objects.filter(pk=ci.user_id).update(is_active=False)
    assert client.get("/runs").status_code == 401


def test_it_stores_only_a_digest_and_records_last_use(ci: ServiceAccount) -> None:
    secret = make_token(ci)
    token = ApiToken.objects.get()
    assert secret.startswith("aot_") and len(secret) > 40
    assert token.digest == token_digest(secret) != secret
    assert secret not in str(list(ApiToken.objects.values()))
    assert token.last_used_at is None
    Api(secret).get("/runs")
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_a_token_never_appears_in_logs_or_responses(
    world: Any, ci: ServiceAccount, caplog: pytest.LogCaptureFixture
) -> None:
    secret = make_token(ci)
    client = Api(secret)
    caplog.set_level(logging.DEBUG)
    run = world.run("waiting")
    bodies = [
        client.get("/runs"),
        client.get(f"/runs/{run.pk}"),
        client.get("/interactions"),
        client.post("/runs", {"agent": "chatty", "message": "hi"}),
        client.post("/runs", {"agent": "nobody", "message": "hi"}),
        client.post("/runs", "not an object"),
        client.post(f"/runs/{run.pk}/retry"),
        client.post(f"/interactions/{world.pending(run).pk}/respond", {"approved": "yes"}),
        client.get("/runs", {"cursor": secret}),
        Api(secret + "x").get("/runs"),
    ]
    assert {response.status_code for response in bodies} >= {200, 201, 401, 404, 409, 422, 400}
    for response in bodies:
        assert secret not in response.content.decode()
    assert secret not in caplog.text
    assert all(secret not in str(record.args) for record in caplog.records)
    events = Event.objects.values_list("data", flat=True)
    assert all(secret not in str(data) for data in events)
