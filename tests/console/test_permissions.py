"""Each persona x each action: allowed ones land, the others get 403 and change nothing."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from runtime.models import Event, Run, RunStatus
from tests.console.conftest import PERSONAS, World, htmx

ALLOWED = {
    "respond": {"approver", "operator"},
    "resolve": {"reconciler", "operator"},
    "retry": {"operator"},
    "cancel": {"operator"},
}


def prepare(world: World, action: str) -> tuple[Run, str, dict[str, Any]]:
    if action == "respond":
        run = world.run("waiting")
        return run, f"/interactions/{world.pending(run).pk}/respond/", {"decision": "approve"}
    if action == "resolve":
        run = world.run("blocked")
        return (
            run,
            f"/runs/{run.pk}/resolve/",
            {
                "operation_key": run.blocked_operation,
                "result": '{"receipt_id": "rcpt-1"}',
                "evidence": "seen in the ledger",
            },
        )
    if action == "retry":
        run = world.run("failed")
        return run, f"/runs/{run.pk}/retry/", {}
    run = world.run("waiting")
    return run, f"/runs/{run.pk}/cancel/", {"reason": "no longer needed"}


@pytest.mark.parametrize("persona", PERSONAS)
@pytest.mark.parametrize("action", ALLOWED)
@pytest.mark.parametrize("headers", [{}, htmx()], ids=["plain", "htmx"])
def test_it_lets_only_the_allowed_personas_act(world, as_user, persona, action, headers):
    run, url, data = prepare(world, action)
    before = run.status
    events = Event.objects.count()
    response = as_user(persona).post(url, data, **headers)
    run.refresh_from_db()
    if persona in ALLOWED[action]:
        assert response.status_code == (200 if headers else 302)
        assert run.status != before
        assert Event.objects.filter(actor=persona).count() == 1
    else:
        assert response.status_code == 403
        assert run.status == before
        assert Event.objects.count() == events


@pytest.mark.parametrize("action", ALLOWED)
def test_it_sends_an_anonymous_action_to_the_login_page(world, action):
    run, url, data = prepare(world, action)
    before = run.status
    response = Client().post(url, data)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
    run.refresh_from_db()
    assert run.status == before


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


def test_it_keeps_a_run_unchanged_when_a_viewer_tries_every_action(world, as_user):
    client = as_user("viewer")
    for action in ALLOWED:
        run, url, data = prepare(world, action)
        assert client.post(url, data).status_code == 403
        assert Run.objects.get(pk=run.pk).status == run.status
    assert not Event.objects.filter(actor="viewer").exists()
    assert not Run.objects.filter(status=RunStatus.CANCELLED).exists()
