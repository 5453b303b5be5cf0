"""The durable data model: sessions, runs, operations, interactions, events, agent versions,
and the approval policy (rules, work items, votes, timers, receipts).

Rows are written only by the store (`runtime/store/`); everything else reads. The vocabulary
of stored values is defined here once: statuses (with the allowed run transitions beside their
choices; the store checks every guarded move against them), event kinds, the runtime's actor
name, and the permission names.
"""

from __future__ import annotations

import enum
import uuid
from typing import Any, ClassVar, Self, TypeVar

from django.db import models
from django.db.models import Q

from runtime import keys

M = TypeVar("M", bound=models.Model)

# The actor of the runtime's own events; a person's events name the person.
RUNTIME = "runtime"


class Permission(enum.StrEnum):
    """Who may do what: the names views, the admin, the API and tests check (user.has_perm)."""

    VIEW = "agentops.view_run"  # Django's own view permission of runs: seeing the console
    RESPOND = "agentops.respond_run"
    RESOLVE = "agentops.resolve_run"
    CONTROL = "agentops.control_run"
    EDIT_ARGUMENTS = "agentops.edit_arguments"
    MANAGE_VERSIONS = "agentops.manage_agentversion"

    @property
    def codename(self) -> str:
        return self.value.partition(".")[2]


class EventKind(models.TextChoices):
    """What an event records. The engine's, then the people's (through the verbs)."""

    CLAIMED = "claimed"
    LEASE_EXPIRED = "lease_expired"
    INTENT = "intent"
    OUTCOME = "outcome"
    COMPLETED = "completed"
    FAILED = "failed"
    BLOCKED = "blocked"
    WAITING = "waiting"
    RETRY_SCHEDULED = "retry_scheduled"
    TOOL_APPROVAL_REQUESTED = "tool_approval_requested"
    QUESTION_REQUESTED = "question_requested"
    SUBMITTED = "submitted"
    APPROVAL_GRANTED = "approval_granted"
    APPROVAL_REJECTED = "approval_rejected"
    QUESTION_ANSWERED = "question_answered"
    OPERATION_RESOLVED = "operation_resolved"
    RETRIED = "retried"
    RETRIED_NOW = "retried_now"
    CANCELLED = "cancelled"
    AGENT_REGISTERED = "agent_registered"
    AGENT_UNREGISTERED = "agent_unregistered"
    # Run surgery: pause and resume, forks, bulk jobs.
    PAUSE_REQUESTED = "pause_requested"
    PAUSE_WITHDRAWN = "pause_withdrawn"
    PAUSE_DROPPED = "pause_dropped"
    PAUSED = "paused"
    RESUMED = "resumed"
    FORKED = "forked"
    FORK_CREATED = "fork_created"
    BULK_JOB_SUBMITTED = "bulk_job_submitted"
    BULK_JOB_STOPPED = "bulk_job_stopped"
    # Approval policy: the rule a call asks under, approvals short of a quorum, edits, the
    # work queue's claims, and the timers the sweep fires.
    APPROVAL_RULE_APPLIED = "approval_rule_applied"
    APPROVAL_COUNTED = "approval_counted"
    ARGUMENTS_EDITED = "arguments_edited"
    ITEM_CLAIMED = "item_claimed"
    ITEM_RELEASED = "item_released"
    ITEM_ASSIGNED = "item_assigned"
    APPROVAL_EXPIRING = "approval_expiring"
    APPROVAL_ESCALATED = "approval_escalated"
    APPROVAL_EXPIRED = "approval_expired"

    @classmethod
    def requested(cls, interaction_kind: str) -> EventKind:
        """The event that asks a person: for a tool approval or a question."""
        return cls(f"{interaction_kind}_requested")


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    RETRY_WAIT = "retry_wait"
    NEEDS_ATTENTION = "needs_attention"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # An operator paused it: never claimed, its timer held, until resumed (to `paused_from`).
    PAUSED = "paused"


