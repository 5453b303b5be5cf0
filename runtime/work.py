"""The human work queue and the approval policy's other verbs: edit the arguments before
approving, claim, release and assign an item, and the sweep step that fires the timers.

Each verb validates first (a typed error, nothing written), then commits its change and its
event, with its actor, in one transaction under the run's row lock.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from pydantic import ValidationError

from runtime import clock, dispatch, jsonvalues, policy, registry, store
from runtime.agents import digest
from runtime.control import _actor, _get, _when
from runtime.errors import (
    ApprovalRefused,
    ClaimConflict,
    InteractionClosed,
    InvalidInput,
)
from runtime.models import (
    ApprovalTimer,
    EventKind,
    ExpiryOutcome,
    Interaction,
    InteractionKind,
    InteractionStatus,
    Permission,
    Run,
    TimerKind,
    WorkItem,
)

EDIT_PERMISSION = Permission.EDIT_ARGUMENTS
RESPOND_PERMISSION = Permission.RESPOND


def claim_seconds() -> float:
    return float(settings.AGENTOPS_CLAIM_SECONDS)


def expiring_seconds() -> float:
    return float(settings.AGENTOPS_APPROVAL_EXPIRING_SECONDS)


def work_item(interaction: Interaction) -> WorkItem | None:
    """The interaction's work item; None for one asked before the approval policy existed."""
    try:
        return interaction.work
    except WorkItem.DoesNotExist:
        return None


def _pending(interaction_id: Any) -> tuple[Interaction, WorkItem]:
    """The pending interaction and its work item, read under the run's row lock."""
    found = _get(Interaction, interaction_id)
    _get(Run, found.run_id, lock=True)
    interaction = Interaction.objects.select_related("run").get(pk=found.pk)
    if interaction.status != InteractionStatus.PENDING:
        how = "answered" if interaction.status == InteractionStatus.ANSWERED else "closed"
        raise InteractionClosed(f"this {interaction.kind.replace('_', ' ')} was {how} already")
    item = work_item(interaction)
    if item is None:
        raise InvalidInput(f"interaction {interaction.pk} has no work item (it predates them)")
    return interaction, item


def _user(username: str) -> Any:
    return get_user_model().objects.filter(username=username, is_active=True).first()


# --- edit ----------------------------------------------------------------------------------------


def edit(interaction_id: Any, arguments: Any, *, actor: str) -> WorkItem:
    """Change a pending approval's arguments before it is approved.

    Needs the edit permission, and the policy's right to decide (group; with four-eyes, not the
    person who started the run). The arguments are validated by the tool's input schema. Any
    approvals given so far were for other arguments and no longer count; with four-eyes the
    editor's own approval does not count either. An edit that changes nothing is refused.
    """
    actor = _actor(actor)
    if not isinstance(arguments, dict):
        raise InvalidInput(f"the arguments must be an object, not {type(arguments).__name__}")
    jsonvalues.check(arguments, what="arguments")
    user = _user(actor)
    if user is None or not user.has_perm(EDIT_PERMISSION):
        raise ApprovalRefused(f"{actor} may not edit arguments: it needs the edit permission")
    now = clock.now()
    with transaction.atomic():
        interaction, item = _pending(interaction_id)
        if interaction.kind != InteractionKind.TOOL_APPROVAL:
            raise InvalidInput("only a tool call's arguments can be edited")
        run = interaction.run
        agent = registry.code_agent(run.agent, run.version)
        tool = agent.tool_named(interaction.tool_name) if agent else None
        if tool is None:
            raise ApprovalRefused(f"the code of {interaction.tool_name} is gone; restore it first")
        try:
            edited = policy.validated(tool, arguments)
        except ValidationError as exc:
            problems = [
                f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors()
            ]
            raise InvalidInput(
                f"the arguments do not match {tool.name}'s input schema: " + "; ".join(problems),
                problems,
            ) from None
        problem = policy.refusal(item, interaction, actor, approving=False, editing=True, now=now)
        if problem:
            raise ApprovalRefused(problem)
        if edited == policy.current_arguments(interaction, item):
            raise InvalidInput("the edit changes nothing: these are the arguments already")
        if not store.edit_arguments(interaction, edited, actor, now):
            raise InteractionClosed("this approval was decided meanwhile")
        proposed = interaction.payload.get("arguments", {})
        store.event(
            run.pk,
            EventKind.ARGUMENTS_EDITED,
            actor,
            key=interaction.operation_key,
            interaction=str(interaction.pk),
            tool=interaction.tool_name,
            changed=policy.changes(proposed, edited),
            arguments_sha256=digest(edited),
        )
    item.refresh_from_db()
    return item


# --- the queue -----------------------------------------------------------------------------------


def claim(interaction_id: Any, *, actor: str) -> WorkItem:
    """Say "I am on it": the claim shows to everyone and lapses after AGENTOPS_CLAIM_SECONDS.

    Claiming an item one holds renews it; an item someone else holds is refused, naming them.
    """
    actor = _actor(actor)
    now = clock.now()
    with transaction.atomic():
        interaction, item = _pending(interaction_id)
        held = item.claimed_by == actor and item.claim_expires_at and item.claim_expires_at > now
        until = now + dt.timedelta(seconds=claim_seconds())
        if not store.claim_item(interaction.pk, actor, now, until):
            raise ClaimConflict(_holder(item))
        if not held:
            store.event(
                interaction.run_id,
                EventKind.ITEM_CLAIMED,
                actor,
                key=interaction.operation_key,
                interaction=str(interaction.pk),
                until=until.isoformat(),
            )
    item.refresh_from_db()
    return item


