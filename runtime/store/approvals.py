"""The writes of the approval policy: work items, votes, receipts, claims and timers.

In the store's style: every change is a guarded UPDATE (or an INSERT a constraint guards)
whose row count says whether it landed. The worker's request is fenced by the run's move to
`waiting` (`request_interaction`), in the same transaction as the work item and its timers.
The verbs that call the others hold the run's row lock first, as respond and cancel do.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, transaction
from django.db.models import Q

from runtime import clock
from runtime.models import (
    RUNTIME,
    ApprovalReceipt,
    ApprovalTimer,
    ApprovalVote,
    EventKind,
    Interaction,
    Run,
    RunStatus,
    TimerKind,
    WorkItem,
)
from runtime.store.events import event
from runtime.store.verbs import answer_interaction, move_run
from runtime.store.worker import request_interaction

if TYPE_CHECKING:
    from runtime.policy import Policy


def request_approval(
    run: Run,
    *,
    key: str,
    kind: str,
    tool_name: str,
    payload: dict[str, Any],
    policy: Policy,
    expiring_seconds: float,
) -> Interaction:
    """Ask a person under `policy`: the interaction, its work item and its timers, fenced."""
    now = clock.now()
    # The run's move to `waiting` is the fence: if it does not land, nothing here is written.
    with transaction.atomic():
        interaction = request_interaction(
            run, key=key, kind=kind, tool_name=tool_name, payload=payload
        )
        expires_at = _after(now, policy.expires_after)
        escalate_at = _after(now, policy.escalate_after)
        WorkItem.objects.create(
            interaction=interaction,
            rule_id=policy.rule_id,
            policy=policy.as_json(),
            expires_at=expires_at,
            escalate_at=escalate_at,
            created_at=now,
        )
        timers = []
        if expires_at is not None:
            timers.append(
                ApprovalTimer(interaction=interaction, kind=TimerKind.EXPIRE, due_at=expires_at)
            )
            # The warning comes `expiring_seconds` before the expiry, or halfway for short ones.
            warning = min(expiring_seconds, (expires_at - now).total_seconds() / 2)
            timers.append(
                ApprovalTimer(
                    interaction=interaction,
                    kind=TimerKind.EXPIRING,
                    due_at=expires_at - dt.timedelta(seconds=warning),
                )
            )
        if escalate_at is not None:
            timers.append(
                ApprovalTimer(interaction=interaction, kind=TimerKind.ESCALATE, due_at=escalate_at)
            )
        ApprovalTimer.objects.bulk_create(timers)
        if policy.rule:
            event(
                run.pk,
                EventKind.APPROVAL_RULE_APPLIED,
                key=key,
                interaction=str(interaction.pk),
                rule=policy.rule,
                why=policy.why,
                quorum=policy.quorum,
                group=policy.group,
                expires_at=expires_at.isoformat() if expires_at else None,
            )
    return interaction


def _after(now: dt.datetime, seconds: float | None) -> dt.datetime | None:
    return None if seconds is None else now + dt.timedelta(seconds=seconds)


# --- decisions -----------------------------------------------------------------------------------


def vote(interaction: Interaction, approver: str, arguments_sha256: str) -> bool:
    """Record `approver`'s approval of these arguments; False if they had approved them already."""
    try:
        with transaction.atomic():  # a savepoint: a violated constraint aborts only this
            ApprovalVote.objects.create(
                interaction=interaction,
                approver=approver,
                arguments_sha256=arguments_sha256,
                created_at=clock.now(),
            )
    except IntegrityError:
        return False
    return True


def mark_decided(interaction: Interaction, now: dt.datetime) -> None:
    """Time to decision, once: from the request to the decision that closed it."""
    WorkItem.objects.filter(pk=interaction.pk, decided_at__isnull=True).update(
        decided_at=now, decision_seconds=(now - interaction.created_at).total_seconds()
    )


def write_receipt(interaction: Interaction, digest: str, contents: dict[str, Any]) -> None:
    ApprovalReceipt.objects.create(
        interaction=interaction, digest=digest, contents=contents, created_at=clock.now()
    )


def use_receipt(interaction_id: Any, now: dt.datetime) -> bool:
    """Mark the receipt used by its call's first intent; False if it was used already."""
    return (
        ApprovalReceipt.objects.filter(pk=interaction_id, used_at__isnull=True).update(used_at=now)
        == 1
    )


def edit_arguments(
    interaction: Interaction, arguments: dict[str, Any], actor: str, now: dt.datetime
) -> bool:
    """Record edited arguments on a pending approval's work item (under the run's lock)."""
    return (
        WorkItem.objects.filter(pk=interaction.pk, decided_at__isnull=True).update(
            arguments=arguments, edited_by=actor, edited_at=now
        )
        == 1
    )


# --- the queue -----------------------------------------------------------------------------------


def claim_item(interaction_id: Any, actor: str, now: dt.datetime, until: dt.datetime) -> bool:
    """Claim the item for `actor` unless someone else holds a live claim."""
    free = Q(claimed_by="") | Q(claim_expires_at__lte=now) | Q(claimed_by=actor)
    return (
        WorkItem.objects.filter(free, pk=interaction_id, decided_at__isnull=True).update(
            claimed_by=actor, claim_expires_at=until
        )
        == 1
    )


def release_item(interaction_id: Any, actor: str) -> bool:
    return (
        WorkItem.objects.filter(pk=interaction_id, claimed_by=actor).update(
            claimed_by="", claim_expires_at=None
        )
        == 1
    )


def assign_item(interaction_id: Any, assignee: str, until: dt.datetime) -> bool:
    """Assign the item: it is the assignee's, and so is the claim (until it lapses)."""
    return (
        WorkItem.objects.filter(pk=interaction_id, decided_at__isnull=True).update(
            assigned_to=assignee, claimed_by=assignee, claim_expires_at=until
        )
        == 1
    )


# --- timers --------------------------------------------------------------------------------------


def due_timers(now: dt.datetime, limit: int = 200) -> list[ApprovalTimer]:
    return list(
        ApprovalTimer.objects.filter(fired_at__isnull=True, due_at__lte=now)
        .order_by("due_at", "pk")
        .select_related("interaction")[:limit]
    )


def fire_timer(timer: ApprovalTimer, now: dt.datetime) -> bool:
    """Mark the timer fired; True for exactly one of any number of sweeps racing on it."""
    return (
        ApprovalTimer.objects.filter(pk=timer.pk, fired_at__isnull=True).update(fired_at=now) == 1
    )


def expire_rejecting(interaction: Interaction, reason: str, now: dt.datetime) -> bool:
    """The expiry's rejection: the interaction answered by the runtime, the run queued (a
    paused run keeps the answer and goes on once resumed)."""
    response = {"approved": False, "reason": reason}
    if not answer_interaction(interaction.pk, response, actor=RUNTIME, now=now):
        return False
    move_run(interaction.run_id, RunStatus.QUEUED, sources=[RunStatus.WAITING], now=now)
    return True


def mark_expired(interaction_id: Any, now: dt.datetime, *, flag: bool) -> None:
    fields: dict[str, Any] = {"expired_at": now}
    if flag:
        fields["flagged"] = True
    WorkItem.objects.filter(pk=interaction_id, expired_at__isnull=True).update(**fields)


def mark_escalated(interaction_id: Any, now: dt.datetime) -> bool:
    return (
        WorkItem.objects.filter(pk=interaction_id, escalated_at__isnull=True).update(
            escalated_at=now, flagged=True
        )
        == 1
    )