# from -> the statuses a guarded UPDATE may move it to.
RUN_TRANSITIONS: dict[str, frozenset[str]] = {
    RunStatus.QUEUED: frozenset({RunStatus.RUNNING, RunStatus.PAUSED, RunStatus.CANCELLED}),
    RunStatus.RUNNING: frozenset(
        {
            RunStatus.RUNNING,  # a takeover of an expired lease
            RunStatus.COMPLETED,
            RunStatus.FAILED,
            RunStatus.WAITING,
            RunStatus.RETRY_WAIT,
            RunStatus.NEEDS_ATTENTION,
            RunStatus.CANCELLED,
            RunStatus.PAUSED,  # at a durable boundary, after a pause was requested
        }
    ),
    RunStatus.WAITING: frozenset({RunStatus.QUEUED, RunStatus.PAUSED, RunStatus.CANCELLED}),
    RunStatus.RETRY_WAIT: frozenset(
        {RunStatus.RUNNING, RunStatus.QUEUED, RunStatus.PAUSED, RunStatus.CANCELLED}
    ),
    RunStatus.NEEDS_ATTENTION: frozenset({RunStatus.QUEUED, RunStatus.PAUSED, RunStatus.CANCELLED}),
    # Resume returns it where it was paused (or queued, if its interaction was answered).
    RunStatus.PAUSED: frozenset(
        {
            RunStatus.QUEUED,
            RunStatus.WAITING,
            RunStatus.RETRY_WAIT,
            RunStatus.NEEDS_ATTENTION,
            RunStatus.CANCELLED,
        }
    ),
    RunStatus.FAILED: frozenset({RunStatus.QUEUED}),
    RunStatus.COMPLETED: frozenset(),
    RunStatus.CANCELLED: frozenset(),
}

UNFINISHED_STATUSES = (
    RunStatus.QUEUED,
    RunStatus.RUNNING,
    RunStatus.WAITING,
    RunStatus.RETRY_WAIT,
    RunStatus.NEEDS_ATTENTION,
    RunStatus.PAUSED,
)
# Where a paused run can return to: the statuses it may be paused from, `running` aside (a
# running run pauses at its next durable boundary and returns as queued, to replay its log).
PAUSABLE_STATUSES = (
    RunStatus.QUEUED,
    RunStatus.WAITING,
    RunStatus.RETRY_WAIT,
    RunStatus.NEEDS_ATTENTION,
)
TERMINAL_STATUSES = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)


class AttentionReason(models.TextChoices):
    UNCERTAIN_OPERATION = "uncertain_operation", "Uncertain operation"
    VERSION_MISSING = "version_missing", "Agent version not in the code"
    VERSION_UNREGISTERED = "version_unregistered", "Agent version not registered"
    FINGERPRINT_MISMATCH = "fingerprint_mismatch", "Agent code changed under the same version"
    INPUT_MISMATCH = "input_mismatch", "Saved operation input differs from the code's"
    CRASH_LOOP = "crash_loop", "Crash loop: claims keep ending in a crash"
    ATTEMPTS_EXHAUSTED = "attempts_exhausted", "An operation was re-run after crashes too often"
    MODEL_STOPPED = "model_stopped", "The model ended the turn without an answer"
    RECEIPT_MISMATCH = "receipt_mismatch", "What is about to run differs from what was approved"


# The attention reasons a version (its registration or its code) is behind: the version board's.
VERSION_REASONS = (
    AttentionReason.VERSION_MISSING,
    AttentionReason.VERSION_UNREGISTERED,
    AttentionReason.FINGERPRINT_MISMATCH,
    AttentionReason.INPUT_MISMATCH,
)


class ErrorKind(models.TextChoices):
    """Whether the last model error can heal by waiting (429, 5xx, 529, timeouts) or not."""

    TRANSIENT = "transient"
    PERMANENT = "permanent"


class AgentVersion(models.Model):
    """A registration: agent `agent` version `version`, with `fingerprint`, may run.

    Unregistering keeps the row (history and who did it); re-registering reactivates it.
    """

    agent = models.CharField(max_length=100)
    version = models.CharField(max_length=50)
    fingerprint = models.CharField(max_length=64)
    # The fingerprint's parts as registered, so a later code change can be shown as a diff.
    spec = models.JSONField(default=dict)
    registered_at = models.DateTimeField()
    registered_by = models.CharField(max_length=150)
    unregistered_at = models.DateTimeField(null=True, blank=True)
    unregistered_by = models.CharField(max_length=150, blank=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["agent", "version"], name="one_registration_per_version"
            )
        ]
        permissions: ClassVar = [
            (Permission.MANAGE_VERSIONS.codename, "Can register and unregister versions")
        ]

    def __str__(self) -> str:
        return f"{self.agent} {self.version}"

    @property
    def is_registered(self) -> bool:
        return self.unregistered_at is None


