"""Approval policy: which rule a call is under, who may decide, and the receipt of a decision.

Rules are data (runtime.models.ApprovalRule); this module is what they mean:

- `policy_for` picks the policy of a call: the first enabled rule of the agent's tool whose
  condition the arguments meet (lowest priority first), else, when the tool's code requires
  approval, the default policy (one approver, anyone allowed to respond). The code's
  `requires_approval` is the floor: a rule adds requirements, it never removes the code's.
- `refusal` says why a person may not decide now (wrong group, four-eyes, expired), or None.
- `receipt` is the digest over what is approved: tool, validated arguments, agent name, version
  and fingerprint, the policy, and the approvers. It is recomputed before the call runs.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError as DjangoValidationError
from pydantic import BaseModel, ValidationError

from runtime import conditions, registry
from runtime.agents import Agent, Tool, digest
from runtime.models import (
    ApprovalRule,
    ApprovalVote,
    Event,
    ExpiryOutcome,
    Interaction,
    Run,
    WorkItem,
)


@dataclass(frozen=True)
class Policy:
    """The policy a call asks under, as kept with its work item (a later edit of the rule
    does not change it)."""

    rule_id: int | None
    rule: str
    why: str
    group: str | None = None
    quorum: int = 1
    four_eyes: bool = False
    high_risk: bool = False
    expires_after: float | None = None
    on_expiry: str = ExpiryOutcome.REJECT
    expiry_reason: str = ""
    escalate_after: float | None = None
    escalation_group: str | None = None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Policy:
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in known})


CODE_FLOOR = "the tool's code requires approval for every call"
QUESTION = Policy(rule_id=None, rule="", why="the agent asks a person")


def _rule_policy(rule: ApprovalRule, why: str) -> Policy:
    def seconds(value: dt.timedelta | None) -> float | None:
        return None if value is None else value.total_seconds()

    return Policy(
        rule_id=rule.pk,
        rule=rule.name,
        why=why,
        group=rule.approver_group.name if rule.approver_group else None,
        quorum=rule.quorum,
        four_eyes=rule.four_eyes,
        high_risk=rule.high_risk,
        expires_after=seconds(rule.expires_after),
        on_expiry=rule.on_expiry,
        expiry_reason=rule.expiry_reason,
        escalate_after=seconds(rule.escalate_after),
        escalation_group=rule.escalation_group.name if rule.escalation_group else None,
    )


def rules_by_tool(agent: Agent) -> dict[str, list[ApprovalRule]]:
    """The enabled rules of all the agent's tools in one query, each tool's as rules_for."""
    rules = ApprovalRule.objects.filter(enabled=True, agent=agent.name)
    found: dict[str, list[ApprovalRule]] = {}
    for rule in rules.select_related("approver_group", "escalation_group").order_by(
        "priority", "pk"
    ):
        found.setdefault(rule.tool, []).append(rule)
    return found


def rules_for(agent: Agent, tool: Tool) -> list[ApprovalRule]:
    """The enabled rules of the agent's tool, in the order they are tried."""
    rules = ApprovalRule.objects.filter(enabled=True, agent=agent.name, tool=tool.name)
    return list(
        rules.select_related("approver_group", "escalation_group").order_by("priority", "pk")
    )


def policy_for(
    agent: Agent, tool: Tool, args: BaseModel, rules: list[ApprovalRule] | None = None
) -> Policy | None:
    """The policy a call needs approval under, or None when it needs none. `rules`: the
    tool's rules if the caller has them (rules_for), else they are read."""
    rules = rules_for(agent, tool) if rules is None else rules
    arguments = args.model_dump(mode="json") if rules else {}  # most tools have no rules
    for rule in rules:
        try:
            matched = conditions.matches(rule.condition, arguments)
        except conditions.ConditionError as exc:
            # Fail closed: a condition that cannot be evaluated puts the call under its rule.
            return _rule_policy(rule, f"rule {rule.name!r} applies because {exc}")
        if matched:
            return _rule_policy(rule, _why(rule))
    if tool.needs_approval(args):
        return Policy(rule_id=None, rule="", why=CODE_FLOOR)
    return None


def _why(rule: ApprovalRule) -> str:
    if rule.condition == {}:
        return f"rule {rule.name!r} applies to every call of {rule.tool}"
    return f"rule {rule.name!r} applies: its condition {describe(rule.condition)} holds"


def describe(condition: Any) -> str:
    """A condition in the infix form people read: amount_cents > 50000 and currency in [...]."""
    if not isinstance(condition, dict) or len(condition) != 1:
        return repr(condition)
    operator, operands = next(iter(condition.items()))
    if operator == "var":
        return str(operands[0] if isinstance(operands, list) else operands)
    operands = operands if isinstance(operands, list) else [operands]
    parts = [describe(o) if isinstance(o, dict) else _shown(o) for o in operands]
    if operator in ("and", "or"):
        return "(" + f" {operator} ".join(parts) + ")"
    if operator == "!":
        return f"not {parts[0]}"
    if operator == "!!":
        return parts[0]
    if operator in conditions.COMPARE and len(parts) == 3:
        return f"{parts[0]} {operator} {parts[1]} {operator} {parts[2]}"
    return f" {operator} ".join(parts)


