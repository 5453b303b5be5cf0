"""The verbs people use: submit, respond, resolve, retry, cancel — and startup discovery.

Each verb validates first (raising a typed error and changing nothing), then commits its
change, its event and its actor in one transaction, and hands the run to the executor only
after that commit.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from django.core.exceptions import ObjectDoesNotExist
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction
from django.db.models import Max, Model, QuerySet
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from runtime import clock, dispatch, jsonvalues, keys, policy, registry, store
from runtime.agents import digest
from runtime.errors import (
    ApprovalRefused,
    InteractionClosed,
    InteractionConflict,
    InvalidInput,
    InvalidTransition,
    NotBlocked,
    NotFound,
    ReauthenticationRequired,
    RetryRejected,
    SessionBusy,
)
from runtime.models import (
    RUNTIME,
    UNFINISHED_STATUSES,
    AttentionReason,
    Event,
    EventKind,
    Interaction,
    InteractionKind,
    InteractionStatus,
    Operation,
    Run,
    RunStatus,
    Session,
    WorkItem,
)
from runtime.store import surgery as surgery_store

MAX_MESSAGE_CHARS = 20_000
MAX_EVIDENCE_CHARS = 4_000
MAX_REASON_CHARS = 4_000
# Event.actor and Interaction.responded_by hold this many characters.
MAX_ACTOR_CHARS = 150


M = TypeVar("M", bound=Model)


def _get(model: type[M], pk: Any, *, lock: bool = False) -> M:
    rows: QuerySet[M] = model._default_manager.all()
    if lock:
        # NO KEY: rows that merely reference this one (events, operations) can still be added.
        rows = rows.select_for_update(no_key=True)
    try:
        return rows.get(pk=pk)
    except (ObjectDoesNotExist, ValueError, TypeError, DjangoValidationError):
        # A malformed id is as unknown as a missing one, and says nothing more.
        raise NotFound(f"{model._meta.verbose_name} {str(pk)[:64]!r} does not exist") from None


def _fresh(run_id: Any) -> Run:
    """The run a verb changed, read after its commit, with its session: what the caller renders."""
    return Run.objects.select_related("session").get(pk=run_id)


def _get_run(run_id: Any) -> Run:
    return _get(Run, run_id)


def _text(value: Any, what: str, max_length: int) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"the {what} must be text, not {type(value).__name__}")
    if not value.strip():
        raise InvalidInput(f"the {what} is required")
    return jsonvalues.check_text(value.strip(), what=what, max_length=max_length)


def _actor(value: Any) -> str:
    """The person acting: every verb's event names them, so the audit never has a blank,
    an over-long name the database would refuse (or SQLite would silently keep), or a person
    posing as the runtime, whose events the audit log leaves out."""
    actor = _text(value, "actor", MAX_ACTOR_CHARS)
    if actor == RUNTIME:
        raise InvalidInput(f"{RUNTIME!r} names the runtime itself; a person acts as themself")
    return actor


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

    Uses `version` if given, else the newest registered version whose code matches. A session
    holds one unfinished run at a time (S5): while it has one, this raises SessionBusy.
    """
    actor = _actor(actor)
    message = _text(message, "message", MAX_MESSAGE_CHARS)
    agent = _text(agent, "agent name", 100)
    if version is not None:
        version = _text(version, "version", 50)
    if not isinstance(title, str):
        raise InvalidInput(f"the title must be text, not {type(title).__name__}")
    title = jsonvalues.check_text(title.strip(), what="title")[:200]
    now = clock.now()
    if session is None:
        # The common path: the version's lock, the session, the run and its event in one
        # statement on PostgreSQL (runtime.store.start_session).
        run = store.start_session(
            agent,
            registry.code_fingerprints(agent, version),
            title=title or message[:80],
            message=message,
            actor=actor,
            now=now,
        )
        if run is None:
            raise NotFound(_no_version(agent, version))
        dispatch.enqueue_on_commit(run.pk)
        return run
    with transaction.atomic():
        code = registry.registered_version(agent, version, lock=True)
        if code is None:
            raise NotFound(_no_version(agent, version))
        chat = _open_session(session, agent)
        seq = (chat.runs.aggregate(last=Max("seq"))["last"] or 0) + 1
        try:
            # A savepoint: on PostgreSQL a violated constraint aborts the whole transaction.
            with transaction.atomic():
                run = store.create_run(
                    chat,
                    seq,
                    agent=code.name,
                    version=code.version,
                    fingerprint=code.fingerprint,
                    message=message,
                    now=now,
                )
        except IntegrityError:
            # The database's one-unfinished-run rule (or the seq) caught a concurrent writer the
            # check above could not see yet, such as a retry of this session's failed run.
            raise SessionBusy(
                f"session {chat.pk} received another message or a retry at the same time; "
                "wait for that run or cancel it"
            ) from None
        store.event(run.pk, EventKind.SUBMITTED, actor, agent=code.name, version=code.version)
        dispatch.enqueue_on_commit(run.pk)
    return run


