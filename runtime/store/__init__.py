"""The store: every write to the runtime's tables — runs, operations, interactions, sessions,
events and agent versions — goes through this package, and nothing else writes them
(tests/runtime/test_store_owns_writes.py checks it).

- worker.py: the owning worker's writes: the claim, the intent and outcome of every call, the
  run's move out of `running`, a question to a person, the heartbeat. Fenced and on the hot path.
- verbs.py: the writes of the verbs people use (submit, respond, resolve, retry, cancel): their
  guarded updates, and a new session with its first run (one statement on PostgreSQL, as a
  worker's record); versions.py: the registry's.
- surgery.py: the writes of pause and resume, forks and bulk jobs.
- approvals.py: the writes of the approval policy: work items and their timers, votes,
  receipts, edits, claims.
- events.py: the append-only event log, published after commit.
- reads.py: the sweep's and recovery's queries, and the counts by status the triggers keep.
- transitions.py: every guarded move of a run is checked against RUN_TRANSITIONS.
- dialect.py, postgres.py, sqlite.py: what differs between the databases, one place each;
  sql.py: what they share, written as SQL once (e.g. the runnable rule).
"""

from __future__ import annotations

from runtime.models import RUNTIME
from runtime.store.approvals import (
    assign_item,
    claim_item,
    due_timers,
    edit_arguments,
    expire_rejecting,
    fire_timer,
    mark_decided,
    mark_escalated,
    mark_expired,
    release_item,
    request_approval,
    use_receipt,
    vote,
    write_receipt,
)
from runtime.store.dialect import connection, dialect_of
from runtime.store.events import event
from runtime.store.reads import (
    Counts,
    committed_through,
    compact_counts,
    counts,
    due_run_ids,
    intents_since_a_person_acted,
    last_word_is_outcome,
    settled_events,
)
from runtime.store.verbs import (
    answer_interaction,
    close_interactions,
    create_run,
    fresh_attempts,
    mark_not_run,
    move_run,
    settle_operation,
    start_session,
)
from runtime.store.versions import add_version, reactivate_version, retire_version
from runtime.store.worker import (
    claim,
    expire_lease,
    lease_seconds,
    record,
    renew,
    request_interaction,
    still_running,
    transition,
    write_intent,
    write_outcome,
)


def record_statements() -> dict[str, str]:
    """The statements of one record (fence, operation, event) on the default database, as the
    store sends them: for benchmarks that measure the records alone, without the runtime."""
    return dialect_of(connection()).record_statements()


__all__ = [
    "RUNTIME",
    "Counts",
    "add_version",
    "answer_interaction",
    "assign_item",
    "claim",
    "claim_item",
    "close_interactions",
    "committed_through",
    "compact_counts",
    "counts",
    "create_run",
    "due_run_ids",
    "due_timers",
    "edit_arguments",
    "event",
    "expire_lease",
    "expire_rejecting",
    "fire_timer",
    "fresh_attempts",
    "intents_since_a_person_acted",
    "last_word_is_outcome",
    "lease_seconds",
    "mark_decided",
    "mark_escalated",
    "mark_expired",
    "mark_not_run",
    "move_run",
    "reactivate_version",
    "record",
    "record_statements",
    "release_item",
    "renew",
    "request_approval",
    "request_interaction",
    "retire_version",
    "settle_operation",
    "settled_events",
    "start_session",
    "still_running",
    "transition",
    "use_receipt",
    "vote",
    "write_intent",
    "write_outcome",
    "write_receipt",
]
