"""Read-side queries for the console: each function returns what one page or fragment shows.

Every list is built with a fixed number of queries, whatever its length (no N+1), and pages
use keyset pagination on indexed columns, so they stay fast with a million runs: nothing counts
every row of a table (the counts by status are kept by the database, runtime.store.counts).
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connection
from django.db.models import OuterRef, Q, QuerySet, Subquery
from django.db.models.expressions import RawSQL

from agentops import decisions, live, work
from agentops.decisions import code_tool
from agentops.integrations import search_index
from runtime import clock, control, policy, registry, store
from runtime.agents import Tool
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
    OperationKind,
    OperationStatus,
    Run,
    RunStatus,
)
from runtime.transcript import run_messages

PAGE_SIZE = 50
# The inbox lists at most this many items per queue, the most urgent first (the count says how
# many there are, and links to the rest). The page's time is its rows' rendering, not its
# queries (at 1,000,000 runs: 11 of 88 ms with 50 per queue; 25 per queue made 41 % fewer
# function calls): a screenful per queue is what an operator works through before it changes.
QUEUE_LIMIT = 25
# Statuses counted on the inbox: what is in flight or needs a person, and failures. Completed
# and cancelled runs grow without bound and need nobody; the runs list shows them.
COUNTED_STATUSES = (
    RunStatus.WAITING,
    RunStatus.NEEDS_ATTENTION,
    RunStatus.RETRY_WAIT,
    RunStatus.QUEUED,
    RunStatus.RUNNING,
    RunStatus.PAUSED,
    RunStatus.FAILED,
)
# Kinds an operator's action records, offered as suggestions in the audit log's filter.
OPERATOR_KINDS = (
    EventKind.SUBMITTED,
    EventKind.APPROVAL_GRANTED,
    EventKind.APPROVAL_REJECTED,
    EventKind.QUESTION_ANSWERED,
    EventKind.OPERATION_RESOLVED,
    EventKind.RETRIED,
    EventKind.RETRIED_NOW,
    EventKind.CANCELLED,
    EventKind.AGENT_REGISTERED,
    EventKind.AGENT_UNREGISTERED,
)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_HEXISH = re.compile(r"^[0-9a-f-]{6,36}$")


# --- inbox ---------------------------------------------------------------------------------------


@dataclass
class Queue:
    """One inbox queue: its first items (oldest first) and how many there are in all."""

    items: list[Any]
    total: int

    @property
    def more(self) -> int:
        return max(0, self.total - len(self.items))


def _max_attempts(run: Run) -> int | None:
    agent = registry.code_agent(run.agent, run.version)
    return agent.model_retry.max_attempts if agent and agent.model_retry else None


# A run's columns that grow with it and that no list shows: its transcript (every message it
# added) and a fork's seed and edits. Read per row, a page of long runs read and decoded them
# all. The inbox's rows show neither the message nor the answer either.
GROWING = ("transcript", "fork_context")
INBOX_UNSHOWN = (*GROWING, "input", "output")
# What an approval's or a question's row is made of: of its run, the agent and version (which
# name the code); of its work item, its timers, flag and claims. The inbox is rendered up to
# ten times a second per process under load: building its rows' whole models was a quarter of
# its selector's CPU (15,100 function calls an inbox with 25 approvals, 11,100 without).
INBOX_ITEM = (
    "kind",
    "tool_name",
    "operation_key",
    "payload",
    "status",
    "created_at",
    "run__agent",
    "run__version",
    "work__policy",
    "work__expires_at",
    "work__escalated_at",
    "work__flagged",
    "work__claimed_by",
    "work__claim_expires_at",
    "work__assigned_to",
)


def _first(
    rows: QuerySet[Any], order: Sequence[Any], shown: QuerySet[Any], *, total: int
) -> list[Any]:
    """The first QUEUE_LIMIT of `rows` in `order`, as `shown` (its joins and annotations).

    One query: the limit is taken in a subquery over the queue's own rows (served by a partial
    index, or a sort of the queue alone), and only those rows are joined to their runs and
    sessions. Joined first, a queue of 10,000 would be joined whole before being cut to 50.
    None when the queue's kept count, `total`, is zero: its rows need no query.
    """
    if not total:
        return []
    first = rows.order_by(*order).values("pk")[:QUEUE_LIMIT]
    return list(shown.filter(pk__in=first).order_by(*order))


def inbox(user: str = "", show: str = "") -> dict[str, Any]:
    """What needs a person now: approvals, questions, blocked runs and retry waits.

    `show` filters the approvals and questions ("mine", "unassigned", "urgent": see
    agentops.work.FILTERS) for `user`; they are sorted by urgency, then age."""
    # Kept by the database as runs and interactions change: a few rows, however many runs.
    kept = store.counts()
    counts, pending_counts = kept.runs, kept.pending
    now = clock.now()
    show = show if show in work.FILTERS else ""
    pending = Interaction.objects.filter(
        work.inbox_filter(show, user, now), status=InteractionStatus.PENDING
    )
    # A queue whose kept count is zero is not read: most of the time most queues are empty.
    # (Its count and its rows are two reads: a row that commits between them is shown by the
    # live push its commit makes, as a count that moved between them would be.)
    total_approvals = pending_counts.get(InteractionKind.TOOL_APPROVAL, 0)
    total_questions = pending_counts.get(InteractionKind.QUESTION, 0)
    total_attention = counts.get(RunStatus.NEEDS_ATTENTION, 0)
    total_retries = counts.get(RunStatus.RETRY_WAIT, 0)
    # No queue joins the runs' sessions: the inbox shows nothing of them.
    shown = Interaction.objects.select_related("run", "work").only(*INBOX_ITEM)
    approvals = _first(
        pending.filter(kind=InteractionKind.TOOL_APPROVAL),
        work.INBOX_ORDER,
        shown,
        total=total_approvals,
    )
    questions = _first(
        pending.filter(kind=InteractionKind.QUESTION),
        work.INBOX_ORDER,
        shown,
        total=total_questions,
    )
    work.annotate([*approvals, *questions], now)
    # updated_at is when the run stopped: nothing touches a blocked run until a person acts.
    attention = _first(
        Run.objects.filter(status=RunStatus.NEEDS_ATTENTION),
        ("updated_at", "pk"),
        Run.objects.defer(*INBOX_UNSHOWN),
        total=total_attention,
    )
    retries = _first(
        Run.objects.filter(status=RunStatus.RETRY_WAIT),
        ("next_attempt_at", "pk"),
        Run.objects.defer(*INBOX_UNSHOWN, "attention_detail").annotate(
            attempt=Subquery(
                Operation.objects.filter(
                    run=OuterRef("pk"), kind=OperationKind.MODEL, status=OperationStatus.FAILED
                )
                .order_by("-intent_at")
                .values("attempts")[:1]
            )
        ),
        total=total_retries,
    )
    for run in retries:
        run.max_attempts = _max_attempts(run)  # type: ignore[attr-defined]
    subjects = decisions.subjects_of(approvals)
    related = decisions.related_calls(approvals)
    for item in approvals:
        item.subject = subjects.get(item.pk, "")  # type: ignore[attr-defined]
        item.related = related.get(item.pk, [])  # type: ignore[attr-defined]
    status_counts = [(status, counts.get(status, 0)) for status in COUNTED_STATUSES]
    return {
        "status_counts": status_counts,
        "approvals": Queue(approvals, total_approvals),
        "questions": Queue(questions, total_questions),
        "attention": Queue(attention, total_attention),
        "retries": Queue(retries, total_retries),
        "show": show,
        "filters": work.FILTERS,
    }


# --- runs list -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunFilters:
    status: str = ""
    agent: str = ""
    version: str = ""
    session: uuid.UUID | None = None
    q: str = ""


@dataclass
class Page:
    """One page of a keyset-paginated list, with the cursors of its neighbours."""

    rows: list[Any]
    older: str | None = None
    newer: str | None = None
    filters: dict[str, Any] = field(default_factory=dict)


def run_cursor(run: Run) -> str:
    micros = (run.created_at - _EPOCH) // dt.timedelta(microseconds=1)
    return f"{micros}.{run.pk.hex}"


def parse_run_cursor(value: str) -> tuple[dt.datetime, uuid.UUID] | None:
    """A cursor from a URL, or None if it is malformed (the list then starts at the top)."""
    micros, _, pk = value.partition(".")
    try:
        return _EPOCH + dt.timedelta(microseconds=int(micros)), uuid.UUID(hex=pk)
    except (ValueError, OverflowError):
        return None


# The text search on PostgreSQL: one ILIKE per table, each served by a trigram index of
# migration 0005 on exactly the expression written here (keep the two equal); the tool calls'
# text is folded from the event log into a table of its own, and the calls of the events after
# the fold's position are read by their events (search_index).
def _pg_search(folded_through: int) -> str:
    return f"""
    SELECT id FROM agentops_run WHERE (input || ' ' || output) ILIKE %s
    UNION SELECT r.id FROM agentops_run r JOIN agentops_session s ON s.id = r.session_id
        WHERE s.title ILIKE %s
    UNION {search_index.FOLDED}
    UNION {search_index.unfolded(folded_through)}
    UNION SELECT run_id FROM agentops_interaction WHERE payload::text ILIKE %s
