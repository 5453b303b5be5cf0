"""One test per rule of CONFORMANCE.md whose behaviour the first version already had.

Each test is named after its rule id, so a reader can map the table to the suite. The rules
added for real traffic (C11-C14, S1-S6, T3, T4, T6, T8, T9, E4, E6, E8, R4, R5, V4) have their
tests beside these, in files named after their area. Both databases run every test here.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from runtime import (
    Agent,
    AgentDefinitionError,
    DurableConflictError,
    InteractionConflict,
    InvalidInput,
    LeaseLost,
    ModelRetry,
    NotBlocked,
    RegistrationError,
    RetryRejected,
    ToolContext,
    cancel,
    list_runs,
    register,
    resolve,
    respond,
    resume,
    retry,
    store,
    submit,
    tool,
    unregister,
)
from runtime.clock import frozen
from runtime.llm.scripted import ScriptedModel
from runtime.models import (
    AgentVersion,
    Event,
    EventKind,
    Interaction,
    InteractionStatus,
    Operation,
    OperationStatus,
    Run,
    RunStatus,
)
from runtime.registry import code_defines
from runtime.testing import SimulatedCrash, crash_at, expire_lease, recover, run_until_idle
from tests.conftest import ARGS, Amount, Receipt, call, make_agent, one_call, say

KEY = "step-1/tool/toolu_01_0"
POLICY_TOOLS = {
    "manual": "charge",
    "safe": "get_order",
    "idempotent": "open_ticket",
    "report": "notify",
}


def crashed_once(define: Any, tool_name: str, window: str) -> Run:
    """A run of one call to `tool_name` whose worker died at `window`, then recovered."""
    agent = define(make_agent(one_call(tool_name)))
    run = submit(agent.name, "please", actor="alice")
    with crash_at(window, tool=tool_name), pytest.raises(SimulatedCrash):
        recover(run.pk)
    return recover(run.pk)


def tool_results(run: Run) -> list[dict[str, Any]]:
    """The tool_result blocks the model saw in this run, in order."""
    return [
        block
        for message in run.transcript
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


def waiting_for_approval(define: Any, script: list[Any] | None = None) -> tuple[Run, Interaction]:
    agent = define(make_agent(script or one_call("refund")))
    run = run_until_idle(submit(agent.name, "refund A1", actor="alice").pk)
    return run, Interaction.objects.get(run=run, status=InteractionStatus.PENDING)


def blocked_on_charge(define: Any) -> Run:
    run = crashed_once(define, "charge", "after_handler")
    assert (run.status, run.blocked_operation) == (RunStatus.NEEDS_ATTENTION, KEY)
    return run


def snapshot(run: Run) -> tuple[Any, ...]:
    """What a refused verb must leave unchanged."""
    run.refresh_from_db()
    ops = sorted(Operation.objects.filter(run=run).values_list("key", "status", "attempts"))
    return (run.status, run.fence, run.blocked_operation, ops, Event.objects.count())


# --- crash windows and recovery -----------------------------------------------------------------


@pytest.mark.parametrize("policy", POLICY_TOOLS)
def test_c1_a_crash_before_the_intent_runs_the_call_normally(define, effects, policy):
    run = crashed_once(define, POLICY_TOOLS[policy], "before_intent")
    assert run.status == RunStatus.COMPLETED
    assert effects.total == 1
    assert Operation.objects.get(run=run, key=KEY).attempts == 1


def test_c2_a_manual_call_with_an_intent_and_no_outcome_blocks_and_repeats_nothing(define, effects):
    run = crashed_once(define, "charge", "after_intent")
    assert run.status == RunStatus.NEEDS_ATTENTION
    assert (run.attention_reason, run.blocked_operation) == ("uncertain_operation", KEY)
    assert sum(effects.calls.values()) == 0
    # A second recovery does not change its mind.
    run = recover(run.pk)
    assert (run.status, sum(effects.calls.values())) == (RunStatus.NEEDS_ATTENTION, 0)


def test_c3_a_safe_call_with_an_intent_and_no_outcome_runs_again(define, effects):
    run = crashed_once(define, "get_order", "after_handler")
    assert run.status == RunStatus.COMPLETED
    assert sum(effects.calls.values()) == 2
    assert Operation.objects.get(run=run, key=KEY).attempts == 2


def test_c4_an_idempotent_call_runs_again_with_the_same_operation_id(define, effects):
    run = crashed_once(define, "open_ticket", "after_handler")
    operation_id = f"{run.pk}:{KEY}"
    assert run.status == RunStatus.COMPLETED
    assert effects.calls == {operation_id: 2}
    assert effects.effects == {operation_id: 1}


def test_c5_a_report_call_gives_the_model_the_tool_durability_error(define, effects):
    run = crashed_once(define, "notify", "after_handler")
    assert run.status == RunStatus.COMPLETED
    (result,) = tool_results(run)
    assert result["is_error"] is True
    assert json.loads(result["content"]) == {
        "kind": "tool-durability-error",
        "error": json.loads(result["content"])["error"],
        "toolName": "notify",
        "toolCallId": "toolu_01_0",
    }
    assert effects.total == 1


@pytest.mark.parametrize("policy", POLICY_TOOLS)
def test_c6_a_committed_outcome_is_replayed_and_never_run_again(define, effects, policy):
    run = crashed_once(define, POLICY_TOOLS[policy], "after_outcome")
    assert run.status == RunStatus.COMPLETED
    assert sum(effects.calls.values()) == 1
    assert Operation.objects.get(run=run, key=KEY).attempts == 1


def test_c7_a_crash_during_the_outcome_write_leaves_no_outcome(define, effects):
    agent = define(make_agent(one_call("charge")))
    run = submit(agent.name, "please", actor="alice")
    with crash_at("during_outcome", tool="charge"), pytest.raises(SimulatedCrash):
        recover(run.pk)
    op = Operation.objects.get(run=run, key=KEY)
    assert (op.status, op.result, op.outcome_at) == (OperationStatus.STARTED, None, None)
    assert not Event.objects.filter(run=run, kind=EventKind.OUTCOME, operation_key=KEY).exists()


def test_c9_an_interrupted_model_request_runs_again_and_a_finished_one_never(define, effects):
    agent = define(make_agent(one_call("get_order"), model_retry=ModelRetry(max_attempts=3)))
    run = submit(agent.name, "please", actor="alice")
    # The worker dies after the model answered, before the outcome was written.
    with crash_at("after_handler", tool="model"), pytest.raises(SimulatedCrash):
        recover(run.pk)
    run = recover(run.pk)
    assert run.status == RunStatus.COMPLETED
    assert Operation.objects.get(run=run, key="step-1/model").attempts == 2
    # Two model requests answered (the call, the answer), plus the interrupted one.
    assert agent.llm.calls == 3
    run_until_idle(run.pk)
    assert agent.llm.calls == 3


def test_c10_a_handler_that_raises_is_an_outcome_the_model_sees(define, effects):
    @tool(recovery="safe")
    def explode(args: Amount, ctx: ToolContext) -> Receipt:
        """Fail."""
        raise RuntimeError("card declined")

    agent = define(
        Agent(
            name="clerk",
            version="1",
            model="claude-test",
            instructions="x",
            tools=[explode],
            model_retry=ModelRetry(max_attempts=3),
            llm=ScriptedModel([call(("explode", ARGS["charge"]), step=1), say("sorry")]),
        )
    )
    run = run_until_idle(submit(agent.name, "please", actor="alice").pk)
    assert run.status == RunStatus.COMPLETED
    (result,) = tool_results(run)
    assert result["is_error"] is True
    assert json.loads(result["content"])["error"] == "card declined"
    op = Operation.objects.get(run=run, key=KEY)
    assert (op.status, op.attempts) == (OperationStatus.COMPLETED, 1)
    assert not Event.objects.filter(run=run, kind=EventKind.RETRY_SCHEDULED).exists()


# --- operation ids and policies -------------------------------------------------------------------


def test_p1_the_default_policy_is_manual_and_a_policy_map_must_name_real_tools():
    @tool
    def plain(args: Amount, ctx: ToolContext) -> Receipt:
        """No policy given."""
        return Receipt(receipt_id="r")

    assert plain.recovery == "manual"
    with pytest.raises(AgentDefinitionError, match="missing tool 'ghost'"):
        Agent(
            name="a",
            version="1",
            model="m",
            instructions="x",
            tools=[plain],
            recovery={"ghost": "safe"},
        )


def test_p2_the_operation_id_is_the_run_id_and_key_stable_across_crashes(define, effects):
    run = crashed_once(define, "open_ticket", "in_handler")
    operation_id = f"{run.pk}:{KEY}"
    assert Operation.objects.get(run=run, key=KEY).operation_id == operation_id
    # Both attempts, before and after the crash, handed the tool the same id.
    assert effects.calls == {operation_id: 2}


def test_p3_the_models_mistakes_come_back_as_error_results_and_nothing_runs(define, effects):
    script = [
        call(("no_such_tool", {}), ("charge", {"order_id": 7}), step=1),
        say("sorry"),
    ]
    agent = define(make_agent(script))
    run = run_until_idle(submit(agent.name, "please", actor="alice").pk)
    assert run.status == RunStatus.COMPLETED
    unknown, invalid = tool_results(run)
    assert unknown["is_error"] and "unknown tool 'no_such_tool'" in unknown["content"]
    assert invalid["is_error"] and "amount_cents" in invalid["content"]
    assert sum(effects.calls.values()) == 0


# --- approvals and questions ----------------------------------------------------------------------


def test_q1_the_approval_is_created_before_the_intent_and_the_run_waits(define, effects):
    run, interaction = waiting_for_approval(define)
    assert run.status == RunStatus.WAITING
    assert interaction.operation_key == KEY
    assert not Operation.objects.filter(run=run, key=KEY).exists()
    assert effects.total == 0


def test_q2_calls_of_one_response_run_in_order_and_wait_at_the_first_approval(define, effects):
    script = [
        call(
            ("get_order", ARGS["get_order"]),
            ("refund", ARGS["refund"]),
            ("open_ticket", ARGS["open_ticket"]),
            step=1,
        ),
        say("done"),
    ]
    run, interaction = waiting_for_approval(define, script)
    assert interaction.operation_key == "step-1/tool/toolu_01_1"
    assert list(Operation.objects.filter(run=run, kind="tool").values_list("key", flat=True)) == [
        KEY
    ]
    respond(interaction.pk, {"approved": True}, actor="bob")
    run = run_until_idle(run.pk)
    assert run.status == RunStatus.COMPLETED
    keys = Operation.objects.filter(run=run, kind="tool").order_by("intent_at", "pk")
    assert [op.key for op in keys] == [f"step-1/tool/toolu_01_{i}" for i in range(3)]
    assert sum(effects.calls.values()) == 3


def test_q3_a_response_is_validated_and_committed_with_the_runs_move_to_queued(define, effects):
    run, interaction = waiting_for_approval(define)
    before = snapshot(run)
    with pytest.raises(InvalidInput):
        respond(interaction.pk, {"approved": "yes please"}, actor="bob")
    assert snapshot(run) == before
    respond(interaction.pk, {"approved": True}, actor="bob")
    run.refresh_from_db()
    interaction.refresh_from_db()
    assert (run.status, interaction.status) == (RunStatus.QUEUED, InteractionStatus.ANSWERED)


def test_q4_the_same_response_again_is_harmless(define, effects):
    run, interaction = waiting_for_approval(define)
    respond(interaction.pk, {"approved": True}, actor="bob")
    respond(interaction.pk, {"approved": True}, actor="carol")
    run_until_idle(run.pk)
    assert Event.objects.filter(kind=EventKind.APPROVAL_GRANTED).count() == 1
    assert effects.total == 1


def test_q5_a_conflicting_response_fails_naming_who_answered_and_when(define, effects):
    _run, interaction = waiting_for_approval(define)
    respond(interaction.pk, {"approved": True}, actor="bob")
    with pytest.raises(InteractionConflict, match=r"approved by bob at \d{4}-\d\d-\d\d"):
        respond(interaction.pk, {"approved": False, "reason": "no"}, actor="carol")


def test_q6_a_restart_or_redelivery_never_approves_nor_drops_the_interaction(define, effects):
    run, interaction = waiting_for_approval(define)
    for _ in range(3):
        run = recover(run.pk)
    interaction.refresh_from_db()
    assert (run.status, interaction.status) == (RunStatus.WAITING, InteractionStatus.PENDING)
    assert effects.total == 0


def test_q7_a_rejection_reason_and_an_answer_become_the_tool_result(define, effects):
    run, interaction = waiting_for_approval(define)
    respond(interaction.pk, {"approved": False, "reason": "wrong amount"}, actor="bob")
    run = run_until_idle(run.pk)
    (result,) = tool_results(run)
    assert json.loads(result["content"])["reason"] == "wrong amount"
    assert effects.total == 0

    script = [call(("ask_operator", {"question": "Which order?"}), step=1), say("thanks")]
    agent = define(make_agent(script, name="asker"))
    asked = run_until_idle(submit(agent.name, "help", actor="alice").pk)
    respond(asked.interactions.get().pk, {"answer": "A7"}, actor="bob")
    asked = run_until_idle(asked.pk)
    (answer,) = tool_results(asked)
    assert json.loads(answer["content"]) == {"answer": "A7"}


# --- reconciliation -------------------------------------------------------------------------------


def test_r1_resolve_works_only_while_the_run_is_blocked_on_that_operation(define, effects):
    run = blocked_on_charge(define)
    before = snapshot(run)
    with pytest.raises(NotBlocked):
        resolve(run.pk, "step-9/tool/other", {"receipt_id": "r"}, evidence="x", actor="rita")
    assert snapshot(run) == before
    resolve(run.pk, KEY, {"receipt_id": "r"}, evidence="seen in the ledger", actor="rita")
    with pytest.raises(NotBlocked):
        resolve(run.pk, KEY, {"receipt_id": "r"}, evidence="again", actor="rita")


def test_r2_the_supplied_result_is_validated_against_the_output_schema(define, effects):
    run = blocked_on_charge(define)
    before = snapshot(run)
    with pytest.raises(InvalidInput, match="output schema"):
        resolve(run.pk, KEY, {"receipt": 42}, evidence="checked", actor="rita")
    assert snapshot(run) == before


def test_r3_evidence_is_mandatory_and_kept_with_the_actor(define, effects):
    run = blocked_on_charge(define)
    before = snapshot(run)
    with pytest.raises(InvalidInput, match="evidence"):
        resolve(run.pk, KEY, {"receipt_id": "r"}, evidence="  ", actor="rita")
    assert snapshot(run) == before
    resolve(run.pk, KEY, {"receipt_id": "r"}, evidence="ledger line 12", actor="rita")
    event = Event.objects.get(run=run, kind=EventKind.OPERATION_RESOLVED)
    assert (event.actor, event.data["evidence"]) == ("rita", "ledger line 12")


# --- retries --------------------------------------------------------------------------------------


class FailsFirst:
    """A script whose first `failures` model requests raise, then answers."""

    def __init__(self, failures: int) -> None:
        self.failures, self.calls = failures, 0

    def __call__(self, request: Any) -> Any:
        self.calls += 1
        return RuntimeError("overloaded") if self.calls <= self.failures else say("hi")


def test_t1_retry_applies_to_failed_and_blocked_runs_and_ends_a_retry_wait(define, effects):
    failing = define(make_agent(FailsFirst(1), name="failing"))
    failed = run_until_idle(submit(failing.name, "hi", actor="alice").pk)
    assert failed.status == RunStatus.FAILED
    assert retry(failed.pk, actor="ops").status == RunStatus.QUEUED
    assert run_until_idle(failed.pk).status == RunStatus.COMPLETED

    waiting = define(make_agent(FailsFirst(1), name="waiter", model_retry=ModelRetry(3, 60, 60)))
    timer = run_until_idle(submit(waiting.name, "hi", actor="alice").pk)
    assert timer.status == RunStatus.RETRY_WAIT
    assert retry(timer.pk, actor="ops").status == RunStatus.QUEUED
    assert run_until_idle(timer.pk).status == RunStatus.COMPLETED

    done = run_until_idle(submit(failing.name, "again", actor="alice").pk)
    assert done.status == RunStatus.COMPLETED
    with pytest.raises(RetryRejected):
        retry(done.pk, actor="ops")


def test_t2_retry_never_overrides_manual_recovery(define, effects):
    run = blocked_on_charge(define)
    before = snapshot(run)
    with pytest.raises(RetryRejected, match="reconcile"):
        retry(run.pk, actor="ops")
    assert snapshot(run) == before
    assert effects.total == 1


def test_t5_model_retry_waits_in_the_database_and_survives_a_restart(define, effects):
    agent = define(make_agent(FailsFirst(1), model_retry=ModelRetry(3, 10, 10)))
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    with frozen(start) as clock:
        run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
        assert run.status == RunStatus.RETRY_WAIT
        due = run.next_attempt_at
        assert due is not None
        assert start <= due <= start + dt.timedelta(seconds=10)
        # A restarted worker knows only the database: the timer is there, and fires once due.
        clock.advance((due - start).total_seconds())
        assert Run.objects.get(pk=run.pk).next_attempt_at == due
        assert str(run.pk) in resume()
        run = run_until_idle(run.pk)
    assert run.status == RunStatus.COMPLETED


def test_t7_tool_failures_and_the_step_budget_are_not_model_retries(define, effects):
    script = [call(("charge", {"order_id": 7}), step=n) for n in range(1, 4)]
    agent = define(make_agent(script, max_steps=3, model_retry=ModelRetry(3, 1, 1)))
    run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    assert run.status == RunStatus.FAILED
    assert "step budget" in run.error
    assert not Event.objects.filter(run=run, kind=EventKind.RETRY_SCHEDULED).exists()
    assert all(op.attempts == 1 for op in Operation.objects.filter(run=run))


# --- versions -------------------------------------------------------------------------------------


def version_blocked(define, effects, code: tuple[Agent, ...] | None) -> Run:
    """A v1 run waiting for approval, approved and resumed under `code` (None: unchanged)."""
    run, interaction = waiting_for_approval(define)
    respond(interaction.pk, {"approved": True}, actor="bob")
    if code is None:
        return run_until_idle(run.pk)
    with code_defines(*code):
        return run_until_idle(run.pk)


def test_v1_a_version_missing_from_the_code_blocks_and_calls_nothing(define, effects):
    run = version_blocked(define, effects, ())
    assert (run.status, run.attention_reason) == (RunStatus.NEEDS_ATTENTION, "version_missing")
    assert effects.total == 0


def test_v2_a_fingerprint_mismatch_blocks_with_the_difference(define, effects):
    changed = make_agent(one_call("refund"), instructions="Refund everything.")
    run = version_blocked(define, effects, (changed,))
    assert run.attention_reason == "fingerprint_mismatch"
    parts = {d["part"] for d in run.attention_detail["differences"]}
    assert "instructions" in parts
    assert changed.llm.calls == 0
    assert effects.total == 0


def test_v3_an_unregistered_version_blocks(define, effects):
    run, interaction = waiting_for_approval(define)
    AgentVersion.objects.update(unregistered_at=run.created_at)
    respond(interaction.pk, {"approved": True}, actor="bob")
    run = run_until_idle(run.pk)
    assert (run.status, run.attention_reason) == (RunStatus.NEEDS_ATTENTION, "version_unregistered")
    assert effects.total == 0


def test_v5_restoring_the_old_code_then_retrying_finishes_on_the_old_version(define, effects):
    changed = make_agent(one_call("refund"), instructions="Refund everything.")
    run = version_blocked(define, effects, (changed,))
    retry(run.pk, actor="ops")
    run = run_until_idle(run.pk)
    assert (run.status, run.version, effects.total) == (RunStatus.COMPLETED, "1", 1)


def test_v6_registering_never_retries_anything_by_itself(define, effects):
    run = version_blocked(define, effects, ())
    v2 = make_agent(one_call("refund"), version="2")
    with code_defines(make_agent(one_call("refund")), v2):
        register([v2], actor="admin")
        run_until_idle(run.pk)
    run.refresh_from_db()
    assert run.status == RunStatus.NEEDS_ATTENTION
    assert not Event.objects.filter(run=run, kind=EventKind.RETRIED).exists()


def test_v7_register_validates_the_whole_batch_and_never_replaces(db):
    a, b = make_agent([], name="a"), make_agent([], name="b")
    with code_defines(a, b):
        before = AgentVersion.objects.count()
        with pytest.raises(RegistrationError, match="ghost"):
            register([a, ("ghost", "1")], actor="admin")
        assert AgentVersion.objects.count() == before
        register([a], actor="admin")
    with (
        code_defines(make_agent([], name="a", instructions="other")),
        pytest.raises(RegistrationError),
    ):
        register([("a", "1")], actor="admin")
    assert AgentVersion.objects.get(agent="a").fingerprint == a.fingerprint


def test_v8_unregister_returns_false_when_not_registered_and_names_the_runs_that_need_it(
    define, effects
):
    run, _ = waiting_for_approval(define)
    with pytest.raises(DurableConflictError) as refused:
        unregister("clerk", "1", actor="admin")
    assert refused.value.run_ids == [str(run.pk)]
    assert str(run.pk) in refused.value.message
    assert unregister("nobody", "1", actor="admin") is False


def test_v9_unregistering_keeps_the_history_and_the_dedup_records(define, effects):
    agent = define(make_agent(one_call("open_ticket")))
    run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    events, ops = Event.objects.filter(run=run).count(), Operation.objects.filter(run=run).count()
    assert unregister(agent.name, agent.version, actor="admin") is True
    assert Event.objects.filter(run=run).count() == events
    assert Operation.objects.filter(run=run).count() == ops
    assert AgentVersion.objects.filter(agent=agent.name).exists()


# --- execution ------------------------------------------------------------------------------------


def test_e1_workers_find_every_unfinished_run_at_start(define, effects):
    agent = define(make_agent(one_call("get_order")))
    queued = submit(agent.name, "a", actor="alice")
    crashed = submit(agent.name, "b", actor="alice")
    store.claim(crashed.pk, "dead-worker")
    expire_lease(crashed.pk)
    assert set(resume()) == {str(queued.pk), str(crashed.pk)}
    assert {r.pk for r in list_runs(RunStatus.QUEUED, RunStatus.RUNNING)} == {queued.pk, crashed.pk}


def test_e2_a_taken_over_or_cancelled_worker_commits_nothing_more(define, effects):
    agent = define(make_agent(one_call("charge")))
    run = submit(agent.name, "hi", actor="alice")
    old = store.claim(run.pk, "old")
    expire_lease(run.pk)
    assert store.claim(run.pk, "new") is not None
    with pytest.raises(LeaseLost):
        store.transition(old, RunStatus.COMPLETED, "completed", output="stolen")
    other = submit(agent.name, "again", actor="alice")
    mine = store.claim(other.pk, "worker")
    cancel(other.pk, actor="ops", reason="stop")
    with pytest.raises(LeaseLost):
        store.transition(mine, RunStatus.COMPLETED, "completed", output="late")
    assert Run.objects.get(pk=run.pk).output == ""
    assert Run.objects.get(pk=other.pk).status == RunStatus.CANCELLED


def test_e5_the_intent_is_committed_before_the_call_and_the_outcome_before_what_follows(
    define, effects
):
    seen: list[tuple[str, int]] = []

    @tool(recovery="safe")
    def observe(args: Amount, ctx: ToolContext) -> Receipt:
        """Look at the log while running."""
        op = Operation.objects.get(run_id=ctx.run_id, key=ctx.operation_key)
        seen.append(
            (op.status, Event.objects.filter(run_id=ctx.run_id, kind=EventKind.INTENT).count())
        )
        return Receipt(receipt_id="r")

    agent = define(
        Agent(
            name="clerk",
            version="1",
            model="claude-test",
            instructions="x",
            tools=[observe],
            llm=ScriptedModel([call(("observe", ARGS["charge"]), step=1), say("ok")]),
        )
    )
    run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    # While the handler ran, its intent was in the log (model request + tool call).
    assert seen == [(OperationStatus.STARTED, 2)]
    tool_op = Operation.objects.get(run=run, key=KEY)
    next_request = Operation.objects.get(run=run, key="step-2/model")
    assert tool_op.outcome_at <= next_request.intent_at
    kinds = list(
        Event.objects.filter(run=run, kind__in=["intent", "outcome"])
        .order_by("pk")
        .values_list("kind", "operation_key")
    )
    assert kinds == [
        ("intent", "step-1/model"),
        ("outcome", "step-1/model"),
        ("intent", KEY),
        ("outcome", KEY),
        ("intent", "step-2/model"),
        ("outcome", "step-2/model"),
    ]


def test_e7_the_step_budget_ends_a_run_as_failed_not_retried(define, effects):
    script = [call(("get_order", ARGS["get_order"]), step=n) for n in range(1, 3)]
    agent = define(make_agent(script, max_steps=2, model_retry=ModelRetry(3, 1, 1)))
    run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    assert run.status == RunStatus.FAILED
    assert "step budget exhausted: 2" in run.error
    assert run.next_attempt_at is None