class Session(models.Model):
    """A conversation: each submitted message starts a run that continues its transcript."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.CharField(max_length=100)
    title = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField()

    def __str__(self) -> str:
        return self.title or str(self.id)


class OnRow(models.Transform):
    """A column's value as its row has it, which no index serves: `status__on_row`.

    A run found by its key checks its status on the row the key found. PostgreSQL's statistics
    of the runs may be from an hour when no run was running or queued (a quiet night over a
    large table, which autovacuum analyzes again only once a tenth of it changed). It then takes
    `status = 'running'` for one row and, for a statement that also names the run's key, walks
    the status index (or the unfinished runs' partial index) through every running run to the
    one it wants: 2,539 pages and 2.5 ms for one lease renewal at 5,000 running runs, 5 pages by
    the key. Every claim, record, heartbeat and move of a run is such a statement, and an
    answer to an interaction walks the pending ones (tests/runtime/test_run_by_key.py). The
    store's SQL writes it as `STATUS_ON_ROW`.
    """

    lookup_name = "on_row"
    template = "(%(expressions)s || '')"

    @classmethod
    def sql(cls, column: str) -> str:
        return cls.template % {"expressions": column}


class KeyedQuerySet(models.QuerySet[M]):
    """Of a table whose status an index serves (runs, interactions)."""

    def by_key(self, pk: Any, **columns: Any) -> Self:
        """The row `pk` if its columns have these values (`status`, `status__in`, …), found by
        its key: its status is checked on the row (OnRow says why)."""
        return self.filter(pk=pk, **{_on_row(name): value for name, value in columns.items()})


def _on_row(lookup: str) -> str:
    """`status` → `status__on_row`, `status__in` → `status__on_row__in`; others as they are."""
    field, sep, rest = lookup.partition("__")
    return f"status__on_row{sep}{rest}" if field == "status" else lookup


class RunQuerySet(KeyedQuerySet["Run"]):
    pass


class InteractionQuerySet(KeyedQuerySet["Interaction"]):
    pass


class Run(models.Model):
    """One agent turn loop, from a submitted message to a final answer."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(Session, on_delete=models.PROTECT, related_name="runs")
    # Position in the session: a run may only be retried while no later run advanced it.
    seq = models.PositiveIntegerField()
    agent = models.CharField(max_length=100)
    version = models.CharField(max_length=50)
    fingerprint = models.CharField(max_length=64)
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.QUEUED)
    input = models.TextField()
    output = models.TextField(blank=True)
    error = models.TextField(blank=True)
    # The messages this run added to the session transcript, written at completion.
    transcript = models.JSONField(default=list)
    attention_reason = models.CharField(max_length=30, choices=AttentionReason.choices, blank=True)
    attention_detail = models.JSONField(default=dict, blank=True)
    blocked_operation = models.CharField(max_length=200, blank=True)
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Incremented on every claim (and on cancel): a write carrying an older fence is refused.
    fence = models.PositiveBigIntegerField(default=0)
    steps = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    # The last model error's kind, so the console can say whether waiting can help.
    error_kind = models.CharField(max_length=20, choices=ErrorKind.choices, blank=True)
    # Claims that ended without the run leaving `running` cleanly (a dead worker, an unexpected
    # exception); reset when a claim ends cleanly. Past the limit the run is a crash loop.
    crashed_claims = models.PositiveIntegerField(default=0)
    last_crash = models.TextField(blank=True)
    # Pause: who asked a running run to pause (it pauses at its next durable boundary) and why;
    # while paused, the status resume returns it to.
    pause_requested_by = models.CharField(max_length=150, blank=True)
    pause_reason = models.TextField(blank=True)
    paused_from = models.CharField(max_length=20, choices=RunStatus.choices, blank=True)
    # Fork: the run this one was forked from and the operation it forked at. `fork_context`
    # holds what the engine needs: {"seed": the messages the parent's first request was sent,
    # "messages": {operation key: edited messages of that model request}}.
    parent = models.ForeignKey(
        "self", on_delete=models.PROTECT, null=True, blank=True, related_name="forks"
    )
    fork_point = models.CharField(max_length=200, blank=True)
    fork_context = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()
    # When the run last moved: submitted, claimed, or out of `running`. Renewing the lease (the
    # heartbeat) leaves it, so that the renewal touches no indexed column.
    updated_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    # When the sweep last handed the run to the workers: it hands a run over at most once per
    # lease period, and again after one if no worker took it (the message was lost).
    sent_at = models.DateTimeField(null=True, blank=True)

    objects = RunQuerySet.as_manager()

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["session", "seq"], name="one_run_per_session_position"),
            # S5: a session runs one turn at a time; submit and retry race on this, not on reads.
            models.UniqueConstraint(
                fields=["session"],
                condition=Q(
                    status__in=[
                        "queued",
                        "running",
                        "waiting",
                        "retry_wait",
                        "needs_attention",
                        "paused",
                    ]
                ),
                name="one_unfinished_run_per_session",
            ),
        ]
        indexes: ClassVar = [
            # Console: runs list filtered by status, newest first; inbox counts by status.
            models.Index(fields=["status", "-created_at"], name="run_status_created"),
            # Console: runs list newest first without a filter.
            models.Index(fields=["-created_at"], name="run_created"),
            # No index holds lease_expires_at: the heartbeat renews it, and an indexed column
            # would make each renewal write an entry into every index of the table (no HOT
            # update on PostgreSQL). The sweep finds the running runs, as many as the
            # workers hold, by run_status_created and checks their leases.
            # Sweep and inbox: retry_wait runs ordered by their due time (then id, the inbox's
            # tie-break, so its first 50 are read off the index).
            models.Index(
                fields=["next_attempt_at", "id"],
                name="run_retry_due",
                condition=Q(status="retry_wait"),
            ),
            # Inbox: blocked runs, longest blocked first.
            models.Index(
                fields=["updated_at", "id"],
                name="run_attention",
                condition=Q(status="needs_attention"),
            ),
            # Version board: the version-blocked runs of each (agent, version), oldest first.
            # Its counts and each group's first runs' ids are read from the index alone, where
            # the blocked runs' index led to every blocked run's row.
            models.Index(
                fields=["agent", "version", "created_at", "attention_reason", "fingerprint", "id"],
                name="run_version_blocked",
                condition=Q(status="needs_attention", attention_reason__in=VERSION_REASONS),
            ),
            # Console filters, version board and unregister checks: runs of an agent version.
            models.Index(fields=["agent", "version", "status"], name="run_agent_version"),
            # Runs list filtered by agent, or by agent and version, newest first (keyset pages).
            models.Index(fields=["agent", "-created_at"], name="run_agent_created"),
            models.Index(
                fields=["agent", "version", "-created_at"], name="run_agent_version_created"
            ),
        ]
        permissions: ClassVar = [
            (Permission.RESPOND.codename, "Can answer approvals and questions"),
            (Permission.RESOLVE.codename, "Can reconcile uncertain operations"),
            (Permission.CONTROL.codename, "Can retry and cancel runs"),
        ]

    def __str__(self) -> str:
        return f"run {self.id} ({self.status})"


