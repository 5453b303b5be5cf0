"""Who may see the versions admin, and who may register and unregister."""

from __future__ import annotations

from runtime.models import AgentVersion, Event, EventKind
from tests.versions.conftest import CHANGELIST, make_agent


def test_a_staff_user_without_the_permission_sees_the_list_without_actions(define, staff_viewer):
    define(make_agent([]))
    page = staff_viewer.get(CHANGELIST)
    assert page.status_code == 200
    assert b'class="action-select"' not in page.content
    assert b'name="action"' not in page.content
    detail = staff_viewer.get("/admin/agentops/agentversion/version/clerk/1/")
    assert b'value="unregister"' not in detail.content


def test_a_staff_user_without_the_permission_cannot_register(define, staff_viewer):
    define(make_agent([]), register_them=False)
    response = staff_viewer.post(CHANGELIST, {"action": "register", "_selected_action": "clerk:1"})
    assert response.status_code == 403
    assert not AgentVersion.objects.exists()
    assert not Event.objects.exists()


def test_a_staff_user_without_the_permission_cannot_unregister(define, staff_viewer):
    define(make_agent([]))
    response = staff_viewer.post(
        CHANGELIST, {"action": "unregister", "_selected_action": "clerk:1"}
    )
    assert response.status_code == 403
    assert AgentVersion.objects.get().is_registered
    assert not Event.objects.filter(kind=EventKind.AGENT_UNREGISTERED).exists()


def test_a_console_user_cannot_open_the_admin(define, operator):
    define(make_agent([]))
    response = operator.get(CHANGELIST)
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_a_superuser_may_register(define, admin_client):
    define(make_agent([]), register_them=False)
    admin_client.post(CHANGELIST, {"action": "register", "_selected_action": "clerk:1"})
    assert AgentVersion.objects.get().registered_by == "admin"


def test_an_action_without_a_selection_changes_nothing(define, agent_admin):
    define(make_agent([]), register_them=False)
    response = agent_admin.post(CHANGELIST, {"action": "register"}, follow=True)
    assert [str(m) for m in response.context["messages"]] == [
        "Select at least one version; nothing was changed."
    ]
    assert not AgentVersion.objects.exists()


def test_an_action_returns_only_to_a_page_of_this_site(define, agent_admin):
    define(make_agent([]), register_them=False)
    response = agent_admin.post(
        CHANGELIST,
        {"action": "register", "_selected_action": "clerk:1", "next": "https://evil.example/"},
    )
    assert response["Location"] == CHANGELIST
