"""The verbs people use: submit, respond, resolve, retry, cancel — and startup discovery.

Each verb validates first (raising a typed error and changing nothing), then commits its
change, its event and its actor in one transaction, and hands the run to the executor only
after that commit.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction
from django.db.models import Max, Model
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from runtime import clock, dispatch, jsonvalues, registry, store
from runtime.errors import (
    InteractionClosed,
    InteractionConflict,
    InvalidInput,
    InvalidTransition,
    NotBlocked,
    NotFound,
    RetryRejected,
    SessionBusy,
)
from runtime.models import (
    UNFINISHED_STATUSES,
    AttentionReason,
    Interaction,
    InteractionKind,
    InteractionStatus,
    Operation,
    OperationKind,
    OperationStatus,
    Run,
    RunStatus,
    Session,
)

MAX_MESSAGE_CHARS = 20_000
MAX_EVIDENCE_CHARS = 4_000
MAX_REASON_CHARS = 4_000


M = TypeVar("M", bound=Model)


def _get(model: type[M], pk: Any) -> M:
    try:
        return model._default_manager.get(pk=pk)
    except (model.DoesNotExist, ValueError, TypeError, DjangoValidationError):
        # A malformed id is as unknown as a missing one, and says nothing more.
        raise NotFound(f"{model._meta.verbose_name} {str(pk)[:64]!r} does not exist") from None


def _get_run(run_id: Any) -> Run:
    return _get(Run, run_id)


def _text(value: Any, what: str, max_length: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"the {what} is required")
    return jsonvalues.check_text(value.strip(), what=what, max_length=max_length)


# --- submit ----------------------------------------------------------------------------------


def submit(
    agent: str,
    message: str,
    *,
    actor: str,
    session: Any = None,
    version: str | None = None,
    title: str = "",
) -> Run:
    """Start a run of `agent` on `message`, in a new session or continuing `session`.

    Uses `version` if given, else the newest registered version whose code matches.
    """
    message = _text(message, "message", MAX_MESSAGE_CHARS)
    agent = _text(agent, "agent name", 100)
    if version is not None:
        version = _text(version, "version", 50)
    now = clock.now()
    try:
        with transaction.atomic():
            code = registry.registered_version(agent, version, lock=True)
            if code is None:
                which = f"version {version!r}" if version else "version"
                raise NotFound(f"agent {agent!r} has no registered {which} that matches the code")
            if session is None:
                chat = Session.objects.create(
                    agent=agent, title=title[:200] or message[:80], created_at=now
                )
                seq = 1
            else:
                chat = _open_session(session, agent)
                seq = (chat.runs.aggregate(last=Max("seq"))["last"] or 0) + 1
            run = Run.objects.create(
                session=chat,
                seq=seq,
                agent=code.name,
                version=code.version,
                fingerprint=code.fingerprint,
                input=message,
                created_at=now,
                updated_at=now,
            )
            store.event(run.pk, "submitted", actor, agent=code.name, version=code.version)
            dispatch.enqueue_on_commit(run.pk)
    except IntegrityError:
        raise SessionBusy(f"session {session} received another message at the same time") from None
    return run


def _open_session(session_id: Any, agent: str) -> Session:
    chat = _get(Session, session_id)
    if chat.agent != agent:
        raise InvalidInput(f"session {chat.pk} belongs to agent {chat.agent!r}, not {agent!r}")
    busy = chat.runs.filter(status__in=UNFINISHED_STATUSES).values_list("pk", flat=True).first()
    if busy is not None:
        raise SessionBusy(
            f"session {chat.pk} has an unfinished run {busy}; wait for it or cancel it"
        )
    return chat


# --- respond ---------------------------------------------------------------------------------


class ApprovalResponse(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    approved: bool
    reason: str = Field(default="", max_length=MAX_REASON_CHARS)

    @field_validator("reason")
    @classmethod
    def _clean(cls, value: str) -> str:
        return jsonvalues.check_text(value.strip(), what="reason")

    def same_as(self, other: dict[str, Any]) -> bool:
        if self.approved:
            return other.get("approved") is True
        return other.get("approved") is False and other.get("reason") == self.reason


class QuestionResponse(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    answer: str = Field(min_length=1, max_length=20_000)

    @field_validator("answer")
    @classmethod
    def _clean(cls, value: str) -> str:
        value = jsonvalues.check_text(value.strip(), what="answer")
        if not value:
            raise ValueError("the answer is required")
        return value

    def same_as(self, other: dict[str, Any]) -> bool:
        return other.get("answer") == self.answer


def _parse_response(interaction: Interaction, response: Any) -> ApprovalResponse | QuestionResponse:
    model = (
        ApprovalResponse if interaction.kind == InteractionKind.TOOL_APPROVAL else QuestionResponse
    )
    try:
        parsed = model.model_validate(response)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(map(str, e['loc'])) or 'response'}: {e['msg']}" for e in exc.errors()
        ]
        raise InvalidInput("invalid response: " + "; ".join(problems), problems) from None
    if isinstance(parsed, ApprovalResponse) and not parsed.approved and not parsed.reason:
        raise InvalidInput("a rejection needs a reason: the agent will see it")
    return parsed


def _describe(interaction: Interaction) -> str:
    response = interaction.response or {}
    if interaction.kind == InteractionKind.QUESTION:
        what = "answered"
    else:
        what = "approved" if response.get("approved") else "rejected"
    answered = interaction.responded_at
    when = answered.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if answered else "?"
    return f"{what} by {interaction.responded_by} at {when}"


def respond(interaction_id: Any, response: Any, *, actor: str) -> Interaction:
    """Answer a pending approval or question; the run continues.

    The same response again is a no-op; a different one raises InteractionConflict naming who
    answered and when.
    """
    interaction = _get(Interaction, interaction_id)
    parsed = _parse_response(interaction, response)
    answer = parsed.model_dump()
    now = clock.now()
    with transaction.atomic():
        # The run's row lock first, in the order cancel and the engine take them (the run, then
        # its interactions): the other order deadlocks against a concurrent cancel.
        list(Run.objects.select_for_update().filter(pk=interaction.run_id).values_list("pk"))
        landed = Interaction.objects.filter(
            pk=interaction.pk, status=InteractionStatus.PENDING
        ).update(
            status=InteractionStatus.ANSWERED, response=answer, responded_by=actor, responded_at=now
        )
        if landed == 1:
            moved = Run.objects.filter(pk=interaction.run_id, status=RunStatus.WAITING).update(
                status=RunStatus.QUEUED, updated_at=now
            )
            if moved != 1:
                raise InvalidTransition(f"run {interaction.run_id} is not waiting for this answer")
            if interaction.kind == InteractionKind.QUESTION:
                kind = "question_answered"
            else:
                kind = "approval_granted" if answer["approved"] else "approval_rejected"
            store.event(
                interaction.run_id,
                kind,
                actor,
                key=interaction.operation_key,
                interaction=str(interaction.pk),
                tool=interaction.tool_name,
                response=answer,
            )
            dispatch.enqueue_on_commit(interaction.run_id)
    interaction.refresh_from_db()
    if landed == 1:
        return interaction
    if interaction.status == InteractionStatus.CANCELLED:
        raise InteractionClosed(
            f"this {interaction.kind.replace('_', ' ')} was closed: its run was cancelled"
        )
    if parsed.same_as(interaction.response or {}):
        return interaction
    raise InteractionConflict(f"already {_describe(interaction)}")


# --- resolve ---------------------------------------------------------------------------------


def resolve(
    run_id: Any, operation_key: str, result: Any, *, evidence: str, actor: str
) -> Operation:
    """Supply the verified result of the operation a run is blocked on; the run continues.

    Only while the run is blocked on exactly that operation. The result is checked against the
    tool's output schema; the evidence (what was checked, e.g. the receipt id) is mandatory.
    """
    run = _get_run(run_id)
    blocked = (
        run.status == RunStatus.NEEDS_ATTENTION
        and run.attention_reason == AttentionReason.UNCERTAIN_OPERATION
    )
    if not blocked or run.blocked_operation != operation_key:
        on = (
            f"blocked on {run.blocked_operation}"
            if blocked
            else f"{run.status}, not blocked on an operation"
        )
        raise NotBlocked(f"run {run.pk} is not blocked on {operation_key!r} (it is {on})")
    evidence = _text(evidence, "evidence", MAX_EVIDENCE_CHARS)
    jsonvalues.check(result, what="result")
    op = Operation.objects.get(run=run, key=operation_key)
    agent = registry.code_agent(run.agent, run.version)
    tool = agent.tool_named(op.name) if agent else None
    if tool is None:
        raise NotBlocked(
            f"the code of {op.name} ({run.agent} {run.version}) is gone; restore it first"
        )
    try:
        verified = tool.validate_output(result)
    except ValidationError as exc:
        problems = [f"{'.'.join(map(str, e['loc'])) or 'result'}: {e['msg']}" for e in exc.errors()]
        raise InvalidInput(
            f"the result does not match {tool.name}'s output schema: " + "; ".join(problems),
            problems,
        ) from None
    now = clock.now()
    with transaction.atomic():
        moved = Run.objects.filter(
            pk=run.pk, status=RunStatus.NEEDS_ATTENTION, blocked_operation=operation_key
        ).update(
            status=RunStatus.QUEUED,
            blocked_operation="",
            attention_reason="",
            attention_detail={},
            updated_at=now,
        )
        if moved != 1:
            raise NotBlocked(f"run {run.pk} is no longer blocked on {operation_key!r}")
        Operation.objects.filter(pk=op.pk, status=OperationStatus.STARTED).update(
            status=OperationStatus.COMPLETED, result=verified, is_error=False, outcome_at=now
        )
        store.event(
            run.pk,
            "operation_resolved",
            actor,
            key=operation_key,
            operation_id=op.operation_id,
            tool=op.name,
            result=verified,
            evidence=evidence,
        )
        dispatch.enqueue_on_commit(run.pk)
    op.refresh_from_db()
    return op


# --- retry and cancel ------------------------------------------------------------------------


def retry_problem(run: Run) -> str | None:
    """Why `retry` would be refused for `run` now, or None if it would be accepted."""
    if run.status == RunStatus.RETRY_WAIT:
        return None
    if run.status == RunStatus.FAILED:
        later = (
            Run.objects.filter(session_id=run.session_id, seq__gt=run.seq)
            .exclude(status=RunStatus.CANCELLED)
            .values_list("pk", flat=True)
            .first()
        )
        if later is not None:
            return f"a later run ({later}) has advanced the session since this one failed"
        return None
    if run.status == RunStatus.NEEDS_ATTENTION:
        if run.attention_reason == AttentionReason.UNCERTAIN_OPERATION:
            return (
                f"blocked on {run.blocked_operation}, whose outcome is unknown: reconcile it "
                "with the verified result, or cancel the run"
            )
        problem = registry.version_problem(run.agent, run.version, run.fingerprint)
        return f"still blocked: {problem.message}" if problem else None
    return f"a {run.status} run cannot be retried"


def retry(run_id: Any, *, actor: str) -> Run:
    """Re-attempt a failed or blocked run (or a retry wait, now) under the same recovery checks.

    Never overrides manual recovery; refused once a later run advanced the session; resets
    the attempt counters of unfinished model operations and keeps every completed result.
    """
    run = _get_run(run_id)
    problem = retry_problem(run)
    if problem is not None:
        raise RetryRejected(f"run {run.pk} cannot be retried: {problem}")
    now = clock.now()
    previous = run.status
    with transaction.atomic():
        moved = Run.objects.filter(pk=run.pk, status=previous, fence=run.fence).update(
            status=RunStatus.QUEUED,
            next_attempt_at=None,
            error="",
            attention_reason="",
            attention_detail={},
            blocked_operation="",
            finished_at=None,
            updated_at=now,
        )
        if moved != 1:
            raise RetryRejected(f"run {run.pk} changed meanwhile; reload and try again")
        Operation.objects.filter(
            run=run,
            kind=OperationKind.MODEL,
            status__in=[OperationStatus.STARTED, OperationStatus.FAILED],
        ).update(attempts=0)
        kind = "retried_now" if previous == RunStatus.RETRY_WAIT else "retried"
        store.event(run.pk, kind, actor, previous_status=previous)
        dispatch.enqueue_on_commit(run.pk)
    run.refresh_from_db()
    return run


@dataclass(frozen=True)
class RetryResult:
    """What `retry_many` did with one run: retried, or refused with the reason."""

    run_id: str
    retried: bool
    problem: str = ""


def retry_many(run_ids: Iterable[Any], *, actor: str) -> list[RetryResult]:
    """`retry` each run on its own (e.g. a version board group); a refusal holds no other back.

    Each run goes through `retry` with its checks and its own transaction; the result says,
    per run, whether it was retried or why not.
    """
    results = []
    for run_id in run_ids:
        try:
            retry(run_id, actor=actor)
        except (RetryRejected, NotFound) as exc:
            results.append(RetryResult(str(run_id), retried=False, problem=exc.message))
        else:
            results.append(RetryResult(str(run_id), retried=True))
    return results


def cancel(run_id: Any, *, actor: str, reason: str = "") -> Run:
    """Cancel an unfinished run; a worker still running it can commit nothing more."""
    run = _get_run(run_id)
    if run.status not in UNFINISHED_STATUSES:
        raise InvalidTransition(
            f"run {run.pk} is {run.status}; only unfinished runs can be cancelled"
        )
    reason = jsonvalues.check_text(reason.strip(), what="reason", max_length=MAX_REASON_CHARS)
    now = clock.now()
    with transaction.atomic():
        moved = Run.objects.filter(pk=run.pk, status__in=UNFINISHED_STATUSES).update(
            status=RunStatus.CANCELLED,
            fence=run.fence + 1,
            lease_owner="",
            lease_expires_at=None,
            next_attempt_at=None,
            finished_at=now,
            updated_at=now,
        )
        if moved != 1:
            raise InvalidTransition(f"run {run.pk} finished meanwhile; it cannot be cancelled")
        Interaction.objects.filter(run=run, status=InteractionStatus.PENDING).update(
            status=InteractionStatus.CANCELLED
        )
        store.event(run.pk, "cancelled", actor, previous_status=run.status, reason=reason)
    run.refresh_from_db()
    return run


# --- discovery -------------------------------------------------------------------------------


def list_runs(*statuses: str) -> Any:
    """Runs in `statuses` (default: every unfinished one), oldest first."""
    return Run.objects.filter(status__in=statuses or UNFINISHED_STATUSES).order_by("created_at")


def resume() -> list[str]:
    """Hand every run that can move now to the executor: startup discovery and the sweep.

    Queued runs whose message was lost, expired leases and due retry timers. Claiming stays the
    only door into `running`, so handing a run over twice is harmless.
    """
    due = [str(pk) for pk in store.due_run_ids()]
    for run_id in due:
        dispatch.enqueue_on_commit(run_id)
    return due


__all__ = [
    "cancel",
    "list_runs",
    "resolve",
    "respond",
    "resume",
    "retry",
    "retry_many",
    "retry_problem",
    "submit",
]