class StatusCount(models.Model):
    """How many runs are in each status ("run:<status>") and how many interactions of each kind
    are pending ("pending:<kind>"), so the inbox reads a few rows instead of counting a million.

    Kept by database triggers on the runs and interactions tables (migration 0008), in the
    transaction of every change, whoever writes it: nothing in Python adds to this table. Each
    change inserts its deltas (+1 for the new status, -1 for the old) and readers sum them: an
    insert takes no lock that another worker waits for, where one row per status would queue
    every worker moving a run (and deadlock two that move runs in opposite directions). The
    sweep folds the deltas into one row per key (runtime.store.compact_counts).
    """

    key = models.CharField(max_length=60)
    n = models.BigIntegerField()

    def __str__(self) -> str:
        return f"{self.key} {self.n:+d}"


class OperationKind(models.TextChoices):
    MODEL = "model"
    TOOL = "tool"


class OperationStatus(models.TextChoices):
    STARTED = "started"  # intent committed, outcome not (yet) written
    COMPLETED = "completed"
    FAILED = "failed"  # a model request that raised; tools' errors are completed outcomes
    REJECTED = "rejected"  # an approval was refused; the reason is the result
    # An operator verified in the external system that the call did not happen and chose to
    # run it once more: the engine runs it again with the same operation id, whatever its policy.
    NOT_RUN = "not_run"


