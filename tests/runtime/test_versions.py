"""Version checks before any call, and their repair: restore the code or re-register, retry."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runtime import RetryRejected, advance, register, retry, submit, unregister
from runtime.models import AgentVersion, ApprovalRule, Operation, Run, RunStatus
from runtime.registry import code_defines
from runtime.testing import run_until_idle
from tests.conftest import ARGS, call, make_agent, one_call, say


def started_run(define, effects):
    """A run of clerk v1 that waits for approval after one completed tool call."""
    script = [
        call(("get_order", ARGS["get_order"]), step=1),
        call(("refund", ARGS["refund"]), step=2),
        say("done"),
    ]
    agent = define(make_agent(script))
    run = run_until_idle(submit(agent.name, "refund", actor="alice").pk)
    assert run.status == RunStatus.WAITING
    return agent, run, script


def approve_and_resume(run):
    from runtime import respond

    respond(run.interactions.get().pk, {"approved": True}, actor="bob")
    return run_until_idle(run.pk)


def test_it_blocks_without_calling_anything_when_the_code_changed(define, effects):
    _agent, run, script = started_run(define, effects)
    changed = make_agent(script, instructions="Refund everything, always.")
    calls_before = sum(effects.calls.values())
    with code_defines(changed):
        run = approve_and_resume(run)
    assert run.status == RunStatus.NEEDS_ATTENTION
    assert run.attention_reason == "fingerprint_mismatch"
    parts = {d["part"]: d for d in run.attention_detail["differences"]}
    assert parts["instructions"] == {
        "part": "instructions",
        "saved": "Help the customer.",
        "current": "Refund everything, always.",
    }
    assert sum(effects.calls.values()) == calls_before
    assert changed.llm.calls == 0
    # Restoring the code and retrying finishes the run on v1.
    retry(run.pk, actor="ops")
    run = run_until_idle(run.pk)
    assert run.status == RunStatus.COMPLETED
    assert (run.version, effects.total) == ("1", 2)


def test_a_claim_reads_the_registration_and_whether_there_are_rules_with_the_run(define):
    agent = define(make_agent(one_call("get_order")))
    run = submit(agent.name, "hi", actor="alice")
    with CaptureQueriesContext(connection) as queries:
        advance(run.pk)
    assert Run.objects.get(pk=run.pk).status == RunStatus.COMPLETED
    tables = (AgentVersion._meta.db_table, ApprovalRule._meta.db_table)
    assert not [q["sql"] for q in queries.captured_queries if any(t in q["sql"] for t in tables)]


def test_it_blocks_when_the_version_is_not_registered(define, effects):
    _agent, run, _ = started_run(define, effects)
    from runtime.models import AgentVersion

    # Unregister is refused while the run needs it; an admin removing the row by other means
    # (or a restore from backup) is what this models.
    AgentVersion.objects.filter(agent="clerk").update(unregistered_at=run.created_at)
    run = approve_and_resume(run)
    assert run.attention_reason == "version_unregistered"
    with pytest.raises(RetryRejected, match="not registered"):
        retry(run.pk, actor="ops")
    AgentVersion.objects.filter(agent="clerk").update(unregistered_at=None)
    retry(run.pk, actor="ops")
    assert run_until_idle(run.pk).status == RunStatus.COMPLETED


def test_it_blocks_when_the_version_left_the_code(define, effects):
    _agent, run, _ = started_run(define, effects)
    with code_defines():
        run = approve_and_resume(run)
        assert run.attention_reason == "version_missing"
        with pytest.raises(RetryRejected, match="no longer defined"):
            retry(run.pk, actor="ops")
    retry(run.pk, actor="ops")
    assert run_until_idle(run.pk).status == RunStatus.COMPLETED


def test_it_blocks_when_a_saved_input_differs_from_the_rebuilt_one(define, effects):
    _agent, run, _ = started_run(define, effects)
    # The log says get_order was called with other arguments than the script gives now.
    Operation.objects.filter(run=run, key="step-1/tool/toolu_01_0").update(input_hash="0" * 64)
    run = approve_and_resume(run)
    assert run.status == RunStatus.NEEDS_ATTENTION
    assert run.attention_reason == "input_mismatch"
    assert run.attention_detail["differences"][0]["part"] == "step-1/tool/toolu_01_0"
    assert effects.total == 1


def test_new_runs_use_the_newest_registered_version_while_old_ones_finish(define, effects):
    v1 = make_agent(one_call("refund"))
    v2 = make_agent(one_call("refund"), version="2", instructions="Be brief.")
    with code_defines(v1, v2):
        register([v1], actor="admin")
        old = run_until_idle(submit("clerk", "refund", actor="alice").pk)
        register([v2], actor="admin")
        new = submit("clerk", "refund", actor="alice")
        assert (old.version, new.version) == ("1", "2")
        assert old.fingerprint == v1.fingerprint
        approve_and_resume(old)
        assert unregister("clerk", "1", actor="admin") is True
