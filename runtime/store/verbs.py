"""The writes of the verbs people use (runtime/control.py): each a guarded UPDATE that reports
whether it landed, checked against the transition table, inside the verb's transaction.

The verbs decide (validation, the checks, the errors); these functions write.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from typing import Any

from django.db.models import F

from runtime.models import (
    Interaction,
    InteractionStatus,
    Operation,
    OperationKind,
    OperationStatus,
    Run,
    Session,
)
from runtime.store import transitions


def create_session(agent: str, title: str, now: dt.datetime) -> Session:
    return Session.objects.create(agent=agent, title=title, created_at=now)


def create_run(
    session: Session,
    seq: int,
    *,
    agent: str,
    version: str,
    fingerprint: str,
    message: str,
    now: dt.datetime,
) -> Run:
    """A queued run at position `seq` of `session`. Raises IntegrityError when the database's
    one-unfinished-run rule (or the position) refuses it: call it in a savepoint."""
    return Run.objects.create(
        session=session,
        seq=seq,
        agent=agent,
        version=version,
        fingerprint=fingerprint,
        input=message,
        created_at=now,
        updated_at=now,
    )


def move_run(
    run_id: Any,
    target: str,
    *,
    sources: Collection[str],
    now: dt.datetime,
    where: dict[str, Any] | None = None,
    bump_fence: bool = False,
    **fields: Any,
) -> bool:
    """Move the run to `target` if it is in one of `sources` (and matches `where`); whether it
    landed. `bump_fence` ends the claim of any worker still running it, in the same UPDATE."""
    transitions.check(sources, target)
    if bump_fence:
        fields["fence"] = F("fence") + 1
    rows = Run.objects.filter(pk=run_id, status__in=list(sources), **(where or {}))
    return rows.update(status=target, updated_at=now, **fields) == 1


def answer_interaction(
    interaction_id: Any, response: dict[str, Any], *, actor: str, now: dt.datetime
) -> bool:
    """Record the answer if the interaction is still pending; whether it landed."""
    landed = Interaction.objects.filter(pk=interaction_id, status=InteractionStatus.PENDING).update(
        status=InteractionStatus.ANSWERED, response=response, responded_by=actor, responded_at=now
    )
    return landed == 1


def close_interactions(run_id: Any) -> int:
    """Close the run's pending interactions (its cancel): how many were open."""
    return Interaction.objects.filter(run_id=run_id, status=InteractionStatus.PENDING).update(
        status=InteractionStatus.CANCELLED
    )


def settle_operation(
    operation_id: int, *, now: dt.datetime, result: Any = None, is_error: bool = False
) -> bool:
    """An operator's verified result for an operation whose outcome was missing."""
    unfinished = Operation.objects.filter(pk=operation_id, status=OperationStatus.STARTED)
    return (
        unfinished.update(
            status=OperationStatus.COMPLETED, outcome_at=now, result=result, is_error=is_error
        )
        == 1
    )


def mark_not_run(operation_id: int) -> bool:
    """An operator verified the call did not happen: the engine runs it once more."""
    unfinished = Operation.objects.filter(pk=operation_id, status=OperationStatus.STARTED)
    return unfinished.update(status=OperationStatus.NOT_RUN) == 1


def fresh_attempts(run_id: Any, *, also: str = "") -> None:
    """Unfinished model requests of the run start counting attempts again, and so does the
    operation `also` (one whose re-runs after crashes ran out)."""
    unfinished = [OperationStatus.STARTED, OperationStatus.FAILED]
    Operation.objects.filter(run_id=run_id, kind=OperationKind.MODEL, status__in=unfinished).update(
        attempts=0
    )
    if also:
        Operation.objects.filter(run_id=run_id, key=also, status__in=unfinished).update(attempts=0)