class Operation(models.Model):
    """One model request or tool call inside a run: its intent, then its outcome."""

    # No index of its own: the unique (run, key) constraint's index serves every run lookup.
    run = models.ForeignKey(
        Run, on_delete=models.PROTECT, related_name="operations", db_index=False
    )
    key = models.CharField(max_length=200)
    kind = models.CharField(max_length=10, choices=OperationKind.choices)
    name = models.CharField(max_length=100)
    policy = models.CharField(max_length=20, blank=True)
    status = models.CharField(max_length=20, choices=OperationStatus.choices)
    input = models.JSONField()
    input_hash = models.CharField(max_length=64)
    result = models.JSONField(null=True, blank=True)
    is_error = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    usage = models.JSONField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=1)
    intent_at = models.DateTimeField()
    outcome_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["run", "key"], name="one_operation_per_key")
        ]

    def __str__(self) -> str:
        return f"{self.run_id}:{self.key}"

    @property
    def operation_id(self) -> str:
        """The external idempotency key: stable across crashes and retries."""
        return keys.operation_id(self.run_id, self.key)


class InteractionKind(models.TextChoices):
    TOOL_APPROVAL = "tool_approval"
    QUESTION = "question"


class InteractionStatus(models.TextChoices):
    PENDING = "pending"
    ANSWERED = "answered"
    CANCELLED = "cancelled"