"""


# What an id's first digits find: runs, and the runs of sessions, whose id is in the range.
_PG_ID_RANGE = """
    UNION SELECT id FROM agentops_run WHERE id BETWEEN %s AND %s
    UNION SELECT id FROM agentops_run WHERE session_id BETWEEN %s AND %s
"""


def _like_pattern(q: str) -> str:
    escaped = q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _id_range(ident: str) -> tuple[uuid.UUID, uuid.UUID] | None:
    """The ids that start with `ident`, if it looks like the start of one: a range of ids, read
    from the primary key's index, where a LIKE on the id's text would read every run."""
    prefix = ident.replace("-", "")[:32]
    if not (_HEXISH.match(ident) and prefix):
        return None
    return uuid.UUID(prefix.ljust(32, "0")), uuid.UUID(prefix.ljust(32, "f"))


def _search(q: str) -> Q:
    """Run id (or an operation id, which starts with it), session, the messages, and the tool
    calls' arguments and results (a customer's name, a receipt id)."""
    ident = q.split(":", 1)[0].strip().lower()
    try:
        exact = uuid.UUID(ident)
    except ValueError:
        pass
    else:
        # A whole id finds its run or session by primary key, through the index.
        return Q(pk=exact) | Q(session_id=exact)
    ids = _id_range(ident)
    if connection.vendor == "postgresql":
        # One subquery of ids, each of its parts read from an index; an OR of the parts in the
        # runs' own WHERE would make PostgreSQL read every run to test it.
        sql = _pg_search(search_index.folded_through())
        params: list[Any] = [_like_pattern(q)] * sql.count("%s")
        if ids:
            sql += _PG_ID_RANGE
            params += [*ids, *ids]
        return Q(pk__in=RawSQL(sql, params))
    # SQLite: no trigram index; the same places are scanned.
    text = Q(session__title__icontains=q) | Q(input__icontains=q) | Q(output__icontains=q)
    # Uncorrelated subqueries: each table is scanned once, not once per run.
    tools = Operation.objects.filter(kind=OperationKind.TOOL)
    text |= Q(pk__in=tools.filter(input__icontains=q).values("run_id"))
    text |= Q(pk__in=tools.filter(result__icontains=q).values("run_id"))
    # A pending approval has no operation yet: its arguments are in the interaction.
    text |= Q(pk__in=Interaction.objects.filter(payload__icontains=q).values("run_id"))
    if ids:
        text |= Q(pk__range=ids) | Q(session_id__gte=ids[0], session_id__lte=ids[1])
    return text


def runs_by_fields(
    runs: QuerySet[Run],
    *,
    status: str | None,
    agent: str | None,
    version: str | None,
    session: uuid.UUID | None,
) -> QuerySet[Run]:
    """The runs-list filters the console and the API share (each one only when given)."""
    if status:
        runs = runs.filter(status=status)
    if agent:
        runs = runs.filter(agent=agent)
    if version:
        runs = runs.filter(version=version)
    if session:
        runs = runs.filter(session_id=session)
    return runs


def filtered_runs(filters: RunFilters) -> QuerySet[Run]:
    runs = runs_by_fields(
        Run.objects.select_related("session"),
        status=filters.status,
        agent=filters.agent,
        version=filters.version,
        session=filters.session,
    )
    if filters.q:
        runs = runs.filter(_search(filters.q))
    return runs


def _before(at: dt.datetime, pk: uuid.UUID) -> Q:
    # The plain range first, so both databases scan the created_at index from the cursor on;
    # the OR only settles ties within one timestamp.
    return Q(created_at__lte=at) & (Q(created_at__lt=at) | Q(pk__lt=pk))


def _after(at: dt.datetime, pk: uuid.UUID) -> Q:
    return Q(created_at__gte=at) & (Q(created_at__gt=at) | Q(pk__gt=pk))


def runs_page(filters: RunFilters, *, before: str = "", after: str = "") -> Page:
    """Newest first, PAGE_SIZE at a time; `before`/`after` are cursors of neighbouring rows."""
    runs = filtered_runs(filters).defer(*GROWING, "attention_detail")
    newest_first = ("-created_at", "-pk")
    older_cursor = parse_run_cursor(before) if before else None
    newer_cursor = parse_run_cursor(after) if after and not older_cursor else None
    if newer_cursor:
        at, pk = newer_cursor
        rows = list(runs.filter(_after(at, pk)).order_by("created_at", "pk")[: PAGE_SIZE + 1])
        has_newer = len(rows) > PAGE_SIZE
        rows = list(reversed(rows[:PAGE_SIZE]))
        has_older = True
    else:
        if older_cursor:
            at, pk = older_cursor
            runs = runs.filter(_before(at, pk))
        rows = list(runs.order_by(*newest_first)[: PAGE_SIZE + 1])
        has_older = len(rows) > PAGE_SIZE
        rows = rows[:PAGE_SIZE]
        has_newer = older_cursor is not None
    return Page(
        rows=rows,
        older=run_cursor(rows[-1]) if rows and has_older else None,
        newer=run_cursor(rows[0]) if rows and has_newer else None,
    )


def filter_choices() -> dict[str, Any]:
    """Agents and versions for the runs filters: from code and registrations, not from runs."""
    known = registry.known_versions()
    return {
        "statuses": RunStatus.choices,
        "agents": sorted({agent for agent, _ in known}),
        "versions": sorted({version for _, version in known}),
    }


# --- run detail ----------------------------------------------------------------------------------


def _last_words(operations: dict[str, Operation], key: str) -> str:
    """What the model wrote in the response that made the call `key` (step-N/tool/…)."""
    model = operations.get(key.split("/", 1)[0] + "/model")
    if model is None or not isinstance(model.result, dict):
        return ""
    return "".join(
        block.get("text", "")
        for block in model.result.get("content", [])
        if isinstance(block, dict) and block.get("type") == "text"
    ).strip()


# Events of the runtime shown in the default timeline besides operations with side effects:
# what a person is asked for, and how the run stopped or ended.
NOTABLE_KINDS = frozenset(
    {
        EventKind.TOOL_APPROVAL_REQUESTED,
        EventKind.QUESTION_REQUESTED,
        EventKind.BLOCKED,
        EventKind.RETRY_SCHEDULED,
        EventKind.COMPLETED,
        EventKind.FAILED,
        EventKind.CANCELLED,
        EventKind.LEASE_EXPIRED,
    }
)


@dataclass
class TimelineRow:
    """One row of a run's timeline: an operation (its intent and outcome folded), or an event."""

    at: dt.datetime
    label: str
    actor: str = RUNTIME
    operation: Operation | None = None
    event: Event | None = None
    # What a decision decided ("refund_order on order 1003: amount_cents $20.00").
    decided: str = ""

    @property
    def by_person(self) -> bool:
        return self.actor != RUNTIME

    @property
    def duration(self) -> dt.timedelta | None:
        op = self.operation
        return op.outcome_at - op.intent_at if op and op.outcome_at else None

    @property
    def notable(self) -> bool:
        """In the default view: what people did, and what had (or may have had) effects."""
        if self.operation is not None:
            return self.operation.kind == OperationKind.TOOL and self.operation.policy != "safe"
        return self.by_person or (self.event is not None and self.event.kind in NOTABLE_KINDS)


