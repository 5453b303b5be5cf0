"""The two runtime verbs the versions interfaces added: retry_many and unregister_many."""

from __future__ import annotations

import uuid

import pytest

from runtime import DurableConflictError, RegistrationError
from runtime.control import RetryResult, retry_many
from runtime.models import AgentVersion, Event, EventKind, Run, RunStatus
from runtime.registry import code_defines, unregister_many
from tests.versions.conftest import approval_script, approve_and_resume, make_agent, waiting_runs


def test_retry_many_retries_each_run_it_can_and_says_why_not_the_others(define, effects):
    define(make_agent(approval_script()))
    runs = waiting_runs("clerk", 2)
    with code_defines(make_agent(approval_script(), instructions="changed")):
        blocked = approve_and_resume(runs[0])
    missing = uuid.uuid4()
    results = retry_many([blocked.pk, runs[1].pk, missing], actor="olga")
    assert results[0] == RetryResult(str(blocked.pk), retried=True)
    assert results[1].retried is False
    assert (
        results[1].problem == f"run {runs[1].pk} cannot be retried: a waiting run cannot be retried"
    )
    assert results[2].retried is False
    assert "does not exist" in results[2].problem
    assert Run.objects.get(pk=blocked.pk).status == RunStatus.QUEUED
    assert Run.objects.get(pk=runs[1].pk).status == RunStatus.WAITING
    assert Event.objects.filter(kind=EventKind.RETRIED, actor="olga").count() == 1


def test_unregister_many_is_all_or_nothing(define, effects):
    define(make_agent(approval_script()), make_agent([], name="greeter"))
    [run] = waiting_runs("clerk", 1)
    with pytest.raises(DurableConflictError) as refused:
        unregister_many([("greeter", "1"), ("clerk", "1")], actor="ada")
    assert refused.value.run_ids == [str(run.pk)]
    assert AgentVersion.objects.filter(unregistered_at__isnull=True).count() == 2
    assert not Event.objects.filter(kind=EventKind.AGENT_UNREGISTERED).exists()


def test_unregister_many_refuses_an_empty_batch_or_an_unregistered_entry(define):
    define(make_agent([]))
    with pytest.raises(RegistrationError, match="the batch is empty"):
        unregister_many([], actor="ada")
    with pytest.raises(RegistrationError, match="clerk 7 is not registered"):
        unregister_many([("clerk", "1"), ("clerk", "7")], actor="ada")
    assert AgentVersion.objects.get().is_registered


def test_unregister_many_unregisters_every_entry(define):
    define(make_agent([]), make_agent([], name="greeter"))
    assert unregister_many([("greeter", "1"), ("clerk", "1"), ("clerk", "1")], actor="ada") == [
        ("clerk", "1"),
        ("greeter", "1"),
    ]
    assert not AgentVersion.objects.filter(unregistered_at__isnull=True).exists()
