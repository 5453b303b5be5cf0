"""Only the store writes the runtime's tables (tests/support/store_guard.py watches every test);
here the watch itself is shown to catch a write from anywhere else."""

from __future__ import annotations

from typing import Any

import pytest

from runtime import clock, store, submit
from runtime.models import Event, Run
from tests.conftest import make_agent, say
from tests.support import store_guard

pytestmark = pytest.mark.django_db


def _from_module(name: str, body: str, **names: Any) -> Any:
    """Run `body` as code of module `name`, as if that module wrote it."""
    namespace: dict[str, Any] = {"__name__": name, **names}
    exec(compile(body, f"<{name}>", "exec"), namespace)
    return namespace


def test_a_console_write_to_a_runtime_table_is_caught(define):
    agent = define(make_agent([say("hi")]))
    run = submit(agent.name, "hi", actor="alice")
    seen = len(store_guard.violations)
    _from_module(
        "agentops.views.rogue",
        "Run.objects.filter(pk=pk).update(input='changed')",
        Run=Run,
        pk=run.pk,
    )
    caught = store_guard.violations[seen:]
    del store_guard.violations[seen:]  # shown here; the guard of this test must not fail it
    assert [(module, table) for module, table, _ in caught] == [
        ("agentops.views.rogue", Run._meta.db_table)
    ]


def test_a_console_event_through_the_models_save_is_caught_and_a_tests_is_not(define):
    agent = define(make_agent([say("hi")]))
    run = submit(agent.name, "hi", actor="alice")
    seen = len(store_guard.violations)
    Event.objects.create(run=run, kind="fixture", actor="alice", created_at=clock.now())
    assert store_guard.violations[seen:] == []
    rogue = "Event.objects.create(run=run, kind='forged', actor='alice', created_at=now)"
    _from_module("agentops.api.rogue", rogue, Event=Event, run=run, now=clock.now())
    caught = store_guard.violations[seen:]
    del store_guard.violations[seen:]
    assert [module for module, _, _ in caught] == ["agentops.api.rogue"]


def test_the_store_and_the_verbs_through_it_are_not_caught(define):
    agent = define(make_agent([say("hi")]))
    seen = len(store_guard.violations)
    run = submit(agent.name, "hi", actor="alice")
    store.event(run.pk, "submitted", "alice")
    _from_module(
        "runtime.migrations.0099_fill",
        "Run.objects.filter(pk=pk).update(input='x')",
        Run=Run,
        pk=run.pk,
    )
    assert store_guard.violations[seen:] == []


@pytest.mark.parametrize(
    ("module", "allowed"),
    [
        ("runtime.store", True),
        ("runtime.store.verbs", True),
        ("agentops.migrations.0003_groups", True),
        ("runtime.control", False),
        ("runtime.storehouse", False),
        ("agentops.admin", False),
    ],
)
def test_only_the_store_and_migrations_are_writers(module, allowed):
    assert store_guard.writer(module) is allowed