def _no_version(agent: str, version: str | None) -> str:
    which = f"version {version!r}" if version else "version"
    return f"agent {agent!r} has no registered {which} that matches the code"


def _open_session(session_id: Any, agent: str) -> Session:
    # The session's row lock orders concurrent submits, so each sees the one before it.
    chat = _get(Session, session_id, lock=True)
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
    return f"{what} by {interaction.responded_by} at {_when(interaction.responded_at)}"


def respond(
    interaction_id: Any, response: Any, *, actor: str, reauthenticated: bool = False
) -> Interaction:
    """Answer a pending approval or question; the run continues.

    An approval under a rule obeys it (runtime.policy): a decision it forbids (wrong group,
    four-eyes, expired) raises ApprovalRefused; a high-risk approval without `reauthenticated`
    (the interface's proof of a recent sign-in) raises ReauthenticationRequired; nothing changes
    then. Under a quorum, each approval counts once per person, and the run continues when the
    quorum of distinct approvers of the current arguments is met; one rejection decides. The
    decision's receipt is written with it.

    The same response again is a no-op; a different one raises InteractionConflict naming who
    answered and when.
    """
    actor = _actor(actor)
    if not isinstance(reauthenticated, bool):
        raise InvalidInput("reauthenticated must be true or false")
    interaction = _get(Interaction, interaction_id)
    parsed = _parse_response(interaction, response)
    answer = parsed.model_dump()
    now = clock.now()
    counted = False
    with transaction.atomic():
        # The run's row lock first, in the order cancel and the engine take them (the run, then
        # its interactions): the other order deadlocks against a concurrent cancel.
        _get(Run, interaction.run_id, lock=True)
        interaction.refresh_from_db()
        item = _work_item(interaction)
        receipt: tuple[str, dict[str, Any]] | None = None
        approving = interaction.kind == InteractionKind.TOOL_APPROVAL and answer["approved"]
        if interaction.status == InteractionStatus.PENDING:
            if interaction.kind == InteractionKind.TOOL_APPROVAL:
                problem = policy.refusal(item, interaction, actor, approving=approving, now=now)
                if problem:
                    raise ApprovalRefused(problem)
            if approving:
                receipt = _approve(interaction, item, actor, reauthenticated=reauthenticated)
                counted = receipt is None
        landed = not counted and store.answer_interaction(
            interaction.pk, answer, actor=actor, now=now
        )
        if landed:
            moved = store.move_run(
                interaction.run_id, RunStatus.QUEUED, sources=[RunStatus.WAITING], now=now
            )
            # A run paused while waiting keeps the answer and goes on only once resumed.
            paused = not moved and surgery_store.answered_while_paused(interaction.run_id)
            if not moved and not paused:
                raise InvalidTransition(f"run {interaction.run_id} is not waiting for this answer")
            store.mark_decided(interaction, now)
            _record_decision(interaction, item, receipt, answer, actor)
            if not paused:
                dispatch.enqueue_on_commit(interaction.run_id)
    # Fresh, with its run and session: what the caller renders, read once.
    interaction = Interaction.objects.select_related("run__session").get(pk=interaction.pk)
    if landed or counted:
        return interaction
    if interaction.status == InteractionStatus.CANCELLED:
        raise InteractionClosed(
            f"this {interaction.kind.replace('_', ' ')} was closed: its run was cancelled"
        )
    if parsed.same_as(interaction.response or {}):
        return interaction
    raise InteractionConflict(f"already {_describe(interaction)}")