def _holder(item: WorkItem) -> str:
    until = _when(item.claim_expires_at) if item.claim_expires_at else "?"
    return f"{item.claimed_by} is on it (the claim lapses at {until})"


def release(interaction_id: Any, *, actor: str) -> WorkItem:
    """Give a claim back; only its holder can."""
    actor = _actor(actor)
    with transaction.atomic():
        interaction, item = _pending(interaction_id)
        if not store.release_item(interaction.pk, actor):
            who = _holder(item) if item.claimed_by else "nobody holds it"
            raise ClaimConflict(f"{actor} holds no claim on this item: {who}")
        store.event(
            interaction.run_id,
            EventKind.ITEM_RELEASED,
            actor,
            key=interaction.operation_key,
            interaction=str(interaction.pk),
        )
    item.refresh_from_db()
    return item


def assign(interaction_id: Any, assignee: str, *, actor: str) -> WorkItem:
    """Give the item to `assignee`, who must be able to decide it; it is theirs, claimed."""
    actor = _actor(actor)
    assignee = _actor(assignee)
    user = _user(assignee)
    if user is None:
        raise InvalidInput(f"there is no active user {assignee!r}")
    if not user.has_perm(RESPOND_PERMISSION):
        raise InvalidInput(f"{assignee} may not answer approvals or questions")
    now = clock.now()
    with transaction.atomic():
        interaction, item = _pending(interaction_id)
        allowed = policy.allowed_groups(item)
        if allowed and not (policy.groups_of(assignee) & set(allowed)):
            named = " or ".join(repr(g) for g in allowed)
            raise ApprovalRefused(f"{assignee} is not in {named}, whose members decide this item")
        until = now + dt.timedelta(seconds=claim_seconds())
        if not store.assign_item(interaction.pk, assignee, until):
            raise InteractionClosed("this item was decided meanwhile")
        store.event(
            interaction.run_id,
            EventKind.ITEM_ASSIGNED,
            actor,
            key=interaction.operation_key,
            interaction=str(interaction.pk),
            assignee=assignee,
        )
    item.refresh_from_db()
    return item


# --- timers: the sweep's step --------------------------------------------------------------------


def fire_due_timers(limit: int = 200) -> int:
    """Fire the approval timers that are due; each fires once, whoever sweeps and however often.

    Each timer is fired in its own transaction under its run's row lock, by a guarded UPDATE of
    its `fired_at`: of any number of sweeps racing on it, one lands; the others change nothing.
    Returns how many this call fired.
    """
    now = clock.now()
    fired = 0
    for timer in store.due_timers(now, limit):
        with transaction.atomic():
            _get(Run, timer.interaction.run_id, lock=True)
            if not store.fire_timer(timer, now):
                continue
            fired += 1
            interaction = Interaction.objects.get(pk=timer.interaction_id)
            item = work_item(interaction)
            if interaction.status == InteractionStatus.PENDING and item is not None:
                _fired(timer, interaction, item, now)
    return fired


def _fired(
    timer: ApprovalTimer, interaction: Interaction, item: WorkItem, now: dt.datetime
) -> None:
    rules = policy.Policy.from_json(item.policy)
    common = {
        "key": interaction.operation_key,
        "interaction": str(interaction.pk),
        "tool": interaction.tool_name,
        "rule": rules.rule,
    }
    run_id = interaction.run_id
    if timer.kind == TimerKind.EXPIRING:
        store.event(run_id, EventKind.APPROVAL_EXPIRING, **_expiry(item), **common)
    elif timer.kind == TimerKind.ESCALATE:
        if store.mark_escalated(interaction.pk, now):
            store.event(
                run_id,
                EventKind.APPROVAL_ESCALATED,
                group=rules.escalation_group,
                why="escalation time",
                **common,
            )
    elif rules.on_expiry == ExpiryOutcome.REJECT:
        reason = rules.expiry_reason or "the approval request expired"
        if store.expire_rejecting(interaction, reason, now):
            store.mark_expired(interaction.pk, now, flag=False)
            store.mark_decided(interaction, now)
            store.event(
                run_id, EventKind.APPROVAL_EXPIRED, outcome=rules.on_expiry, reason=reason, **common
            )
            dispatch.enqueue_on_commit(run_id)
    else:
        store.mark_expired(interaction.pk, now, flag=True)
        store.event(run_id, EventKind.APPROVAL_EXPIRED, outcome=rules.on_expiry, **common)
        if rules.on_expiry == ExpiryOutcome.ESCALATE and store.mark_escalated(interaction.pk, now):
            store.event(
                run_id,
                EventKind.APPROVAL_ESCALATED,
                group=rules.escalation_group,
                why="expiry",
                **common,
            )


def _expiry(item: WorkItem) -> dict[str, Any]:
    return {"expires_at": item.expires_at.isoformat()} if item.expires_at else {}


__all__ = ["assign", "claim", "edit", "fire_due_timers", "release"]
