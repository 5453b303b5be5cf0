"""The one authorization matrix: each persona x each page and action, on pages, forms and htmx
endpoints; the groups behind the personas; unknown or swapped ids leak nothing. (Websockets:
test_websockets.py; the API's scopes: tests/api/test_auth.py.)

The matrix is written out in full below so that it reads as the policy it enforces.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from django.contrib.auth.models import Group

from runtime.models import Event
from tests.security.conftest import PERSONAS, everything
from tests.security.test_csrf import fill

# What differs between two renders of one page: the masked CSRF token, the server's clock.
VOLATILE = re.compile(r"[A-Za-z0-9]{64}|\d{4}-\d\d-\d\dT[\d:.]+\+00:00")
SEE = {"viewer", "approver", "reconciler", "operator", "agent_admin"}
PAGES = {
    "inbox": ("/", SEE),
    "runs": ("/runs/", SEE),
    "run": ("/runs/{waiting}/", SEE),
    "interaction": ("/interactions/{approval}/", SEE),
    "reconcile": ("/runs/{blocked}/reconcile/", SEE),
    "audit": ("/audit/", SEE),
    "version board": ("/versions/", SEE),
    "versions admin": ("/admin/agentops/agentversion/", {"agent_admin"}),
    "version admin page": ("/admin/agentops/agentversion/version/approvals/1/", {"agent_admin"}),
}
ACTIONS = {
    "approve": (
        "/interactions/{approval}/respond/",
        {"decision": "approve"},
        {"approver", "operator"},
    ),
    "answer": ("/interactions/{question}/respond/", {"answer": "o-7"}, {"approver", "operator"}),
    "resolve": (
        "/runs/{blocked}/resolve/",
        {"operation_key": "{key}", "result": '{{"receipt_id": "r-1"}}', "evidence": "ledger"},
        {"reconciler", "operator"},
    ),
    "retry": ("/runs/{failed}/retry/", {}, {"operator"}),
    "cancel": ("/runs/{to_cancel}/cancel/", {"reason": "no"}, {"operator"}),
    "unregister": (
        "/admin/agentops/agentversion/",
        {"action": "unregister", "_selected_action": "chatty:1"},
        {"agent_admin"},
    ),
}


@pytest.mark.parametrize("persona", [*PERSONAS, "anonymous"])
@pytest.mark.parametrize("htmx", [False, True], ids=["page", "htmx"])
def test_each_persona_sees_exactly_the_pages_it_may(personas, scene, persona, htmx):
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    client = personas(persona)
    for page, (url, allowed) in PAGES.items():
        response = client.get(fill(url, scene), **headers)
        if persona in allowed:
            assert response.status_code == 200, page
        elif persona == "anonymous" or url.startswith("/admin/"):
            assert response.status_code == 302, page  # to a login page (the admin's for its own)
            assert "login" in response["Location"]
        else:
            assert response.status_code == 403, page


@pytest.mark.parametrize("persona", [*PERSONAS, "anonymous"])
@pytest.mark.parametrize("htmx", [False, True], ids=["form", "htmx"])
def test_each_persona_does_exactly_the_actions_it_may(personas, scene, persona, htmx):
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    client = personas(persona)
    for action, (url, data, allowed) in ACTIONS.items():
        before = everything()
        form = {name: fill(value, scene) for name, value in data.items()}
        response = client.post(fill(url, scene), form, **headers)
        if persona in allowed:
            assert response.status_code in (200, 302), action
            assert everything() != before, action
            if not url.startswith("/admin/"):  # audited under the person who acted
                assert Event.objects.filter(actor=persona).exists(), action
            continue
        assert everything() == before, action
        if persona == "anonymous" or (url.startswith("/admin/") and persona != "agent_admin"):
            assert response.status_code == 302, action
            assert "login" in response["Location"]
        else:
            assert response.status_code == 403, action


def test_an_outsider_cannot_tell_a_real_id_from_a_made_up_one(personas, scene):
    outsider = personas("outsider")
    made_up = uuid.uuid4()
    for real, fake in [
        (f"/runs/{scene['waiting'].pk}/", f"/runs/{made_up}/"),
        (f"/interactions/{scene['approval'].pk}/", f"/interactions/{made_up}/"),
        (f"/runs/{scene['blocked'].pk}/reconcile/", f"/runs/{made_up}/reconcile/"),
    ]:
        first, second = outsider.get(real), outsider.get(fake)
        assert first.status_code == second.status_code == 403
        same = VOLATILE.sub("", first.content.decode()) == VOLATILE.sub("", second.content.decode())
        assert same
    for url in (f"/runs/{scene['failed'].pk}/retry/", f"/runs/{made_up}/retry/"):
        assert outsider.post(url).status_code == 403


def leaks(html: str, scene: dict[str, Any]) -> list[str]:
    """Ids and agent text of the scene's runs found in a page meant to show none of them."""
    secrets = [str(scene[name].pk) for name in ("waiting", "blocked", "failed", "completed")]
    secrets += [str(scene["approval"].pk), str(scene["question"].pk)]
    return [secret for secret in secrets if secret in html]


@pytest.mark.parametrize(
    "method, url",
    [
        ("get", "/runs/{made_up}/"),
        ("get", "/interactions/{made_up}/"),
        ("get", "/interactions/{waiting}/"),  # a run's id where an interaction's belongs
        ("get", "/runs/{approval}/"),  # and the other way round
        ("get", "/runs/{approval}/reconcile/"),
        ("post", "/interactions/{blocked}/respond/"),
        ("post", "/runs/{question}/cancel/"),
        ("post", "/runs/{approval}/retry/"),
        ("post", "/runs/{made_up}/resolve/"),
        ("get", "/admin/agentops/agentversion/version/nobody/9/"),
    ],
)
def test_unknown_or_swapped_ids_are_not_found_and_leak_nothing(personas, scene, method, url):
    client = personas("agent_admin" if "/admin/" in url else "operator")
    before = everything()
    target = url.format(
        made_up=uuid.uuid4(),
        **{name: scene[name].pk for name in ("waiting", "approval", "blocked", "question")},
    )
    response = getattr(client, method)(target, {"decision": "approve", "reason": "x"})
    assert response.status_code == 404
    assert everything() == before
    assert leaks(response.content.decode(), scene) == []


def test_a_resolve_posted_to_another_run_changes_nothing(personas, scene):
    """The blocked run's reconcile form, posted to a run that is not blocked: refused (409)."""
    before = everything()
    response = personas("operator").post(
        f"/runs/{scene['waiting'].pk}/resolve/",
        {
            "operation_key": scene["blocked"].blocked_operation,
            "result": '{"receipt_id": "r-1"}',
            "evidence": "ledger",
        },
    )
    assert response.status_code == 409
    assert everything() == before
    assert str(scene["blocked"].pk) not in response.content.decode()


def test_it_creates_the_groups_with_their_permissions(db):
    def codenames(name: str) -> set[str]:
        return set(Group.objects.get(name=name).permissions.values_list("codename", flat=True))

    view = {"view_run", "view_session", "view_operation", "view_interaction", "view_event"}
    assert codenames("viewers") == view
    assert codenames("approvers") == view | {"respond_run"}
    assert codenames("reconcilers") == view | {"resolve_run"}
    assert codenames("operators") == view | {
        "respond_run",
        "resolve_run",
        "control_run",
        "edit_arguments",
    }