def _record_decision(
    interaction: Interaction,
    item: WorkItem | None,
    receipt: tuple[str, dict[str, Any]] | None,
    answer: dict[str, Any],
    actor: str,
) -> None:
    """The decision's event, and the receipt of an approval that met its quorum."""
    extra: dict[str, Any] = {}
    if item is not None and item.policy.get("rule"):
        # Time to decision per rule (the metrics) reads it from the event.
        extra["rule"] = item.policy["rule"]
    if receipt is not None:
        digest_, contents = receipt
        store.write_receipt(interaction, digest_, contents)
        extra |= {"approvers": contents["approvers"], "receipt": digest_}
    if interaction.kind == InteractionKind.QUESTION:
        kind = EventKind.QUESTION_ANSWERED
    elif answer["approved"]:
        kind = EventKind.APPROVAL_GRANTED
    else:
        kind = EventKind.APPROVAL_REJECTED
    store.event(
        interaction.run_id,
        kind,
        actor,
        key=interaction.operation_key,
        interaction=str(interaction.pk),
        tool=interaction.tool_name,
        response=answer,
        **extra,
    )


def _work_item(interaction: Interaction) -> WorkItem | None:
    try:
        return interaction.work
    except WorkItem.DoesNotExist:  # asked before work items existed: the default policy
        return None


def _approve(
    interaction: Interaction, item: WorkItem | None, actor: str, *, reauthenticated: bool
) -> tuple[str, dict[str, Any]] | None:
    """Count `actor`'s approval (under the run's lock). The receipt (digest, contents) once the
    quorum is met; None while it is not (the vote is recorded, with its event)."""
    rules = policy.Policy.from_json(item.policy) if item is not None else None
    if rules is not None and rules.high_risk and not reauthenticated:
        raise ReauthenticationRequired(
            f"rule {rules.rule!r} marks this call high-risk: sign in again (or use a token with "
            "the high-risk scope) to approve it"
        )
    run = interaction.run
    agent = registry.code_agent(run.agent, run.version)
    try:
        contents = policy.receipt(run, agent, interaction, item, fingerprint=run.fingerprint)
    except ValueError as exc:
        raise ApprovalRefused(str(exc)) from None
    approved_sha = digest(contents["arguments"])
    new = store.vote(interaction, actor, approved_sha)
    contents["approvers"] = policy.approvers(interaction, approved_sha)
    quorum = rules.quorum if rules is not None else 1
    if len(contents["approvers"]) >= quorum:
        return digest(contents), contents
    if new:
        store.event(
            run.pk,
            EventKind.APPROVAL_COUNTED,
            actor,
            key=interaction.operation_key,
            interaction=str(interaction.pk),
            tool=interaction.tool_name,
            approvers=contents["approvers"],
            quorum=quorum,
        )
    return None


# --- resolve ---------------------------------------------------------------------------------


# How an operator settles an uncertain operation (R4): the verified result; or, verified in the
# external system, that the call did not happen, and then either run it once more with the same
# operation id, or tell the model it did not happen.
RESULT = "result"
NOT_RUN_AGAIN = "not_run_again"
NOT_RUN_TELL_MODEL = "not_run_tell_model"
RESOLVE_OUTCOMES = (RESULT, NOT_RUN_AGAIN, NOT_RUN_TELL_MODEL)
RESOLVED = EventKind.OPERATION_RESOLVED


