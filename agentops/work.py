"""What the console shows of the approval policy and the work queue (reads only).

The decision page's policy panel (which rule and why, who approved so far, who may still, when
it expires, who is on it, the arguments proposed / approved / executed, the receipt), the edit
form generated from the tool's input schema, and the inbox's filters and urgency order.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

from django.db.models import F, Q

from runtime import clock, policy
from runtime.agents import Tool, digest
from runtime.models import (
    ApprovalReceipt,
    Interaction,
    InteractionKind,
    Operation,
    WorkItem,
)

# Inbox filters: ?show=mine | unassigned | urgent.
FILTERS = {
    "": "Everything",
    "mine": "Mine",
    "unassigned": "Unassigned",
    "urgent": "About to expire or escalated",
}
# An item expiring within this many seconds counts as about to expire.
URGENT_SECONDS = 3600


def item_of(interaction: Interaction) -> WorkItem | None:
    try:
        return interaction.work
    except WorkItem.DoesNotExist:
        return None


def live_claim(item: WorkItem | None, now: dt.datetime) -> str:
    """Who is on the item now ("" when nobody holds a live claim)."""
    if item is None or not item.claimed_by or item.claim_expires_at is None:
        return ""
    return item.claimed_by if item.claim_expires_at > now else ""


def seconds_left(item: WorkItem | None, now: dt.datetime) -> float | None:
    if item is None or item.expires_at is None:
        return None
    return (item.expires_at - now).total_seconds()


@dataclass(frozen=True)
class EditField:
    """One input of the edit form, generated from the tool's input schema."""

    name: str
    label: str
    kind: str  # "number", "integer", "boolean", "choice", "text", "json"
    value: str
    required: bool
    choices: tuple[str, ...] = ()


def edit_fields(tool: Tool | None, arguments: dict[str, Any]) -> list[EditField]:
    if tool is None:
        return []
    schema = tool.input_model.model_json_schema()
    required = set(schema.get("required", []))
    fields = []
    for name, prop in schema.get("properties", {}).items():
        value = arguments.get(name)
        kind = {"integer": "integer", "number": "number", "boolean": "boolean"}.get(
            prop.get("type", ""), "text"
        )
        choices: tuple[str, ...] = ()
        if "enum" in prop:
            kind, choices = "choice", tuple(str(v) for v in prop["enum"])
        elif prop.get("type") in ("array", "object") or "type" not in prop:
            kind = "json"
        shown = json.dumps(value) if kind == "json" else ("" if value is None else str(value))
        fields.append(
            EditField(
                name=name,
                label=prop.get("title", name),
                kind=kind,
                value=shown,
                required=name in required,
                choices=choices,
            )
        )
    return fields


def parse_edit(fields: list[EditField], posted: Any) -> tuple[dict[str, Any], list[str]]:
    """The arguments typed into the edit form, converted by each field's kind (the runtime
    validates them against the schema); and what could not be read at all."""
    arguments: dict[str, Any] = {}
    problems = []
    for field in fields:
        raw = posted.get(f"arg-{field.name}", "")
        if field.kind == "boolean":
            arguments[field.name] = raw == "on"
            continue
        if raw == "" and not field.required:
            continue
        try:
            if field.kind == "integer":
                arguments[field.name] = int(raw)
            elif field.kind == "number":
                arguments[field.name] = float(raw)
            elif field.kind == "json":
                arguments[field.name] = json.loads(raw)
            else:
                arguments[field.name] = raw
        except ValueError:
            problems.append(f"{field.label}: {raw!r} is not a valid {field.kind}")
    return arguments, problems


def policy_detail(
    interaction: Interaction, tool: Tool | None, op: Operation | None, viewer: str
) -> dict[str, Any]:
    """The policy panel of a decision page (`op`: the call's operation, once it has one), as
    `viewer` sees it."""
    item = item_of(interaction)
    now = clock.now()
    rules = policy.Policy.from_json(item.policy) if item else None
    proposed = (interaction.payload or {}).get("arguments")
    current = policy.current_arguments(interaction, item) if proposed is not None else None
    approved_by = policy.approvers(interaction, digest(current)) if current is not None else []
    executed = None
    if op is not None and isinstance(op.input, dict):
        executed = op.input.get("executed_arguments", op.input.get("arguments"))
    try:
        receipt: ApprovalReceipt | None = interaction.receipt
    except ApprovalReceipt.DoesNotExist:
        receipt = None
    is_approval = interaction.kind == InteractionKind.TOOL_APPROVAL
    return {
        "item": item,
        "rules": rules,
        "quorum": rules.quorum if rules else 1,
        "approved_by": approved_by,
        "may_still": policy.candidates(item, interaction, set(approved_by)),
        "groups": policy.allowed_groups(item) if item else [],
        "seconds_left": seconds_left(item, now),
        "claimed_by": live_claim(item, now),
        "proposed": proposed,
        "approved": current,
        "executed": executed,
        "changed": policy.changes(proposed, current) if proposed is not None and current else {},
        "receipt": receipt,
        "edit_fields": edit_fields(tool, current or {}) if is_approval else [],
        "reauth_required": bool(rules and rules.high_risk),
        "refusals": refusals(interaction, item, viewer, now),
    }


def refusals(
    interaction: Interaction, item: WorkItem | None, viewer: str, now: dt.datetime
) -> dict[str, str | None]:
    """Why `viewer` may not approve, reject or edit this approval now (None: they may).

    The runtime's own check, so that a page (and its live pushes) offers a person only the
    decisions the verbs would accept from them; the permission to answer is the template's.
    """
    if interaction.kind != InteractionKind.TOOL_APPROVAL:
        return {"approve": None, "reject": None, "edit": None}

    def why(*, approving: bool, editing: bool = False) -> str | None:
        return policy.refusal(
            item, interaction, viewer, approving=approving, editing=editing, now=now
        )

    return {
        "approve": why(approving=True),
        "reject": why(approving=False),
        "edit": why(approving=False, editing=True),
    }


def inbox_filter(show: str, user: str, now: dt.datetime) -> Q:
    """The pending interactions an inbox filter keeps."""
    live = Q(work__claimed_by=user, work__claim_expires_at__gt=now)
    if show == "mine":
        return Q(work__assigned_to=user) | live
    if show == "unassigned":
        nobody_on_it = Q(work__claimed_by="") | Q(work__claim_expires_at__lte=now)
        return Q(work__isnull=True) | (Q(work__assigned_to="") & nobody_on_it)
    if show == "urgent":
        soon = now + dt.timedelta(seconds=URGENT_SECONDS)
        return Q(work__flagged=True) | Q(work__expires_at__lte=soon)
    return Q()


# Urgency first (flagged or escalated, then the least time left), then age.
INBOX_ORDER = (
    F("work__flagged").desc(nulls_last=True),
    F("work__expires_at").asc(nulls_last=True),
    "created_at",
    "pk",
)


def annotate(items: list[Interaction], now: dt.datetime) -> None:
    """Each item's time left, who is on it and its flag, for the inbox rows."""
    for interaction in items:
        item = item_of(interaction)
        interaction.seconds_left = seconds_left(item, now)  # type: ignore[attr-defined]
        interaction.claimed_by = live_claim(item, now)  # type: ignore[attr-defined]
        interaction.assigned_to = item.assigned_to if item else ""  # type: ignore[attr-defined]
        interaction.flagged = bool(item and item.flagged)  # type: ignore[attr-defined]
        interaction.rule = (item.policy or {}).get("rule", "") if item else ""  # type: ignore[attr-defined]
