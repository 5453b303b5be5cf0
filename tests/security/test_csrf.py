"""CSRF: every state-changing endpoint refuses a POST without a valid token; GETs change nothing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.security.conftest import everything

# endpoint -> (persona allowed to use it, its URL, what a real form posts)
ACTIONS = {
    "respond": ("approver", "/interactions/{approval}/respond/", {"decision": "approve"}),
    "answer": ("approver", "/interactions/{question}/respond/", {"answer": "order 7"}),
    "resolve": (
        "reconciler",
        "/runs/{blocked}/resolve/",
        {"operation_key": "{key}", "result": '{{"receipt_id": "r-1"}}', "evidence": "ledger"},
    ),
    "retry": ("operator", "/runs/{failed}/retry/", {}),
    "cancel": ("operator", "/runs/{waiting}/cancel/", {"reason": "not needed"}),
    "board retry": ("operator", "/versions/approvals/1/retry/", {}),
    "admin unregister": (
        "agent_admin",
        "/admin/agentops/agentversion/",
        {"action": "unregister", "_selected_action": "chatty:1"},
    ),
}


def fill(text: str, scene: dict[str, Any]) -> str:
    return text.format(
        approval=scene["approval"].pk,
        question=scene["question"].pk,
        blocked=scene["blocked"].pk,
        key=scene["blocked"].blocked_operation,
        failed=scene["failed"].pk,
        waiting=scene["waiting"].pk,
        to_cancel=scene["to_cancel"].pk,
        to_claim=scene["to_claim"].pk,
        to_pause=scene["to_pause"].pk,
    )


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("token", ["none", "forged"])
def test_it_refuses_every_action_without_a_valid_token(personas, scene, action, token):
    persona, url, data = ACTIONS[action]
    client = personas(persona, enforce_csrf_checks=True)
    client.get("/")  # the CSRF cookie, as a browser would hold it
    data = {name: fill(value, scene) for name, value in data.items()}
    headers = {}
    if token == "forged":
        data["csrfmiddlewaretoken"] = "x" * 64
        headers["HTTP_X_CSRFTOKEN"] = "y" * 64
    before = everything()
    response = client.post(fill(url, scene), data, **headers)
    assert response.status_code == 403
    assert everything() == before


@pytest.mark.parametrize("action", ACTIONS)
def test_the_same_actions_land_with_the_token(personas, scene, action):
    """The refusals above are the token's doing: with it, each action changes something."""
    persona, url, data = ACTIONS[action]
    client = personas(persona, enforce_csrf_checks=True)
    page = client.get("/admin/" if persona == "agent_admin" else "/")
    token = page.cookies["csrftoken"].value if "csrftoken" in page.cookies else None
    token = token or client.cookies["csrftoken"].value
    data = {name: fill(value, scene) for name, value in data.items()}
    before = everything()
    response = client.post(fill(url, scene), data, HTTP_X_CSRFTOKEN=token)
    assert response.status_code in (200, 302)
    if action != "board retry":  # no version-blocked runs here: a retry of none changes nothing
        assert everything() != before


def test_login_and_logout_need_the_token(personas, users):
    client = personas("operator", enforce_csrf_checks=True)
    assert client.post("/accounts/logout/").status_code == 403
    assert client.get("/").status_code == 200  # still logged in
    anonymous = personas("anonymous", enforce_csrf_checks=True)
    users["operator"].set_password("correct horse battery")
    users["operator"].save()
    response = anonymous.post(
        "/accounts/login/", {"username": "operator", "password": "correct horse battery"}
    )
    assert response.status_code == 403
    assert "_auth_user_id" not in anonymous.session


GETS = [
    "/",
    "/runs/",
    "/runs/?status=waiting&q=refund",
    "/runs/{waiting}/",
    "/runs/{blocked}/reconcile/",
    "/interactions/{approval}/",
    "/audit/",
    "/versions/",
    "/admin/agentops/agentversion/",
    "/admin/agentops/agentversion/version/approvals/1/",
    "/admin/agentops/run/",
    "/admin/agentops/event/",
    # The actions' URLs, fetched instead of posted (a prefetching browser, a crawler, a link).
    "/interactions/{approval}/respond/?decision=approve",
    "/runs/{blocked}/resolve/?operation_key={key}&result=%7B%7D&evidence=x",
    "/runs/{failed}/retry/",
    "/runs/{waiting}/cancel/?reason=x",
    "/versions/approvals/1/retry/",
    "/admin/agentops/agentversion/?action=unregister&_selected_action=chatty:1",
    "/accounts/logout/",
]


@pytest.mark.parametrize("persona", ["operator", "agent_admin"])
@pytest.mark.parametrize("method", ["get", "head"])
def test_no_get_changes_anything(personas, scene, persona, method):
    client = personas(persona)
    before = everything()
    statuses = {}
    for url in GETS:
        response = getattr(client, method)(fill(url, scene))
        statuses[url] = response.status_code
        assert response.status_code < 500, url
    assert everything() == before
    # The action URLs refuse the method outright rather than acting.
    assert statuses["/runs/{failed}/retry/"] == 405
    assert statuses["/versions/approvals/1/retry/"] == 405
    assert statuses["/accounts/logout/"] == 405
    assert client.get("/").status_code == 200  # GET /accounts/logout/ did not log out
