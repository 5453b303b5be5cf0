"""register validates a whole batch first; unregister refuses while runs need the version."""

from __future__ import annotations

import pytest

from runtime import DurableConflictError, RegistrationError, register, submit, unregister
from runtime.models import AgentVersion, Event, EventKind
from runtime.registry import code_defines
from runtime.testing import run_until_idle
from tests.conftest import make_agent, one_call


def test_it_registers_a_batch_with_its_actor(db):
    a, b = make_agent([], name="a"), make_agent([], name="b")
    with code_defines(a, b):
        rows = register([a, ("b", "1")], actor="admin")
    assert [(r.agent, r.version, r.fingerprint) for r in rows] == [
        ("a", "1", a.fingerprint),
        ("b", "1", b.fingerprint),
    ]
    assert rows[0].spec["instructions"] == "Help the customer."
    assert Event.objects.filter(kind=EventKind.AGENT_REGISTERED, actor="admin").count() == 2


@pytest.mark.parametrize(
    ("batch", "problem"),
    [
        ([("a", "1"), ("ghost", "1")], "ghost 1 is not defined in the code"),
        ([("a", "1"), ("a", "1")], "a 1 appears twice"),
        ([("a", "1"), ("b", "1")], "b 1 is already registered"),
        ([], "the batch is empty"),
    ],
)
def test_it_writes_nothing_when_one_entry_is_invalid(db, batch, problem):
    a, b = make_agent([], name="a"), make_agent([], name="b")
    with code_defines(a, b):
        register([b], actor="admin")
        before = (AgentVersion.objects.count(), Event.objects.count())
        with pytest.raises(RegistrationError, match=problem):
            register(batch, actor="admin")
    assert (AgentVersion.objects.count(), Event.objects.count()) == before


def test_it_never_replaces_a_registration_with_other_code(db):
    original = make_agent([], name="a")
    changed = make_agent([], name="a", instructions="Different.")
    with code_defines(original):
        register([original], actor="admin")
        unregister("a", "1", actor="admin")
    with code_defines(changed), pytest.raises(RegistrationError, match="bump the version"):
        register([changed], actor="admin")
    row = AgentVersion.objects.get()
    assert (row.fingerprint, row.is_registered) == (original.fingerprint, False)


def test_it_refuses_to_unregister_a_version_runs_still_need(define, effects):
    agent = define(make_agent(one_call("refund")))
    waiting = run_until_idle(submit(agent.name, "refund", actor="alice").pk)
    queued = submit(agent.name, "again", actor="alice")
    with pytest.raises(DurableConflictError) as error:
        unregister(agent.name, agent.version, actor="admin")
    assert str(waiting.pk) in error.value.message
    assert str(queued.pk) in error.value.message
    assert "1 waiting" in error.value.message and "1 queued" in error.value.message
    assert set(error.value.run_ids) == {str(waiting.pk), str(queued.pk)}
    assert AgentVersion.objects.get().is_registered


def test_it_unregisters_once_drained_and_keeps_the_history(define, effects):
    agent = define(make_agent(one_call("get_order")))
    run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    assert run.status == "completed"
    assert unregister(agent.name, agent.version, actor="admin") is True
    assert unregister(agent.name, agent.version, actor="admin") is False
    row = AgentVersion.objects.get()
    assert (row.is_registered, row.unregistered_by) == (False, "admin")
    assert Event.objects.filter(kind=EventKind.AGENT_UNREGISTERED).count() == 1
    # Registering the same code again restores it; it never retries anything by itself.
    register([agent], actor="admin")
    assert AgentVersion.objects.get().is_registered