def resolve(
    run_id: Any,
    operation_key: str,
    result: Any = None,
    *,
    evidence: str,
    actor: str,
    outcome: str = RESULT,
) -> Operation:
    """Settle the uncertain operation a run is blocked on, with evidence; the run continues.

    Only while the run is blocked on exactly that operation; once settled, another resolve is
    refused, naming who settled it and when. The evidence (what was checked, e.g. the receipt
    id) is mandatory and kept with the actor in the run's history. `outcome` says what was found:

    - "result" (the default): the call happened; `result` is what the external system reports,
      checked against the tool's output schema, and becomes the call's outcome.
    - "not_run_again": the call verifiably did not happen; it runs once more, with the same
      operation id, whatever its recovery policy. Takes no `result`.
    - "not_run_tell_model": the call verifiably did not happen; the model receives an error
      result saying so, with the evidence, and decides. Takes no `result`.
    """
    actor = _actor(actor)
    if not isinstance(outcome, str) or outcome not in RESOLVE_OUTCOMES:
        raise InvalidInput(f"the outcome must be one of {', '.join(RESOLVE_OUTCOMES)}")
    key = _text(operation_key, "operation key", 200)
    evidence = _text(evidence, "evidence", MAX_EVIDENCE_CHARS)
    if outcome != RESULT and result is not None:
        raise InvalidInput("a call that did not happen has no result: leave the result out")
    run = _get_run(run_id)
    blocked = (
        run.status == RunStatus.NEEDS_ATTENTION
        and run.attention_reason == AttentionReason.UNCERTAIN_OPERATION
    )
    if not blocked or run.blocked_operation != key:
        raise NotBlocked(_not_blocked(run, key))
    op = Operation.objects.get(run=run, key=key)
    agent = registry.code_agent(run.agent, run.version)
    tool = agent.tool_named(op.name) if agent else None
    if tool is None:
        raise NotBlocked(
            f"the code of {op.name} ({run.agent} {run.version}) is gone; restore it first"
        )
    settled: dict[str, Any] = {}
    if outcome == RESULT:
        jsonvalues.check(result, what="result")
        try:
            settled = {"result": tool.validate_output(result), "is_error": False}
        except ValidationError as exc:
            problems = [
                f"{'.'.join(map(str, e['loc'])) or 'result'}: {e['msg']}" for e in exc.errors()
            ]
            raise InvalidInput(
                f"the result does not match {tool.name}'s output schema: " + "; ".join(problems),
                problems,
            ) from None
    elif outcome == NOT_RUN_TELL_MODEL:
        settled = {"result": _not_run_result(op, evidence), "is_error": True}
    now = clock.now()
    with transaction.atomic():
        moved = store.move_run(
            run.pk,
            RunStatus.QUEUED,
            sources=[RunStatus.NEEDS_ATTENTION],
            now=now,
            where={
                "attention_reason": AttentionReason.UNCERTAIN_OPERATION,
                "blocked_operation": key,
            },
            blocked_operation="",
            attention_reason="",
            attention_detail={},
        )
        if not moved:
            run.refresh_from_db()
            raise NotBlocked(_not_blocked(run, key))
        if outcome == NOT_RUN_AGAIN:
            # The engine runs a not_run operation again, with the same operation id.
            store.mark_not_run(op.pk)
        else:
            store.settle_operation(op.pk, now=now, **settled)
        store.event(
            run.pk,
            RESOLVED,
            actor,
            key=key,
            operation_id=op.operation_id,
            tool=op.name,
            outcome=outcome,
            evidence=evidence,
            **({"result": settled["result"]} if settled else {}),
        )
        dispatch.enqueue_on_commit(run.pk)
    # Fresh, with its run (moved on) and session: what the caller renders, read once.
    return Operation.objects.select_related("run__session").get(pk=op.pk)


def _not_run_result(op: Operation, evidence: str) -> dict[str, Any]:
    """The error result the model sees for a call an operator verified did not happen."""
    parsed = keys.parse_key(op.key)
    call_id = parsed.call_id if parsed else op.key
    return {
        "kind": "tool-not-run",
        "error": f"Tool {op.name!r} (call {call_id}) did not happen: an operator checked the "
        f"external system and found no effect. It was not run again. Evidence: {evidence}",
        "toolName": op.name,
        "toolCallId": call_id,
    }


def _when(moment: dt.datetime | None) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if moment else "?"


SETTLED_AS = {
    RESULT: "with a verified result",
    NOT_RUN_AGAIN: "as not run, to run once more",
    NOT_RUN_TELL_MODEL: "as not run, telling the model",
}