def _operation_label(op: Operation) -> str:
    if op.kind == OperationKind.TOOL:
        return op.name
    return f"Model request, {op.key.split('/', 1)[0].replace('-', ' ')}"


def timeline(
    run: Run, events: list[Event], operations: list[Operation], decided: dict[str, str]
) -> list[TimelineRow]:
    """One row per operation (where its first intent was) and one per other event, in order."""
    by_key = {op.key: op for op in operations}
    rows: list[TimelineRow] = []
    folded: set[str] = set()
    for event in events:
        op = by_key.get(event.operation_key) if event.kind in live.PROGRESS_KINDS else None
        if op is not None:
            if op.key not in folded:
                folded.add(op.key)
                rows.append(TimelineRow(at=op.intent_at, label=_operation_label(op), operation=op))
            continue
        rows.append(
            TimelineRow(
                at=event.created_at,
                label=event.kind,
                actor=event.actor,
                event=event,
                decided=decided.get(str(event.data.get("interaction", "")), ""),
            )
        )
    return rows


def decided_summaries(events: list[Event]) -> dict[str, str]:
    """What each approval decision among `events` was about, by interaction id (one query)."""
    ids = [
        event.data.get("interaction")
        for event in events
        if event.kind in (EventKind.APPROVAL_GRANTED, EventKind.APPROVAL_REJECTED)
    ]
    found = Interaction.objects.filter(pk__in=[i for i in ids if i]).select_related("run")
    return {str(item.pk): decisions.summary(item) for item in found}