class Interaction(models.Model):
    """A pending question to a person: approve a tool call, or answer the agent."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No index of its own: the unique (run, operation_key) constraint's index serves it.
    run = models.ForeignKey(
        Run, on_delete=models.PROTECT, related_name="interactions", db_index=False
    )
    operation_key = models.CharField(max_length=200)
    kind = models.CharField(max_length=20, choices=InteractionKind.choices)
    tool_name = models.CharField(max_length=100)
    # Approval: {"arguments": …}; question: {"question": …}. Agent-controlled: always escaped.
    payload = models.JSONField()
    status = models.CharField(
        max_length=20, choices=InteractionStatus.choices, default=InteractionStatus.PENDING
    )
    response = models.JSONField(null=True, blank=True)
    responded_by = models.CharField(max_length=150, blank=True)
    responded_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()

    objects = InteractionQuerySet.as_manager()

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["run"],
                condition=Q(status="pending"),
                name="one_pending_interaction_per_run",
            ),
            models.UniqueConstraint(
                fields=["run", "operation_key"], name="one_interaction_per_operation"
            ),
        ]
        indexes: ClassVar = [
            # Inbox: pending interactions, oldest first.
            models.Index(
                fields=["created_at"], name="interaction_pending", condition=Q(status="pending")
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.tool_name} ({self.status})"


Run._meta.get_field("status").register_lookup(OnRow)
Interaction._meta.get_field("status").register_lookup(OnRow)


# The events people wrote, not the runtime: the audit log's, and the condition of the index
# that serves it (event_actor). A query repeats it to read that index: SQLite uses a partial
# index only for a query whose WHERE repeats the index's.
BY_PEOPLE = ~Q(actor=RUNTIME)


class EventQuerySet(models.QuerySet["Event"]):
    def by_people(self) -> EventQuerySet:
        return self.filter(BY_PEOPLE)

    def update(self, **kwargs: Any) -> int:
        raise TypeError("events are append-only: they cannot be updated")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise TypeError("events are append-only: they cannot be deleted")


class Event(models.Model):
    """The append-only history of a run: the timeline, the audit trail and the live outbox."""

    # No index of its own: event_run_timeline (run, id) serves every run lookup.
    run = models.ForeignKey(
        Run,
        on_delete=models.PROTECT,
        related_name="events",
        null=True,
        blank=True,
        db_index=False,
    )
    kind = models.CharField(
        max_length=50
    )  # an EventKind (no choices: a new kind needs no migration)
    # "runtime" (RUNTIME) for the engine, otherwise the username of the person who acted.
    actor = models.CharField(max_length=150)
    operation_key = models.CharField(max_length=200, blank=True)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()

    objects = EventQuerySet.as_manager()

    class Meta:
        indexes: ClassVar = [
            # Run detail timeline; live catch-up after a reconnect (events after id N).
            models.Index(fields=["run", "id"], name="event_run_timeline"),
            # Audit log: operator actions, newest first, filterable by actor. The runtime's
            # events, nearly all of them, are not in it: the audit log leaves them out, and a
            # record then writes one index fewer (a SQLite run took about 0.95 of the time).
            models.Index(fields=["actor", "-id"], name="event_actor", condition=BY_PEOPLE),
        ]

    def __str__(self) -> str:
        return f"{self.kind} by {self.actor}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None and not self._state.adding:
            raise TypeError("events are append-only: they cannot be updated")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise TypeError("events are append-only: they cannot be deleted")


# --- approval policy -----------------------------------------------------------------------------


class ExpiryOutcome(models.TextChoices):
    REJECT = "reject", "Reject, with the stated reason"
    ESCALATE = "escalate", "Escalate to the escalation group"
    KEEP_WAITING = "keep_waiting", "Keep waiting, flagged"


class ApprovalRule(models.Model):
    """A rule that adds requirements to a tool call's approval: data, managed in the admin.

    It applies to calls of `tool` by `agent` whose arguments satisfy `condition` (JSON Logic
    over the validated arguments; {} matches every call). A tool's `requires_approval` in code
    stays the floor: a matching rule makes a call need approval, and sets who may give it.
    Every save validates the rule against the tool's input schema (runtime.policy.check_rule,
    connected to pre_save by the app), so no path stores a rule the engine could not evaluate.
    """

    name = models.CharField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    agent = models.CharField(max_length=100)
    tool = models.CharField(max_length=100)
    condition = models.JSONField(default=dict, blank=True)
    # None: anyone with the permission to respond may approve.
    approver_group = models.ForeignKey(
        "auth.Group", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    quorum = models.PositiveSmallIntegerField(default=1)
    four_eyes = models.BooleanField(
        default=False,
        help_text="Who started the run or edited the arguments may not approve",
    )
    high_risk = models.BooleanField(
        default=False, help_text="Approving asks for the password again (a recent sign-in)"
    )
    expires_after = models.DurationField(null=True, blank=True)
    on_expiry = models.CharField(
        max_length=20, choices=ExpiryOutcome.choices, default=ExpiryOutcome.REJECT
    )
    expiry_reason = models.CharField(max_length=500, blank=True)
    escalate_after = models.DurationField(null=True, blank=True)
    escalation_group = models.ForeignKey(
        "auth.Group", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # Of several matching rules, the lowest priority (then the lowest id) applies.
    priority = models.PositiveIntegerField(default=100)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes: ClassVar = [
            # The engine: the enabled rules of one agent's tool, before each call that may need one.
            models.Index(fields=["agent", "tool", "priority"], name="approval_rule_match"),
        ]
        permissions: ClassVar = [
            (
                Permission.EDIT_ARGUMENTS.codename,
                "Can edit a tool call's arguments before approving",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class WorkItem(models.Model):
    """An interaction as work for people: the policy it is under, its timers, who is on it,
    the edited arguments, and when it was decided."""

    interaction = models.OneToOneField(
        Interaction, on_delete=models.PROTECT, primary_key=True, related_name="work"
    )
    rule = models.ForeignKey(
        ApprovalRule, on_delete=models.SET_NULL, null=True, blank=True, related_name="items"
    )
    # The policy as it was when the call asked (a later edit of the rule does not change it).
    policy = models.JSONField(default=dict)
    expires_at = models.DateTimeField(null=True, blank=True)
    escalate_at = models.DateTimeField(null=True, blank=True)
    escalated_at = models.DateTimeField(null=True, blank=True)
    expired_at = models.DateTimeField(null=True, blank=True)
    flagged = models.BooleanField(default=False)
    claimed_by = models.CharField(max_length=150, blank=True)
    claim_expires_at = models.DateTimeField(null=True, blank=True)
    assigned_to = models.CharField(max_length=150, blank=True)
    # The arguments as an approver edited them (None: as the model proposed them).
    arguments = models.JSONField(null=True, blank=True)
    edited_by = models.CharField(max_length=150, blank=True)
    edited_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_seconds = models.FloatField(null=True, blank=True)

    class Meta:
        indexes: ClassVar = [
            # Time to decision per rule (the console's rule summary, the metrics).
            models.Index(fields=["rule", "decided_at"], name="work_item_rule_decided"),
        ]

    def __str__(self) -> str:
        return f"work on {self.interaction_id}"


class ApprovalVote(models.Model):
    """One approver's approval of one version of the arguments; a quorum counts distinct
    approvers of the current arguments."""

    interaction = models.ForeignKey(
        Interaction, on_delete=models.PROTECT, related_name="votes", db_index=False
    )
    approver = models.CharField(max_length=150)
    arguments_sha256 = models.CharField(max_length=64)
    created_at = models.DateTimeField()

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["interaction", "arguments_sha256", "approver"], name="one_vote_per_approver"
            )
        ]

    def __str__(self) -> str:
        return f"{self.approver} approved {self.interaction_id}"


class TimerKind(models.TextChoices):
    EXPIRING = "expiring", "Expiry warning"
    ESCALATE = "escalate", "Escalation"
    EXPIRE = "expire", "Expiry"


class ApprovalTimer(models.Model):
    """A database timer of a work item, fired once by the workers' sweep."""

    interaction = models.ForeignKey(
        Interaction, on_delete=models.PROTECT, related_name="timers", db_index=False
    )
    kind = models.CharField(max_length=20, choices=TimerKind.choices)
    due_at = models.DateTimeField()
    fired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["interaction", "kind"], name="one_timer_per_kind")
        ]
        indexes: ClassVar = [
            # The sweep: unfired timers by due time.
            models.Index(
                fields=["due_at"], name="approval_timer_due", condition=Q(fired_at__isnull=True)
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} of {self.interaction_id} at {self.due_at}"


class ApprovalReceipt(models.Model):
    """What was approved, as a digest over its parts, re-checked before the call runs."""

    interaction = models.OneToOneField(
        Interaction, on_delete=models.PROTECT, primary_key=True, related_name="receipt"
    )
    digest = models.CharField(max_length=64)
    # tool, arguments, agent, version, fingerprint, rule, approvers: what the digest covers.
    contents = models.JSONField()
    created_at = models.DateTimeField()
    # The first intent of the approved call; a receipt authorizes that one operation only.
    used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"receipt {self.digest[:12]}"


class BulkAction(models.TextChoices):
    RETRY = "retry"
    CANCEL = "cancel"
    PAUSE = "pause"
    RESUME = "resume"


class BulkJobStatus(models.TextChoices):
    RUNNING = "running"  # items left; workers take them in batches
    STOPPED = "stopped"  # an operator stopped it: its pending items are left untouched
    COMPLETED = "completed"  # every item was touched or skipped


# from -> the statuses a guarded UPDATE may move it to.
BULK_JOB_TRANSITIONS: dict[str, frozenset[str]] = {
    BulkJobStatus.RUNNING: frozenset({BulkJobStatus.STOPPED, BulkJobStatus.COMPLETED}),
    BulkJobStatus.STOPPED: frozenset(),
    BulkJobStatus.COMPLETED: frozenset(),
}


class BulkJob(models.Model):
    """One operator action (retry, cancel, pause, resume) over every run a filter matched.

    The matching runs are fixed when the job is submitted (one item each); workers take the
    pending items in batches, each item's verb and its mark in one transaction.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Submitting the same key again returns this job: a double submit starts nothing twice.
    key = models.CharField(max_length=100, unique=True)
    action = models.CharField(max_length=20, choices=BulkAction.choices)
    filters = models.JSONField(default=dict)
    actor = models.CharField(max_length=150)
    reason = models.TextField(blank=True)
    status = models.CharField(
        max_length=20, choices=BulkJobStatus.choices, default=BulkJobStatus.RUNNING
    )
    total = models.PositiveIntegerField(default=0)
    touched = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    stopped_by = models.CharField(max_length=150, blank=True)
    # The worker taking its items now; an expired lease lets the sweep hand it to another.
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes: ClassVar = [
            # Runs list: the latest jobs; the sweep: running jobs whose lease expired.
            models.Index(fields=["status", "-created_at"], name="bulk_job_status"),
        ]

    def __str__(self) -> str:
        return f"bulk {self.action} {self.id} ({self.status})"

    @property
    def done(self) -> int:
        return self.touched + self.skipped


class BulkItemStatus(models.TextChoices):
    PENDING = "pending"
    TOUCHED = "touched"  # the verb was applied
    SKIPPED = "skipped"  # the verb refused it when its turn came; `detail` says why


class BulkJobItem(models.Model):
    """One run of a bulk job, marked in the transaction that applied the verb to it."""

    job = models.ForeignKey(BulkJob, on_delete=models.PROTECT, related_name="items")
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="bulk_items")
    status = models.CharField(
        max_length=20, choices=BulkItemStatus.choices, default=BulkItemStatus.PENDING
    )
    detail = models.TextField(blank=True)
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["job", "run"], name="one_bulk_item_per_run"),
        ]
        indexes: ClassVar = [
            # Workers: a job's pending items, in order; progress counts by status.
            models.Index(fields=["job", "status", "id"], name="bulk_item_pending"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id}:{self.run_id} ({self.status})"