def _not_blocked(run: Run, key: str) -> str:
    """Why a resolve of `key` is refused: who settled it and when (R5), else the run's state."""
    settled = (
        Event.objects.filter(run=run, kind=RESOLVED, operation_key=key).order_by("-id").first()
    )
    if settled is not None:
        how = SETTLED_AS.get(settled.data.get("outcome", RESULT), "")
        return (
            f"{key} of run {run.pk} was already resolved {how} by {settled.actor} "
            f"at {_when(settled.created_at)}"
        )
    blocked = (
        run.status == RunStatus.NEEDS_ATTENTION
        and run.attention_reason == AttentionReason.UNCERTAIN_OPERATION
    )
    on = (
        f"blocked on {run.blocked_operation}"
        if blocked
        else f"{run.status}, not blocked on an operation"
    )
    return f"run {run.pk} is not blocked on {key!r} (it is {on})"


# --- retry and cancel ------------------------------------------------------------------------


def retry_problem(run: Run) -> str | None:
    """Why `retry` would be refused for `run` now, or None if it would be accepted."""
    return retry_problems([run])[0]


def retry_problems(runs: Sequence[Run]) -> list[str | None]:
    """`retry_problem` of each run, in a number of queries that does not grow with the runs
    (the version board previews a whole group): one for the sessions the failed runs are in,
    one per (agent, version, fingerprint) for the blocked ones."""
    failed = [run for run in runs if run.status == RunStatus.FAILED]
    # session -> its newest run that was not cancelled: (seq, id).
    newest: dict[Any, tuple[int, Any]] = {}
    if failed:
        rows = (
            Run.objects.filter(session_id__in={run.session_id for run in failed})
            .exclude(status=RunStatus.CANCELLED)
            .values_list("session_id", "seq", "pk")
        )
        for session_id, seq, pk in rows:
            if seq > newest.get(session_id, (0, None))[0]:
                newest[session_id] = (seq, pk)
    versions: dict[tuple[str, str, str], str | None] = {}
    problems: list[str | None] = []
    for run in runs:
        if run.status == RunStatus.RETRY_WAIT:
            problems.append(None)
        elif run.status == RunStatus.FAILED:
            seq, later = newest.get(run.session_id, (0, None))
            problems.append(
                f"a later run ({later}) has advanced the session since this one failed"
                if seq > run.seq
                else None
            )
        elif run.status != RunStatus.NEEDS_ATTENTION:
            problems.append(f"a {run.status} run cannot be retried")
        elif run.attention_reason == AttentionReason.UNCERTAIN_OPERATION:
            problems.append(
                f"blocked on {run.blocked_operation}, whose outcome is unknown: reconcile it "
                "with the verified result, or cancel the run"
            )
        else:
            key = (run.agent, run.version, run.fingerprint)
            if key not in versions:
                versions[key] = version_retry_problem(*key)
            problems.append(versions[key])
    return problems


def version_retry_problem(agent: str, version: str, fingerprint: str) -> str | None:
    """Why a run its version blocked cannot be retried now, or None: the same for every run of
    (agent, version, fingerprint), so the version board counts them without loading them."""
    problem = registry.version_problem(agent, version, fingerprint)
    return f"still blocked: {problem.message}" if problem else None