def run_detail(run: Run, *, every_event: bool = False) -> dict[str, Any]:
    """Everything the run page shows: header, actions, timeline, transcript, operations.

    The timeline shows what people and side effects did, or with `every_event` every event.
    """
    events = list(run.events.order_by("id"))
    operations = list(run.operations.order_by("intent_at", "pk"))
    rows = timeline(run, events, operations, decided_summaries(events))
    shown = rows if every_event else [row for row in rows if row.notable]
    pending = None
    if run.status == RunStatus.WAITING:
        pending = run.interactions.filter(status=InteractionStatus.PENDING).first()
    retry_problem = None
    can_retry = False
    if run.status in (RunStatus.FAILED, RunStatus.NEEDS_ATTENTION, RunStatus.RETRY_WAIT):
        retry_problem = control.retry_problem(run)
        can_retry = retry_problem is None
    by_key = {op.key: op for op in operations}
    blocked = (
        by_key.get(run.blocked_operation)
        if run.attention_reason == AttentionReason.UNCERTAIN_OPERATION
        else None
    )
    # The operation whose re-runs after crashes ran out, named on the page.
    attention_operation = None
    if run.attention_reason == AttentionReason.ATTEMPTS_EXHAUSTED:
        attention_operation = by_key.get(run.blocked_operation)
    attempt = None
    if run.status == RunStatus.RETRY_WAIT:
        failed = [
            op
            for op in operations
            if op.kind == OperationKind.MODEL and op.status == OperationStatus.FAILED
        ]
        attempt = failed[-1].attempts if failed else None
    return {
        "run": run,
        "events": events,
        "timeline": shown,
        "timeline_total": len(rows),
        "every_event": every_event,
        "operations": operations,
        "transcript": run_messages(run, operations),
        "pending": pending,
        "blocked": blocked,
        "attention_operation": attention_operation,
        "can_retry": can_retry,
        "retry_problem": retry_problem,
        "unfinished": run.status in UNFINISHED_STATUSES,
        "attempt": attempt,
        "max_attempts": _max_attempts(run),
    }