def _shown(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)


# --- rules, checked when saved -------------------------------------------------------------------


def check_rule(rule: ApprovalRule) -> None:
    """Raise Django's ValidationError unless `rule` names a tool of its agent in the code and
    its condition is valid for that tool's input schema (in every version of the agent in the
    code that has the tool), and its numbers and groups make sense."""
    errors: dict[str, list[str]] = {}
    versions = [
        agent
        for (name, _), agent in sorted(registry.code_agents().items())
        if name == rule.agent and agent.tool_named(rule.tool)
    ]
    if not any(name == rule.agent for name, _ in registry.code_agents()):
        errors["agent"] = [f"no agent {rule.agent!r} is defined in the code"]
    elif not versions:
        errors["tool"] = [f"agent {rule.agent!r} has no tool {rule.tool!r} in any version"]
    for agent in versions:
        tool = agent.tool_named(rule.tool)
        assert tool is not None
        if tool.is_question:
            errors.setdefault("tool", []).append(
                f"{rule.tool!r} asks a question; it is not approved"
            )
            break
        try:
            conditions.check(rule.condition, tool.input_model.model_json_schema())
        except conditions.ConditionError as exc:
            errors.setdefault("condition", []).extend(
                f"version {agent.version}: {problem}" for problem in exc.problems
            )
    if rule.quorum < 1:
        errors["quorum"] = ["at least one approver is needed"]
    if rule.approver_group_id is None and rule.quorum > 1:
        errors.setdefault("approver_group", []).append(
            "a quorum of more than one needs a group whose members count"
        )
    if rule.approver_group_id is not None:
        members = get_user_model().objects.filter(groups=rule.approver_group_id).count()
        if members and members < rule.quorum:
            errors.setdefault("quorum", []).append(
                f"the group has {members} member(s), fewer than the quorum of {rule.quorum}"
            )
    if rule.on_expiry == ExpiryOutcome.ESCALATE and rule.escalation_group_id is None:
        errors["escalation_group"] = ["escalating on expiry needs an escalation group"]
    if rule.escalate_after is not None and rule.escalation_group_id is None:
        errors.setdefault("escalation_group", []).append("an escalation time needs a group to tell")
    if rule.on_expiry == ExpiryOutcome.REJECT and rule.expires_after and not rule.expiry_reason:
        errors["expiry_reason"] = ["say why an expired request is rejected: the agent reads it"]
    for name in ("expires_after", "escalate_after"):
        value = getattr(rule, name)
        if value is not None and value <= dt.timedelta(0):
            errors.setdefault(name, []).append("must be a positive duration")
    if (
        rule.expires_after
        and rule.escalate_after
        and rule.escalate_after >= rule.expires_after
        and rule.expires_after > dt.timedelta(0)
    ):
        errors.setdefault("escalate_after", []).append("must come before the expiry")
    if errors:
        raise DjangoValidationError(errors)


# --- who may decide ------------------------------------------------------------------------------


def starter(run: Run | Any) -> str:
    """Who submitted the run (its "submitted" event's actor)."""
    run_id = run.pk if isinstance(run, Run) else run
    found = (
        Event.objects.filter(run_id=run_id, kind="submitted")
        .values_list("actor", flat=True)
        .first()
    )
    return found or ""


def groups_of(username: str) -> set[str]:
    return set(
        get_user_model()
        .objects.filter(username=username, is_active=True)
        .values_list("groups__name", flat=True)
        .exclude(groups__name=None)
    )


def allowed_groups(item: WorkItem) -> list[str]:
    policy = Policy.from_json(item.policy)
    allowed = [policy.group] if policy.group else []
    if item.escalated_at and policy.escalation_group:
        allowed.append(policy.escalation_group)
    return allowed


def refusal(
    item: WorkItem | None,
    interaction: Interaction,
    actor: str,
    *,
    approving: bool,
    editing: bool = False,
    now: dt.datetime,
) -> str | None:
    """Why `actor` may not decide (or edit) this pending approval now; None when they may."""
    if item is None:
        return None
    policy = Policy.from_json(item.policy)
    if (
        item.expires_at is not None
        and now >= item.expires_at
        and policy.on_expiry == ExpiryOutcome.REJECT
    ):
        return f"this request expired at {_when(item.expires_at)} under rule {policy.rule!r}"
    groups = allowed_groups(item)
    if groups and not (groups_of(actor) & set(groups)):
        named = " or ".join(repr(g) for g in groups)
        return f"{actor} is not in {named}, whose members decide under rule {policy.rule!r}"
    if policy.four_eyes and (approving or editing):
        started = starter(interaction.run_id)
        if actor == started:
            return (
                f"four-eyes: {actor} started this run, so another person must "
                f"{'edit' if editing else 'approve'} it (rule {policy.rule!r})"
            )
        if approving and item.edited_by and actor == item.edited_by:
            return (
                f"four-eyes: {actor} edited the arguments, so another person must approve "
                f"them (rule {policy.rule!r})"
            )
    return None


