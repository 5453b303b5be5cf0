"""Unregister from the admin: refused while runs need the version, naming them; all or nothing."""

from __future__ import annotations

from runtime import cancel
from runtime.models import AgentVersion, Event, EventKind, RunStatus
from tests.versions.conftest import (
    act,
    approval_script,
    approve_and_resume,
    make_agent,
    messages_of,
    waiting_runs,
)


def registration_state() -> list[tuple[str, str, bool, str]]:
    return [
        (row.agent, row.version, row.is_registered, row.unregistered_by)
        for row in AgentVersion.objects.order_by("agent", "version")
    ]


def test_it_refuses_to_unregister_a_version_still_needed_and_names_the_runs(
    define, agent_admin, effects
):
    define(make_agent(approval_script()))
    runs = waiting_runs("clerk", 2)
    before = registration_state()
    response = act(agent_admin, "unregister", "clerk:1")
    [message] = messages_of(response)
    assert "clerk 1 is still needed by 2 unfinished run(s)" in message
    for run in runs:
        assert str(run.pk) in message
    assert registration_state() == before
    assert not Event.objects.filter(kind=EventKind.AGENT_UNREGISTERED).exists()


def test_it_unregisters_once_the_runs_drained(define, agent_admin, effects):
    define(make_agent(approval_script()))
    [first, second] = waiting_runs("clerk", 2)
    assert approve_and_resume(first).status == RunStatus.COMPLETED
    cancel(second.pk, actor="olga")
    response = act(agent_admin, "unregister", "clerk:1")
    assert messages_of(response) == ["Unregistered clerk 1."]
    row = AgentVersion.objects.get()
    assert (row.is_registered, row.unregistered_by) == (False, "ada")
    event = Event.objects.get(kind=EventKind.AGENT_UNREGISTERED)
    assert (event.actor, event.data) == ("ada", {"agent": "clerk", "version": "1"})


def test_a_bulk_unregister_is_refused_whole_when_one_version_is_needed(
    define, agent_admin, effects
):
    v1 = make_agent(approval_script())
    v2 = make_agent(approval_script(), version="2", instructions="Be brief.")
    other = make_agent([], name="greeter")
    define(v1, other)
    [run] = waiting_runs("clerk", 1)
    define(v2)
    before = registration_state()
    response = act(agent_admin, "unregister", "clerk:1", "clerk:2", "greeter:1")
    [message] = messages_of(response)
    assert message.startswith("nothing was unregistered: clerk 1 is still needed by 1")
    assert str(run.pk) in message
    assert registration_state() == before
    assert not Event.objects.filter(kind=EventKind.AGENT_UNREGISTERED).exists()


def test_a_bulk_unregister_is_refused_whole_when_one_version_is_not_registered(define, agent_admin):
    define(make_agent([]), make_agent([], name="greeter"))
    act(agent_admin, "unregister", "greeter:1")
    before = registration_state()
    response = act(agent_admin, "unregister", "clerk:1", "greeter:1")
    assert messages_of(response) == ["nothing was unregistered: greeter 1 is not registered"]
    assert registration_state() == before


def test_a_bulk_unregister_unregisters_every_version_when_none_is_needed(define, agent_admin):
    define(make_agent([]), make_agent([], version="2", instructions="Be brief."))
    act(agent_admin, "unregister", "clerk:1", "clerk:2")
    assert registration_state() == [("clerk", "1", False, "ada"), ("clerk", "2", False, "ada")]
    assert Event.objects.filter(kind=EventKind.AGENT_UNREGISTERED, actor="ada").count() == 2


def test_an_unregistered_version_keeps_its_row_and_history(define, agent_admin):
    define(make_agent([]))
    act(agent_admin, "unregister", "clerk:1")
    page = agent_admin.get("/admin/agentops/agentversion/version/clerk/1/").content.decode()
    assert "unregistered" in page
    assert [e.kind for e in Event.objects.order_by("id")] == [
        "agent_registered",
        "agent_unregistered",
    ]