# --- interactions --------------------------------------------------------------------------------


def interaction_detail(interaction: Interaction, viewer: str) -> dict[str, Any]:
    """An approval or question with its context (the agent's last words, the transcript), and
    its policy as `viewer` sees it: the decisions the rule leaves them."""
    run = interaction.run
    operations = list(run.operations.order_by("intent_at", "pk"))
    by_key = {op.key: op for op in operations}
    tool = code_tool(run, interaction.tool_name)
    transcript = run_messages(run, operations)
    is_approval = interaction.kind == InteractionKind.TOOL_APPROVAL
    arguments = (interaction.payload or {}).get("arguments") if is_approval else None
    # What would run: an approver's edit, if any (the provenance table shows the proposal).
    to_run = (
        policy.current_arguments(interaction, work.item_of(interaction)) if is_approval else None
    )
    pending = interaction.status == InteractionStatus.PENDING
    return {
        "interaction": interaction,
        "run": run,
        "last_words": _last_words(by_key, interaction.operation_key),
        "tool_description": tool.description if tool else "",
        "transcript": transcript,
        "is_approval": is_approval,
        "arguments": decisions.arguments(
            tool,
            arguments,
            decisions.conversation_sources(
                run, transcript, interaction.operation_key.rpartition("/")[2]
            ),
        ),
        # Fetched while the decision is open: once made, "after this refund" is history.
        "facts": decisions.facts(tool, to_run) if is_approval and pending else None,
        "subject": decisions.subject_of(tool, arguments) if is_approval else "",
        "related": decisions.related_calls([interaction]).get(interaction.pk, []),
        "recent_days": decisions.RECENT_DAYS,
        "high_risk": is_approval and pending and decisions.is_high_risk(tool, to_run),
        "work": work.policy_detail(
            interaction, tool, by_key.get(interaction.operation_key), viewer
        ),
    }


