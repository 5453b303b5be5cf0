"""Bulk SQL seeding of PostgreSQL for the benchmarks at scale (bench.archive, bench.console).

The rows are made by INSERT ... SELECT over `generate_series(%(first)s, %(last)s) g`, with the
parameters of `params`. The run numbered g derives every id: its session md5('s' || g), itself
md5('r' || g), its approval md5('a' || g); `uuid_of` gives the same ids in Python. Each
benchmark writes the statements of its own data from these parts, the values of a column as SQL
expressions of g.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

SERIES = "generate_series(%(first)s, %(last)s) g"
SESSION_ID = "md5('s' || g)::uuid"
RUN_ID = "md5('r' || g)::uuid"

INSERT_OPERATION = (
    "INSERT INTO agentops_operation (run_id, key, kind, name, policy, status, input, "
    "  input_hash, result, is_error, error, usage, attempts, intent_at, outcome_at) "
)
INSERT_EVENT = "INSERT INTO agentops_event (run_id, kind, actor, operation_key, data, created_at) "

# Every other column of a run as the seed writes it unless a benchmark says otherwise: a run of
# the bench agent's version 1 that answered "It shipped.", with no error, lease, pause or fork.
RUN_DEFAULTS = {
    "id": RUN_ID,
    "session_id": SESSION_ID,
    "seq": "1",
    "agent": "'bench'",
    "version": "'1'",
    "fingerprint": "%(fingerprint)s",
    "input": "'Where is order A-' || g || '?'",
    "output": "'It shipped.'",
    "error": "''",
    "transcript": "'[]'::jsonb",
    "attention_reason": "''",
    "attention_detail": "'{}'::jsonb",
    "blocked_operation": "''",
    "lease_owner": "''",
    "lease_expires_at": "NULL",
    "fence": "1",
    "steps": "1",
    "next_attempt_at": "NULL",
    "error_kind": "''",
    "crashed_claims": "0",
    "last_crash": "''",
    "pause_requested_by": "''",
    "pause_reason": "''",
    "paused_from": "''",
    "parent_id": "NULL",
    "fork_point": "''",
    "fork_context": "'{}'::jsonb",
    "sent_at": "NULL",
}


def params(first: int, last: int, *, fingerprint: str, events_per_run: int) -> dict[str, Any]:
    """The parameters of the statements: the runs numbered `first` to `last`."""
    return {"first": first, "last": last, "fingerprint": fingerprint, "events": events_per_run}


def uuid_of(prefix: str, number: int) -> str:
    """The id the seed gives row `number` of a kind ('s' session, 'r' run, 'a' approval)."""
    return str(uuid.UUID(hashlib.md5(f"{prefix}{number}".encode()).hexdigest()))


def sessions(created_at: str) -> str:
    """One session per run, titled by its order."""
    return (
        "INSERT INTO agentops_session (id, agent, title, created_at) "
        f"SELECT {SESSION_ID}, 'bench', 'Order A-' || g, {created_at} FROM {SERIES}"
    )


def runs(*, status: str, created_at: str, finished_at: str, **columns: str) -> str:
    """One run per number, in its session, last updated when it was created; `columns` in place
    of RUN_DEFAULTS."""
    values = RUN_DEFAULTS | columns
    values |= {
        "status": status,
        "created_at": created_at,
        "updated_at": created_at,
        "finished_at": finished_at,
    }
    return (
        f"INSERT INTO agentops_run ({', '.join(values)}) "
        f"SELECT {', '.join(values.values())} FROM {SERIES}"
    )


def count(cursor: Any, tables: tuple[str, ...]) -> dict[str, int]:
    """The rows of each table (named without its agentops_ prefix)."""
    counts = {}
    for table in tables:
        cursor.execute(f"SELECT count(*) FROM agentops_{table}")
        counts[table] = cursor.fetchone()[0]
    return counts
