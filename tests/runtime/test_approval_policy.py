"""Approval policy: rules as data, quorum, four-eyes, high risk, expiry and escalation, receipts,
edits before approving, and the work queue's claims. On SQLite and PostgreSQL."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from pydantic import BaseModel, field_validator

from runtime import ToolContext, respond, submit, tool, work
from runtime import conditions as conds
from runtime.clock import frozen
from runtime.errors import (
    ApprovalRefused,
    ClaimConflict,
    InvalidInput,
    ReauthenticationRequired,
)
from runtime.models import (
    ApprovalReceipt,
    ApprovalRule,
    ApprovalTimer,
    ApprovalVote,
    AttentionReason,
    Event,
    EventKind,
    Interaction,
    InteractionStatus,
    Operation,
    RunStatus,
    WorkItem,
)
from runtime.testing import run_until_idle
from tests.conftest import EFFECTS, Receipt, make_agent, one_call
from tests.runtime.policy_support import OVER_1000, people, rule

BIG = {"order_id": "A1", "amount_cents": 5000}
SMALL = {"order_id": "A1", "amount_cents": 500}


@pytest.fixture
def groups(db):
    return people()


def waiting(define, args=BIG, *, by="otto", tool_name="charge"):
    agent = define(make_agent(one_call(tool_name, args)))
    run = run_until_idle(submit(agent.name, "refund A1", actor=by).pk)
    assert run.status == RunStatus.WAITING, run.status
    return run, Interaction.objects.get(run=run)


def approve(interaction, who, **kw):
    return respond(interaction.pk, {"approved": True}, actor=who, **kw)


def seen_by_model(run):
    """The tool result the model was sent after the call."""
    return json.loads(run.transcript[2]["content"][0]["content"])


def nothing_changed(interaction, events_before):
    interaction.refresh_from_db()
    assert interaction.status == InteractionStatus.PENDING
    assert Event.objects.count() == events_before


# --- rules: matching, the code floor -------------------------------------------------------------


def test_a_rule_makes_a_call_over_its_threshold_wait_and_says_why(define, groups, effects):
    define(make_agent([]), register_them=False)
    rule(condition=OVER_1000)
    run, interaction = waiting(define)
    item = interaction.work
    assert item.policy["rule"] == "charge rule"
    assert "amount_cents > 1000" in item.policy["why"]
    applied = Event.objects.get(run=run, kind=EventKind.APPROVAL_RULE_APPLIED)
    assert applied.data["rule"] == "charge rule"
    assert effects.total == 0


def test_a_call_under_the_threshold_runs_without_asking(define, groups, effects):
    define(make_agent([]), register_them=False)
    rule(condition=OVER_1000)
    agent = define(make_agent(one_call("charge", SMALL)))
    run = run_until_idle(submit(agent.name, "refund A1", actor="otto").pk)
    assert run.status == RunStatus.COMPLETED
    assert not Interaction.objects.exists()
    assert effects.total == 1


def test_the_codes_requires_approval_stays_the_floor(define, groups, effects):
    define(make_agent([]), register_them=False)
    rule("refund", condition=OVER_1000)  # does not match 500, cannot lift the code's rule
    run, interaction = waiting(define, SMALL, tool_name="refund")
    assert interaction.work.policy["rule"] == ""
    assert "code requires approval" in interaction.work.policy["why"]
    approve(interaction, "otto")  # the default policy: anyone allowed to respond
    assert run_until_idle(run.pk).status == RunStatus.COMPLETED


def test_a_disabled_rule_does_not_apply(define, groups, effects):
    define(make_agent([]), register_them=False)
    rule(condition=OVER_1000, enabled=False)
    agent = define(make_agent(one_call("charge", BIG)))
    assert run_until_idle(submit(agent.name, "go", actor="otto").pk).status == "completed"


# --- rules checked when saved --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("condition", "problem"),
    [
        ({">": [{"var": "amount"}, 1000]}, "no argument 'amount'"),
        ({">": [{"var": "order_id"}, 1000]}, "compares numbers"),
        ({"==": [{"var": "amount_cents"}, "lots"]}, "can never equal"),
        ({"in": [{"var": "amount_cents"}, ["a", "b"]]}, "can never equal"),
        ({"var": "amount_cents"}, "must be true or false"),
        ({"map": [[1, 2], {"var": ""}]}, "must be true or false"),
        ({"and": [{"cat": ["a", "b"]}]}, "not allowed"),
        ({">": [{"var": "__class__"}, 1]}, "no argument '__class__'"),
        ([1, 2], "one operation"),
        ({">": [1]}, "takes 2 to 3 operands"),
    ],
)
def test_a_condition_that_does_not_fit_the_schema_is_refused_at_save(
    define, groups, condition, problem
):
    define(make_agent([]), register_them=False)
    with pytest.raises(ValidationError) as refused:
        rule(condition=condition)
    assert problem in str(refused.value.message_dict["condition"])
    assert not ApprovalRule.objects.exists()


def test_a_rule_for_a_tool_the_agent_lacks_is_refused(define, groups):
    define(make_agent([]), register_them=False)
    with pytest.raises(ValidationError, match="no tool 'wire'"):
        rule("wire")
    with pytest.raises(ValidationError, match="no agent 'nobody'"):
        rule(agent="nobody")
    assert not ApprovalRule.objects.exists()


def test_a_rule_s_numbers_and_groups_must_make_sense(define, groups):
    define(make_agent([]), register_them=False)
    with pytest.raises(ValidationError) as refused:
        rule(quorum=5, on_expiry="escalate", seconds={"expires_after": 60})
    assert "fewer than the quorum" in str(refused.value.message_dict["quorum"])
    assert "escalation group" in str(refused.value.message_dict["escalation_group"])
    with pytest.raises(ValidationError, match="the agent reads it"):
        rule(seconds={"expires_after": 60})
    assert not ApprovalRule.objects.exists()


def test_hostile_conditions_are_bounded_and_never_run_code(define, groups):
    define(make_agent([]), register_them=False)
    deep: dict = {"!": [{"var": "amount_cents"}]}
    for _ in range(40):
        deep = {"!": [deep]}
    huge = {"in": [{"var": "order_id"}, ["x" * 100] * 200]}
    for condition, problem in [(deep, "nested deeper"), (huge, "larger than")]:
        with pytest.raises(ValidationError, match=problem):
            rule(condition=condition)
    # Text that would be code elsewhere is only ever a value here.
    harmless = {"==": [{"var": "order_id"}, "__import__('os').system('touch /tmp/x')"]}
    saved = rule(condition=harmless)
    assert conds.matches(saved.condition, {"order_id": "A1", "amount_cents": 1}) is False


def test_an_evaluation_over_its_budget_fails_closed(define, groups, monkeypatch, effects):
    define(make_agent([]), register_them=False)
    rule(condition={"in": [{"var": "order_id"}, [f"id{i}" for i in range(200)]]})
    monkeypatch.setattr(conds, "BUDGET", 1)
    _run, interaction = waiting(define, SMALL)
    assert "could not be evaluated" in interaction.work.policy["why"]
    assert effects.total == 0


# --- who may decide ------------------------------------------------------------------------------


def test_a_quorum_of_two_runs_the_call_once_the_second_approves(define, groups, effects):
    define(make_agent([]), register_them=False)
    rule(condition=OVER_1000, quorum=2)
    run, interaction = waiting(define)
    approve(interaction, "ann")
    interaction.refresh_from_db()
    assert interaction.status == InteractionStatus.PENDING
    counted = Event.objects.get(run=run, kind=EventKind.APPROVAL_COUNTED)
    assert counted.data["approvers"] == ["ann"]
    assert counted.data["quorum"] == 2
    approve(interaction, "ann")  # the same approval again: harmless, counted once
    assert Event.objects.filter(kind=EventKind.APPROVAL_COUNTED).count() == 1
    assert work.work_item(interaction) is not None
    assert run_until_idle(run.pk).status == RunStatus.WAITING
    approve(interaction, "ben")
    granted = Event.objects.get(run=run, kind=EventKind.APPROVAL_GRANTED)
    assert granted.data["approvers"] == ["ann", "ben"]
    run = run_until_idle(run.pk)
    assert run.status == RunStatus.COMPLETED
    assert effects.total == 1
    receipt = ApprovalReceipt.objects.get(pk=interaction.pk)
    assert receipt.contents["approvers"] == ["ann", "ben"]
    assert receipt.contents["arguments"] == BIG
    assert receipt.used_at is not None
    assert WorkItem.objects.get(pk=interaction.pk).decision_seconds is not None


def test_one_rejection_decides_under_a_quorum(define, groups, effects):
    define(make_agent([]), register_them=False)
    rule(condition=OVER_1000, quorum=2)
    run, interaction = waiting(define)
    approve(interaction, "ann")
    respond(interaction.pk, {"approved": False, "reason": "not this one"}, actor="ben")
    run = run_until_idle(run.pk)
    assert seen_by_model(run)["reason"] == "not this one"
    assert effects.total == 0


def test_someone_outside_the_group_is_refused_and_nothing_changes(define, groups):
    define(make_agent([]), register_them=False)
    rule(condition=OVER_1000)
    _run, interaction = waiting(define)
    before = Event.objects.count()
    for decision in ({"approved": True}, {"approved": False, "reason": "no"}):
        with pytest.raises(ApprovalRefused, match="otto is not in 'finance'"):
            respond(interaction.pk, decision, actor="otto")
    nothing_changed(interaction, before)
    assert not ApprovalVote.objects.exists()


def test_four_eyes_refuses_the_person_who_started_the_run(define, groups, effects):
    define(make_agent([]), register_them=False)
    rule(condition=OVER_1000, four_eyes=True)
    run, interaction = waiting(define, by="ann")
    before = Event.objects.count()
    with pytest.raises(ApprovalRefused, match="four-eyes: ann started this run"):
        approve(interaction, "ann")
    nothing_changed(interaction, before)
    approve(interaction, "ben")
    assert run_until_idle(run.pk).status == RunStatus.COMPLETED


def test_a_high_risk_approval_needs_a_recent_sign_in(define, groups):
    define(make_agent([]), register_them=False)
    rule(condition=OVER_1000, high_risk=True)
    _run, interaction = waiting(define)
    before = Event.objects.count()
    with pytest.raises(ReauthenticationRequired, match="high-risk"):
        approve(interaction, "ann")
    nothing_changed(interaction, before)
    approve(interaction, "ann", reauthenticated=True)
    interaction.refresh_from_db()
    assert interaction.status == InteractionStatus.ANSWERED


# --- expiry and escalation -----------------------------------------------------------------------


def test_expiry_rejects_once_with_the_rule_s_reason(define, groups, effects):
    define(make_agent([]), register_them=False)
    rule(condition=OVER_1000, seconds={"expires_after": 600}, expiry_reason="nobody decided")
    with frozen() as clock:
        run, interaction = waiting(define)
        clock.advance(599)
        assert work.fire_due_timers() == 1  # the warning, halfway or 15 min before
        assert Event.objects.filter(kind=EventKind.APPROVAL_EXPIRING).count() == 1
        clock.advance(1)
        with pytest.raises(ApprovalRefused, match="expired at"):
            approve(interaction, "ann")
        assert work.fire_due_timers() == 1
        assert work.fire_due_timers() == 0
    expired = Event.objects.get(run=run, kind=EventKind.APPROVAL_EXPIRED)
    assert expired.actor == "runtime"
    assert expired.data["outcome"] == "reject"
    run = run_until_idle(run.pk)
    assert run.status == RunStatus.COMPLETED
    assert seen_by_model(run)["reason"] == "nobody decided"
    assert effects.total == 0
    assert ApprovalTimer.objects.filter(fired_at__isnull=True).count() == 0


def test_escalation_flags_the_item_and_lets_the_escalation_group_decide(define, groups, effects):
    define(make_agent([]), register_them=False)
    rule(condition=OVER_1000, escalation_group="leads", seconds={"escalate_after": 60})
    with frozen() as clock:
        run, interaction = waiting(define)
        with pytest.raises(ApprovalRefused, match="lee is not in 'finance'"):
            approve(interaction, "lee")
        clock.advance(60)
        assert work.fire_due_timers() == 1
        assert work.fire_due_timers() == 0
        item = WorkItem.objects.get(pk=interaction.pk)
        assert item.flagged and item.escalated_at is not None
        escalated = Event.objects.get(run=run, kind=EventKind.APPROVAL_ESCALATED)
        assert escalated.data["group"] == "leads"
        approve(interaction, "lee")
    assert run_until_idle(run.pk).status == RunStatus.COMPLETED


def test_keep_waiting_flags_the_item_and_waits(define, groups):
    define(make_agent([]), register_them=False)
    rule(condition=OVER_1000, on_expiry="keep_waiting", seconds={"expires_after": 60})
    with frozen() as clock:
        run, interaction = waiting(define)
        clock.advance(61)
        assert work.fire_due_timers() == 2  # the warning and the expiry
        approve(interaction, "ann")  # still allowed: it keeps waiting
    item = WorkItem.objects.get(pk=interaction.pk)
    assert item.flagged and item.expired_at is not None
    assert (
        Event.objects.get(run=run, kind=EventKind.APPROVAL_EXPIRED).data["outcome"]
        == "keep_waiting"
    )


def test_a_timer_of_a_decided_item_fires_without_effect(define, groups):
    define(make_agent([]), register_them=False)
    rule(condition=OVER_1000, seconds={"expires_after": 60}, expiry_reason="late")
    with frozen() as clock:
        _run, interaction = waiting(define)
        approve(interaction, "ann")
        clock.advance(61)
        assert work.fire_due_timers() == 2
    assert not Event.objects.filter(kind__in=["approval_expired", "approval_expiring"]).exists()
    interaction.refresh_from_db()
    assert interaction.response == {"approved": True, "reason": ""}


# --- receipts ------------------------------------------------------------------------------------


class Amount(BaseModel):
    # The tests' Amount with the same JSON schema, and a validator that changes the amount.
    order_id: str
    amount_cents: int

    @field_validator("amount_cents")
    @classmethod
    def _double(cls, value: int) -> int:
        return value * 2


def test_a_code_change_between_approval_and_execution_blocks_the_call(define, groups, effects):
    define(make_agent([]), register_them=False)
    rule(condition=OVER_1000)
    run, interaction = waiting(define)
    approve(interaction, "ann")

    @tool(name="charge", recovery="manual")
    def changed(args: Amount, ctx: ToolContext) -> Receipt:
        """Move money (not idempotent on its own)."""
        return Receipt(receipt_id=EFFECTS.apply(ctx.operation_id))

    agent = make_agent(one_call("charge", BIG))
    swapped = type(agent)(**{**agent.__dict__, "tools": [changed, *agent.tools[1:]]})
    # The JSON schema is the same, so the fingerprint is too: only the receipt can tell.
    assert swapped.fingerprint == agent.fingerprint
    define(swapped, register_them=False)
    run = run_until_idle(run.pk)
    assert run.status == RunStatus.NEEDS_ATTENTION
    assert run.attention_reason == AttentionReason.RECEIPT_MISMATCH
    assert "arguments" in run.attention_detail["message"]
    # Nobody approved the arguments that would run now.
    difference, approvers = run.attention_detail["differences"]
    assert approvers == {"part": "approvers", "saved": ["ann"], "current": []}
    assert difference["saved"]["amount_cents"] == 5000
    assert difference["current"]["amount_cents"] == 10000
    assert effects.total == 0
    assert not Operation.objects.filter(run=run, kind="tool").exists()


def test_arguments_changed_after_approval_block_the_call(define, groups, effects):
    define(make_agent([]), register_them=False)
    rule(condition=OVER_1000)
    run, interaction = waiting(define)
    approve(interaction, "ann")
    WorkItem.objects.filter(pk=interaction.pk).update(arguments={**BIG, "amount_cents": 9})
    run = run_until_idle(run.pk)
    assert run.attention_reason == AttentionReason.RECEIPT_MISMATCH
    assert effects.total == 0


def test_an_approval_is_used_once(define, groups, effects):
    define(make_agent([]), register_them=False)
    rule(condition=OVER_1000)
    run, interaction = waiting(define)
    approve(interaction, "ann")
    ApprovalReceipt.objects.filter(pk=interaction.pk).update(used_at=interaction.created_at)
    run = run_until_idle(run.pk)
    assert run.attention_reason == AttentionReason.RECEIPT_MISMATCH
    assert "used already" in run.attention_detail["message"]
    assert effects.total == 0


# --- edit before approving -----------------------------------------------------------------------


def test_an_edit_runs_and_the_model_is_told_exactly_what_changed(define, groups, effects):
    define(make_agent([]), register_them=False)
    rule(condition=OVER_1000)
    run, interaction = waiting(define)
    work.edit(interaction.pk, {**BIG, "amount_cents": 3000}, actor="ann")
    edited = Event.objects.get(run=run, kind=EventKind.ARGUMENTS_EDITED)
    assert edited.data["changed"] == {"amount_cents": {"proposed": 5000, "approved": 3000}}
    approve(interaction, "ben")
    run = run_until_idle(run.pk)
    assert run.status == RunStatus.COMPLETED
    op = Operation.objects.get(run=run, kind="tool")
    assert op.input["arguments"] == BIG
    assert op.input["executed_arguments"] == {**BIG, "amount_cents": 3000}
    told = seen_by_model(run)
    assert told["operator_edited_arguments"] == {
        "amount_cents": {"proposed": 5000, "approved": 3000}
    }
    assert "amount_cents" in told["note"]
    assert told["result"] == op.result
    receipt = ApprovalReceipt.objects.get(pk=interaction.pk)
    assert receipt.contents["arguments"]["amount_cents"] == 3000


def test_a_bad_edit_is_refused_with_the_schema_s_reason(define, groups):
    define(make_agent([]), register_them=False)
    rule(condition=OVER_1000)
    _run, interaction = waiting(define)
    before = Event.objects.count()
    for bad, problem in [
        ({**BIG, "amount_cents": "lots"}, "amount_cents"),
        ({"order_id": "A1"}, "amount_cents: Field required"),
        ("not an object", "must be an object"),
        (BIG, "changes nothing"),
    ]:
        with pytest.raises(InvalidInput, match=problem):
            work.edit(interaction.pk, bad, actor="ann")
    with pytest.raises(ApprovalRefused, match="edit permission"):
        work.edit(interaction.pk, {**BIG, "amount_cents": 1}, actor="nobody")
    nothing_changed(interaction, before)
    assert WorkItem.objects.get(pk=interaction.pk).arguments is None


def test_with_four_eyes_an_edit_needs_another_person_and_voids_earlier_approvals(
    define, groups, effects
):
    define(make_agent([]), register_them=False)
    rule(condition=OVER_1000, four_eyes=True, quorum=2)
    run, interaction = waiting(define, by="otto")
    approve(interaction, "cat")  # 1 of 2, for the proposed arguments
    work.edit(interaction.pk, {**BIG, "amount_cents": 3000}, actor="ann")
    with pytest.raises(ApprovalRefused, match="four-eyes: ann edited the arguments"):
        approve(interaction, "ann")
    approve(interaction, "ben")  # 1 of 2 for the edited ones: cat's was for others
    interaction.refresh_from_db()
    assert interaction.status == InteractionStatus.PENDING
    approve(interaction, "cat")
    run = run_until_idle(run.pk)
    assert run.status == RunStatus.COMPLETED
    assert ApprovalReceipt.objects.get(pk=interaction.pk).contents["approvers"] == ["ben", "cat"]


# --- the queue -----------------------------------------------------------------------------------


def test_a_claim_shows_who_is_on_it_lapses_and_can_be_released(define, groups, settings):
    settings.AGENTOPS_CLAIM_SECONDS = 600
    define(make_agent([]), register_them=False)
    rule(condition=OVER_1000)
    with frozen() as clock:
        run, interaction = waiting(define)
        assert work.claim(interaction.pk, actor="ann").claimed_by == "ann"
        with pytest.raises(ClaimConflict, match="ann is on it"):
            work.claim(interaction.pk, actor="ben")
        with pytest.raises(ClaimConflict, match="ben holds no claim"):
            work.release(interaction.pk, actor="ben")
        clock.advance(601)
        assert work.claim(interaction.pk, actor="ben").claimed_by == "ben"
        work.release(interaction.pk, actor="ben")
        assert work.claim(interaction.pk, actor="cat").claimed_by == "cat"
    kinds = list(
        Event.objects.filter(run=run, kind__startswith="item_")
        .order_by("id")
        .values_list("kind", "actor")
    )
    assert kinds == [
        ("item_claimed", "ann"),
        ("item_claimed", "ben"),
        ("item_released", "ben"),
        ("item_claimed", "cat"),
    ]


def test_assigning_needs_someone_who_may_decide(define, groups):
    define(make_agent([]), register_them=False)
    rule(condition=OVER_1000)
    _run, interaction = waiting(define)
    with pytest.raises(ApprovalRefused, match="otto is not in 'finance'"):
        work.assign(interaction.pk, "otto", actor="ann")
    with pytest.raises(InvalidInput, match="no active user"):
        work.assign(interaction.pk, "ghost", actor="ann")
    item = work.assign(interaction.pk, "ben", actor="ann")
    assert (item.assigned_to, item.claimed_by) == ("ben", "ben")


def test_the_admin_shows_a_bad_condition_on_its_field_and_saves_nothing(
    define, groups, admin_client
):
    define(make_agent([]), register_them=False)
    response = admin_client.post(
        "/admin/agentops/approvalrule/add/",
        {
            "name": "typo",
            "agent": "clerk",
            "tool": "charge",
            "condition": '{">": [{"var": "amount"}, 1000]}',
            "quorum": 1,
            "on_expiry": "reject",
            "priority": 100,
            "enabled": "on",
        },
    )
    assert response.status_code == 200
    assert "the tool has no argument" in response.content.decode()
    assert not ApprovalRule.objects.exists()
