"""The writes of the verbs people use (runtime/control.py): each a guarded UPDATE that reports
whether it landed, checked against the transition table, inside the verb's transaction; and
submit's new session, its run and its event, written at once by the dialect (start_session).

The verbs decide (validation, the checks, the errors); these functions write.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import F, Model

from runtime.models import (
    EventKind,
    Interaction,
    InteractionStatus,
    Operation,
    OperationKind,
    OperationStatus,
    Run,
    Session,
)
from runtime.store import transitions
from runtime.store.dialect import connection, dialect_of
from runtime.store.events import Written, publish


def start_session(
    agent: str, code: dict[str, str], *, title: str, message: str, actor: str, now: dt.datetime
) -> Run | None:
    """A new session of `agent` titled `title`, its first run on `message`, queued, and the
    run's SUBMITTED event by `actor`, all at `now`, on the newest registered version of the
    agent whose fingerprint is the code's (`code`: each version in the code, and its
    fingerprint): the Run as the ORM reads it, with its session. None, having written nothing,
    when no registered version matches the code.

    The registration's row lock orders it against a concurrent unregister. One statement on
    PostgreSQL, committed alone outside a caller's transaction; one transaction on SQLite. The
    event is published after the commit (the caller's, inside one)."""
    if not code:
        return None
    db = connection()
    dialect = dialect_of(db)
    chat = Session(agent=agent, title=title, created_at=now)
    # A Run as the ORM creates one (its defaults); its version and fingerprint are chosen by
    # the statement.
    run = Run(
        session=chat,
        seq=1,
        agent=agent,
        version="",
        fingerprint="",
        input=message,
        created_at=now,
        updated_at=now,
    )
    params = {
        "agent": agent,
        "event": EventKind.SUBMITTED,
        "actor": actor,
        "now": dialect.moment(db, now),
        **_prepared(db, chat, "s_"),
        **_prepared(db, run, "r_"),
    }
    with dialect.write(db) as cursor:
        started = dialect.start_session(db, cursor, params, code)
    if started is None:
        return None
    row, event_id = started
    run = dialect.instance(db, Run, row)
    session_row = [params[f"s_{field.column}"] for field in Session._meta.concrete_fields]
    Run.session.field.set_cached_value(run, dialect.instance(db, Session, session_row))
    data = {"agent": run.agent, "version": run.version}
    publish(db, event_id, Written(run.pk, EventKind.SUBMITTED, "", data, now, actor))
    return run


def _prepared(db: BaseDatabaseWrapper, instance: Model, prefix: str) -> dict[str, Any]:
    """Each column of a new `instance` as the ORM's INSERT sends it, by `prefix` + column."""
    return {
        f"{prefix}{field.column}": field.get_db_prep_save(getattr(instance, field.attname), db)
        for field in instance._meta.concrete_fields
    }


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
    rows = Run.objects.by_key(run_id, status__in=list(sources), **(where or {}))
    return rows.update(status=target, updated_at=now, **fields) == 1


def answer_interaction(
    interaction_id: Any, response: dict[str, Any], *, actor: str, now: dt.datetime
) -> bool:
    """Record the answer if the interaction is still pending; whether it landed."""
    landed = Interaction.objects.by_key(interaction_id, status=InteractionStatus.PENDING).update(
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