def candidates(item: WorkItem | None, interaction: Interaction, approved: set[str]) -> list[str]:
    """The people who may still approve: the allowed groups' active members, less four-eyes
    exclusions and those who approved already. Empty when the policy names no group (anyone
    allowed to respond may)."""
    if item is None:
        return []
    groups = allowed_groups(item)
    if not groups:
        return []
    users = (
        get_user_model()
        .objects.filter(groups__name__in=groups, is_active=True)
        .values_list("username", flat=True)
        .distinct()
        .order_by("username")
    )
    excluded = set(approved)
    if Policy.from_json(item.policy).four_eyes:
        excluded |= {starter(interaction.run_id), item.edited_by}
    return [u for u in users if u not in excluded]


def _when(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# --- arguments: edits and what the model is told -------------------------------------------------


def current_arguments(interaction: Interaction, item: WorkItem | None) -> dict[str, Any]:
    """The arguments that will run: the approver's edit if there is one, else the proposal."""
    if item is not None and item.arguments is not None:
        return dict(item.arguments)
    return dict(interaction.payload.get("arguments", {}))


def changes(proposed: Mapping[str, Any], edited: Mapping[str, Any]) -> dict[str, Any]:
    """The fields an edit changed, by dotted path:
    {"amount_cents": {"proposed": 5000, "approved": 3000}}."""
    changed: dict[str, Any] = {}

    def walk(before: Any, after: Any, path: str) -> None:
        if isinstance(before, dict) and isinstance(after, dict):
            for key in sorted(set(before) | set(after)):
                walk(before.get(key), after.get(key), f"{path}.{key}" if path else key)
        elif before != after:
            changed[path or "arguments"] = {"proposed": before, "approved": after}

    walk(dict(proposed), dict(edited), "")
    return changed


def validated(tool: Tool, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """`arguments` as the tool's input model validates them (raises pydantic's ValidationError)."""
    return tool.input_model.model_validate(dict(arguments)).model_dump(mode="json")


def edited_result(result: Any, changed: Mapping[str, Any]) -> dict[str, Any]:
    """The tool result the model sees for a call an operator edited before approving: what
    changed, field by field, so it does not believe its own arguments ran."""
    fields = ", ".join(sorted(changed))
    return {
        "operator_edited_arguments": dict(changed),
        "note": f"An operator changed {fields} before approving this call; it ran with the "
        "approved values, not the ones you proposed.",
        "result": result,
    }


# --- receipts ------------------------------------------------------------------------------------


def approvers(interaction: Interaction, arguments_sha256: str) -> list[str]:
    """The distinct approvers of these arguments, sorted."""
    return sorted(
        ApprovalVote.objects.filter(interaction=interaction, arguments_sha256=arguments_sha256)
        .values_list("approver", flat=True)
        .distinct()
    )


def receipt(
    run: Run,
    agent: Agent | None,
    interaction: Interaction,
    item: WorkItem | None,
    *,
    fingerprint: str,
) -> dict[str, Any]:
    """What a receipt's digest covers, computed from the code and the database as they are now.

    `fingerprint` is the agent's: when approving, the run's (what the approver saw asking);
    before the call, the code's that is about to run it. The arguments are validated by the
    tool's input model; without the code (an approval while the version is out of the code)
    they are taken as stored, which is as the code validated them when they were written.
    Raises ValueError when the arguments no longer validate under the tool's input schema.
    """
    arguments = current_arguments(interaction, item)
    tool = agent.tool_named(interaction.tool_name) if agent is not None else None
    if agent is not None and tool is None:
        raise ValueError(
            f"the code of {run.agent} {run.version} has no tool {interaction.tool_name}"
        )
    if tool is not None:
        try:
            arguments = validated(tool, arguments)
        except ValidationError as exc:
            raise ValueError(f"the approved arguments no longer validate: {exc}") from None
    return {
        "tool": interaction.tool_name,
        "arguments": arguments,
        "agent": run.agent,
        "version": run.version,
        "fingerprint": fingerprint,
        "rule": item.policy if item is not None else {},
        "approvers": approvers(interaction, digest(arguments)),
    }


def receipt_differences(
    saved: Mapping[str, Any], current: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The parts of a receipt that differ: [{"part", "saved", "current"}]."""
    return [
        {"part": part, "saved": saved.get(part), "current": current.get(part)}
        for part in ("tool", "arguments", "agent", "version", "fingerprint", "rule", "approvers")
        if saved.get(part) != current.get(part)
    ]