def next_approval(after: Interaction) -> Interaction | None:
    """The oldest pending approval other than `after`: the inbox's first, once `after` is done."""
    return (
        Interaction.objects.filter(
            status=InteractionStatus.PENDING, kind=InteractionKind.TOOL_APPROVAL
        )
        .exclude(pk=after.pk)
        .order_by("created_at", "pk")
        .first()
    )


# --- reconcile -----------------------------------------------------------------------------------


@dataclass
class Lookup:
    """What the external system reported for an operation id, if the tool can ask it."""

    available: bool
    found: dict[str, Any] | None = None
    error: str = ""


def _look_up(tool: Tool | None, operation_id: str) -> Lookup:
    if tool is None or tool.lookup is None:
        return Lookup(available=False)
    try:
        return Lookup(available=True, found=tool.look_up(operation_id))
    except Exception as exc:  # the external system's failure is shown, not raised
        return Lookup(available=True, error=f"{type(exc).__name__}: {exc}")


def _schema_fields(tool: Tool | None) -> list[dict[str, Any]]:
    if tool is None:
        return []
    schema = tool.output_model.model_json_schema()
    required = set(schema.get("required", []))
    return [
        {
            "name": name,
            "type": spec.get("type", "value"),
            "required": name in required,
            "description": spec.get("description", ""),
        }
        for name, spec in schema.get("properties", {}).items()
    ]


def reconcile_detail(run: Run, key: str = "") -> dict[str, Any]:
    """The operation a run is blocked on (or was: `key`), what the external system says of it,
    and, once it is no longer blocked, how it was settled."""
    key = key or run.blocked_operation
    op = Operation.objects.filter(run=run, key=key).first() if key else None
    blocked = (
        op is not None
        and run.status == RunStatus.NEEDS_ATTENTION
        and run.attention_reason == AttentionReason.UNCERTAIN_OPERATION
        and run.blocked_operation == op.key
    )
    tool = code_tool(run, op.name) if op else None
    settled = None
    if op is not None and not blocked:
        settled = (
            Event.objects.filter(run=run, kind=EventKind.OPERATION_RESOLVED, operation_key=op.key)
            .order_by("-id")
            .first()
        )
    return {
        "run": run,
        "op": op,
        "blocked": blocked,
        "tool": tool,
        "code_missing": op is not None and tool is None,
        "lookup": _look_up(tool, op.operation_id) if blocked and op else Lookup(False),
        "schema_fields": _schema_fields(tool),
        "settled": settled,
    }


# --- audit log -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditFilters:
    actor: str = ""
    kind: str = ""
    run: uuid.UUID | None = None


def audit_page(
    filters: AuditFilters, *, before: int | None = None, after: int | None = None
) -> Page:
    """Operator actions (every event not written by the runtime), newest first, by id."""
    events = Event.objects.by_people()
    if filters.actor:
        events = events.filter(actor=filters.actor)
    if filters.kind:
        events = events.filter(kind=filters.kind)
    if filters.run:
        events = events.filter(run_id=filters.run)
    if after is not None and before is None:
        rows = list(events.filter(pk__gt=after).order_by("pk")[: PAGE_SIZE + 1])
        has_newer = len(rows) > PAGE_SIZE
        rows = list(reversed(rows[:PAGE_SIZE]))
        has_older = True
    else:
        if before is not None:
            events = events.filter(pk__lt=before)
        rows = list(events.order_by("-pk")[: PAGE_SIZE + 1])
        has_older = len(rows) > PAGE_SIZE
        rows = rows[:PAGE_SIZE]
        has_newer = before is not None
    decided = decided_summaries(rows)
    for event in rows:
        event.decided = decided.get(str(event.data.get("interaction", "")), "")  # type: ignore[attr-defined]
    return Page(
        rows=rows,
        older=str(rows[-1].pk) if rows and has_older else None,
        newer=str(rows[0].pk) if rows and has_newer else None,
    )
