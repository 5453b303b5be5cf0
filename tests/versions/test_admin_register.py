"""Register from the admin: one or a batch, validated whole, never replacing a registration."""

from __future__ import annotations

from runtime.models import AgentVersion, Event, EventKind, RunStatus
from runtime.registry import code_defines
from tests.versions.conftest import (
    act,
    approval_script,
    approve_and_resume,
    make_agent,
    messages_of,
    waiting_runs,
)


def test_it_registers_a_version_defined_in_code(define, agent_admin):
    define(make_agent([]), register_them=False)
    response = act(agent_admin, "register", "clerk:1")
    assert response.status_code == 200
    row = AgentVersion.objects.get(agent="clerk", version="1")
    assert row.is_registered
    assert row.registered_by == "ada"
    assert row.fingerprint == make_agent([]).fingerprint
    event = Event.objects.get(kind=EventKind.AGENT_REGISTERED)
    assert (event.actor, event.data["agent"], event.data["version"]) == ("ada", "clerk", "1")
    assert any("Registered clerk 1" in m for m in messages_of(response))


def test_it_registers_a_batch(define, agent_admin):
    define(
        make_agent([]), make_agent([], version="2", instructions="Be brief."), register_them=False
    )
    act(agent_admin, "register", "clerk:1", "clerk:2")
    assert sorted(AgentVersion.objects.values_list("version", flat=True)) == ["1", "2"]
    assert Event.objects.filter(kind=EventKind.AGENT_REGISTERED, actor="ada").count() == 2


def test_it_registers_nothing_when_one_entry_of_the_batch_is_invalid(define, agent_admin):
    define(
        make_agent([]), make_agent([], version="2", instructions="Be brief."), register_them=False
    )
    response = act(agent_admin, "register", "clerk:1", "clerk:2", "clerk:9")
    assert AgentVersion.objects.count() == 0
    assert not Event.objects.exists()
    [message] = messages_of(response)
    assert message.startswith("nothing was registered")
    assert "clerk 9 is not defined in the code" in message


def test_it_never_replaces_an_existing_registration(define, agent_admin):
    define(make_agent([]))
    before = AgentVersion.objects.get()
    response = act(agent_admin, "register", "clerk:1")
    assert "clerk 1 is already registered" in messages_of(response)[0]
    after = AgentVersion.objects.get()
    assert (after.registered_at, after.registered_by) == (
        before.registered_at,
        before.registered_by,
    )
    assert Event.objects.filter(kind=EventKind.AGENT_REGISTERED).count() == 1


def test_it_refuses_to_register_a_version_whose_code_is_gone(define, agent_admin):
    define(make_agent([]))
    act(agent_admin, "unregister", "clerk:1")
    # The code base moves on: only version 2 is defined now.
    with code_defines(make_agent([], version="2")):
        page = agent_admin.get("/admin/agentops/agentversion/version/clerk/1/")
        assert "not defined in the code anymore" in page.content.decode()
        assert b'name="action" value="register"' not in page.content
        response = act(agent_admin, "register", "clerk:1")
    assert "clerk 1 is not defined in the code" in messages_of(response)[0]
    assert not AgentVersion.objects.get(version="1").is_registered


def test_it_refuses_to_register_again_under_a_label_whose_code_changed(define, agent_admin):
    define(make_agent([]))
    act(agent_admin, "unregister", "clerk:1")
    define(make_agent([], instructions="Refund everything."), register_them=False)
    response = act(agent_admin, "register", "clerk:1")
    assert "registered before with different code" in messages_of(response)[0]
    row = AgentVersion.objects.get()
    assert not row.is_registered
    assert row.fingerprint == make_agent([]).fingerprint


def test_registering_does_not_retry_blocked_runs(define, agent_admin, effects):
    define(make_agent(approval_script()))
    [run] = waiting_runs("clerk", 1)
    # Unregister is refused while the run needs it: a restore from backup is what this models.
    AgentVersion.objects.filter(agent="clerk").update(unregistered_at=run.created_at)
    run = approve_and_resume(run)
    assert run.attention_reason == "version_unregistered"
    act(agent_admin, "register", "clerk:1")
    assert AgentVersion.objects.get().is_registered
    run.refresh_from_db()
    assert run.status == RunStatus.NEEDS_ATTENTION
    assert not run.events.filter(kind__startswith="retried").exists()