def retry(run_id: Any, *, actor: str) -> Run:
    """Re-attempt a failed or blocked run (or end a retry wait now) under the recovery checks.

    Never overrides manual recovery; refused once a later run advanced the session, or while
    another run of the session is unfinished (S5). The check and the requeue are one
    transaction (T3). A failed or blocked run gets fresh attempt counters for its unfinished
    model operations (and for the operation whose attempts ran out), and every completed result
    is kept (T4). "Retry now" on a retry wait only ends the wait: the attempts already made
    still count, so the maximum holds however often it is pressed (T6).
    """
    actor = _actor(actor)
    now = clock.now()
    with transaction.atomic():
        # The run's row lock orders concurrent retries (and cancels): each decides on what the
        # one before it committed.
        run = _get(Run, run_id, lock=True)
        problem = retry_problem(run)
        if problem is not None:
            raise RetryRejected(f"run {run.pk} cannot be retried: {problem}")
        previous = run.status
        fresh = previous != RunStatus.RETRY_WAIT
        # A person decided to try again: a crash loop's count starts over (its last crash stays).
        counters: dict[str, Any] = {"crashed_claims": 0} if fresh else {}
        try:
            # A savepoint: on PostgreSQL a violated constraint aborts the whole transaction.
            with transaction.atomic():
                moved = store.move_run(
                    run.pk,
                    RunStatus.QUEUED,
                    sources=[previous],
                    now=now,
                    where={"fence": run.fence},
                    next_attempt_at=None,
                    error="",
                    error_kind="",
                    attention_reason="",
                    attention_detail={},
                    blocked_operation="",
                    finished_at=None,
                    **counters,
                )
        except IntegrityError:
            # S5: a message submitted to the session at the same moment holds its one
            # unfinished run; the check above could not see it before it committed.
            raise RetryRejected(
                f"run {run.pk} cannot be retried: another run of its session "
                f"{run.session_id} is unfinished"
            ) from None
        if not moved:
            raise RetryRejected(f"run {run.pk} changed meanwhile; reload and try again")
        if fresh:
            # Unfinished model requests start counting again, and so does an operation whose
            # re-runs after crashes ran out.
            exhausted = run.attention_reason == AttentionReason.ATTEMPTS_EXHAUSTED
            store.fresh_attempts(run.pk, also=run.blocked_operation if exhausted else "")
        kind = EventKind.RETRIED_NOW if previous == RunStatus.RETRY_WAIT else EventKind.RETRIED
        store.event(run.pk, kind, actor, previous_status=previous)
        dispatch.enqueue_on_commit(run.pk)
    return _fresh(run.pk)


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
    actor = _actor(actor)
    if isinstance(run_ids, str | bytes):
        raise InvalidInput("the run ids must be a list of ids, not one string")
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
    """Cancel an unfinished run; a worker still running it can commit nothing more.

    The reason is optional ("" for none) and kept in the run's history.
    """
    actor = _actor(actor)
    if not isinstance(reason, str):
        raise InvalidInput(f"the reason must be text, not {type(reason).__name__}")
    reason = jsonvalues.check_text(reason.strip(), what="reason", max_length=MAX_REASON_CHARS)
    now = clock.now()
    with transaction.atomic():
        # The row lock: the status read is the one the UPDATE moves from (its previous status).
        run = _get(Run, run_id, lock=True)
        if run.status not in UNFINISHED_STATUSES:
            raise InvalidTransition(
                f"run {run.pk} is {run.status}; only unfinished runs can be cancelled"
            )
        # One guarded UPDATE, the fence bumped in it: a worker still running the run can
        # commit nothing more.
        moved = store.move_run(
            run.pk,
            RunStatus.CANCELLED,
            sources=UNFINISHED_STATUSES,
            now=now,
            bump_fence=True,
            lease_owner="",
            lease_expires_at=None,
            next_attempt_at=None,
            finished_at=now,
        )
        if not moved:
            raise InvalidTransition(f"run {run.pk} finished meanwhile; it cannot be cancelled")
        store.close_interactions(run.pk)
        store.event(run.pk, EventKind.CANCELLED, actor, previous_status=run.status, reason=reason)
    return _fresh(run.pk)


# --- discovery -------------------------------------------------------------------------------


def list_runs(*statuses: str) -> Any:
    """Runs in `statuses` (default: every unfinished one), oldest first."""
    return Run.objects.filter(status__in=statuses or UNFINISHED_STATUSES).order_by("created_at")


@overload
def resume() -> list[str]: ...


@overload
def resume(run_id: Any, *, actor: str) -> Run: ...


def resume(run_id: Any = None, *, actor: str | None = None) -> list[str] | Run:
    """Let runs move again.

    `resume()`: hand every run that can move now to the executor — startup discovery and the
    sweep: first the due approval timers fire (expiry, escalation, warnings), each once; the
    counts by status are compacted; then queued runs whose message was lost, expired leases and
    due retry timers, each sent once per lease period. Claiming stays the
    only door into `running`, so handing a run over twice is harmless.

    `resume(run_id, actor=...)`: return a paused run exactly where it was paused (see
    `runtime.surgery.resume_run`).
    """
    if run_id is not None or actor is not None:
        from runtime.surgery import resume_run

        return resume_run(run_id, actor=_actor(actor))
    from runtime import work  # it builds on this module's verbs

    work.fire_due_timers()
    store.compact_counts()
    due = [str(pk) for pk in store.due_run_ids()]
    for each in due:
        dispatch.enqueue_on_commit(each)
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
