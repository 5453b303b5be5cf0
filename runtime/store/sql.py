"""What both databases share: the tables, the columns the hot path writes, and the rules written
as SQL once. Parameters are named (`%(name)s`); the SQLite dialect turns them into its own style
when it loads."""

from __future__ import annotations

from django.db.models import Model

from runtime.models import (
    AgentVersion,
    ApprovalRule,
    Event,
    Interaction,
    OnRow,
    Operation,
    Run,
    Session,
)

RUN = Run._meta.db_table
OPERATION = Operation._meta.db_table
EVENT = Event._meta.db_table
INTERACTION = Interaction._meta.db_table
AGENT_VERSION = AgentVersion._meta.db_table
APPROVAL_RULE = ApprovalRule._meta.db_table
SESSION = Session._meta.db_table

OPERATION_COLUMNS = (
    "run_id, key, kind, name, policy, status, input, input_hash, result, is_error, error, "
    "usage, attempts, intent_at, outcome_at"
)
EVENT_COLUMNS = "run_id, kind, actor, operation_key, data, created_at"


def columns(model: type[Model]) -> str:
    """Every column of `model`'s table, in the order of its fields (a row's order)."""
    return ", ".join(f'"{field.column}"' for field in model._meta.concrete_fields)


def values(model: type[Model], prefix: str) -> str:
    """A parameter for every column of `model`, named `prefix` + the column, in that order."""
    return ", ".join(f"%({prefix}{field.column})s" for field in model._meta.concrete_fields)


RUN_COLUMNS = columns(Run)
SESSION_COLUMNS = columns(Session)

# The status of a run found by its key, checked on the row the key found (OnRow says why).
STATUS_ON_ROW = OnRow.sql("status")


def runnable(status: str) -> str:
    """The one place the rule is written: a worker may claim a run that is queued, a running
    one whose lease expired (its worker died or stalled), or a retry wait whose timer is due.
    `status`: the column where the runs are looked for, STATUS_ON_ROW for one run by its key."""
    return (
        f"({status} = 'queued' "
        f"OR ({status} = 'running' AND lease_expires_at < %(now)s) "
        f"OR ({status} = 'retry_wait' AND next_attempt_at <= %(now)s))"
    )


RUNNABLE = runnable("status")
# The run named by the claim, if a worker may claim it now.
RUNNABLE_BY_KEY = f"id = %(run)s AND {runnable(STATUS_ON_ROW)}"

# The owning worker's fence: its writes land only while the run is running under its claim
# (`held` is 'running'; a test harness's fence hook may hold the run in another status).
OWNED = f"id = %(run)s AND fence = %(fence)s AND {STATUS_ON_ROW} = %(held)s"

# What a claim that takes over an expired lease records as the last crash (`%s`: the lost owner).
LOST = "the worker %s lost the run: its lease expired (it died or stalled)"

# The fence a record checks: the run, if it is still the claim's. An intent (`pausable`) is
# also the engine's pause point: it lands only if no operator asked the run to pause, which
# saves a read per call. A record reads the run's row (PostgreSQL locks it) and does not write
# it: the heartbeat alone renews the lease (runtime/heartbeat.py). An UPDATE of the run per
# record, even one that changed no row, cost a run 4-5 % of its time on both databases.
FENCE = f"""SELECT id FROM {RUN}
WHERE {OWNED} AND (pause_requested_by = '' OR NOT %(pausable)s)"""

INSERT_EVENT = f"""
INSERT INTO {EVENT} ({EVENT_COLUMNS})
VALUES (%(run)s, %(event)s, %(actor)s, %(key)s, %(data)s, %(now)s)"""

DUE = f"SELECT id FROM {RUN} WHERE {RUNNABLE} ORDER BY updated_at LIMIT %(limit)s"

# The claimed run as the turn reads it (from a row aliased `run`): its columns, then whether it
# has logged any operation and any interaction (a run's first claim has neither, and the turn
# skips reading them), the fingerprint its version is registered with (NULL if it is not
# registered now), and whether its agent has any enabled approval rule (most have none, and the
# turn skips reading them).
CLAIMED_RUN_COLUMNS = f"""{RUN_COLUMNS},
    EXISTS (SELECT 1 FROM {OPERATION} WHERE run_id = %(run)s),
    EXISTS (SELECT 1 FROM {INTERACTION} WHERE run_id = %(run)s),
    (SELECT fingerprint FROM {AGENT_VERSION} AS registration
        WHERE registration.agent = run.agent AND registration.version = run.version
            AND registration.unregistered_at IS NULL),
    EXISTS (SELECT 1 FROM {APPROVAL_RULE} AS approval WHERE approval.agent = run.agent
        AND approval.enabled)"""

# A pause asked for while the run was moving, which has stopped since (runtime.store.surgery's
# settle_pause): what it stopped as, and who asked.
UNSETTLED_PAUSE = f"""SELECT status, fence, pause_requested_by, pause_reason FROM {RUN}
WHERE id = %(run)s AND pause_requested_by <> '' AND status NOT IN ('running', 'paused')"""
