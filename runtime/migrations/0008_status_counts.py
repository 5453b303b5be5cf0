"""Counts by status kept without scanning, when the sweep last sent a run, list indexes.

- `agentops_statuscount`: runs per status and pending interactions per kind, kept by triggers
  on the runs and interactions tables in the transaction of every change (an INSERT, a status
  UPDATE, a DELETE), on both databases, then backfilled from the tables as they are. On
  PostgreSQL a change inserts its deltas, which take no lock another writer waits for; readers
  sum them, and the sweep folds them into one row per key. SQLite keeps one row per key.
- `agentops_run.sent_at`: the sweep hands a run over at most once per lease period.
- Indexes for the runs list filtered by agent, and by agent and version, newest first, and for
  the inbox's queues of blocked runs and retry waits (their first 50 read off the index).

On SQLite, a later migration that rebuilds agentops_run or agentops_interaction (Django remakes
a table to alter most columns) drops their triggers with the old table: it must create them
again (the statements are here, SQLITE), as tests/runtime/test_status_counts.py would show.
"""

from typing import Any

from django.db import migrations, models

COUNT = "agentops_statuscount"
# The keys a row counts under, before and after the change.
RUN_OLD, RUN_NEW = "'run:' || OLD.status", "'run:' || NEW.status"
PENDING_OLD, PENDING_NEW = "'pending:' || OLD.kind", "'pending:' || NEW.kind"


def _add(key: str, delta: int) -> str:
    return f"INSERT INTO {COUNT} (key, n) VALUES ({key}, {delta});"


POSTGRES = [
    f"""
CREATE FUNCTION agentops_count_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN {_add(RUN_OLD, -1)} END IF;
    IF TG_OP <> 'DELETE' THEN {_add(RUN_NEW, 1)} END IF;
    RETURN NULL;
END $$""",
    f"""
CREATE FUNCTION agentops_count_pending() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.status = 'pending' THEN {_add(PENDING_OLD, -1)} END IF;
    IF TG_OP <> 'DELETE' AND NEW.status = 'pending' THEN {_add(PENDING_NEW, 1)} END IF;
    RETURN NULL;
END $$""",
    # The WHEN clause keeps the hot path's own updates (a lease renewal) free of the trigger.
    "CREATE TRIGGER agentops_count_runs AFTER INSERT OR DELETE ON agentops_run "
    "FOR EACH ROW EXECUTE FUNCTION agentops_count_runs()",
    "CREATE TRIGGER agentops_count_runs_moved AFTER UPDATE OF status ON agentops_run "
    "FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) "
    "EXECUTE FUNCTION agentops_count_runs()",
    "CREATE TRIGGER agentops_count_pending AFTER INSERT OR DELETE ON agentops_interaction "
    "FOR EACH ROW EXECUTE FUNCTION agentops_count_pending()",
    "CREATE TRIGGER agentops_count_pending_moved AFTER UPDATE OF status ON agentops_interaction "
    "FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) "
    "EXECUTE FUNCTION agentops_count_pending()",
]
POSTGRES_DROP = [
    "DROP TRIGGER IF EXISTS agentops_count_runs ON agentops_run",
    "DROP TRIGGER IF EXISTS agentops_count_runs_moved ON agentops_run",
    "DROP TRIGGER IF EXISTS agentops_count_pending ON agentops_interaction",
    "DROP TRIGGER IF EXISTS agentops_count_pending_moved ON agentops_interaction",
    "DROP FUNCTION IF EXISTS agentops_count_runs()",
    "DROP FUNCTION IF EXISTS agentops_count_pending()",
]


# SQLite has one writer at a time: nothing to queue on, so one row per key, kept in place. A
# decrement updates the row its run was counted in; it inserts nothing, so that Django's flush
# of a test database, deleting this table's rows before or after the runs', leaves none behind.
def _sqlite_add(key: str) -> str:
    return (
        f"INSERT INTO {COUNT} (key, n) VALUES ({key}, 1) ON CONFLICT (key) DO UPDATE SET n = n + 1;"
    )


def _sqlite_remove(key: str) -> str:
    return f"UPDATE {COUNT} SET n = n - 1 WHERE key = {key};"


SQLITE = [
    f"CREATE UNIQUE INDEX statuscount_key ON {COUNT} (key)",
    "CREATE TRIGGER agentops_count_runs_added AFTER INSERT ON agentops_run "
    f"BEGIN {_sqlite_add(RUN_NEW)} END",
    "CREATE TRIGGER agentops_count_runs_moved AFTER UPDATE OF status ON agentops_run "
    "WHEN OLD.status IS NOT NEW.status "
    f"BEGIN {_sqlite_remove(RUN_OLD)} {_sqlite_add(RUN_NEW)} END",
    "CREATE TRIGGER agentops_count_runs_deleted AFTER DELETE ON agentops_run "
    f"BEGIN {_sqlite_remove(RUN_OLD)} END",
    "CREATE TRIGGER agentops_count_pending_added AFTER INSERT ON agentops_interaction "
    f"WHEN NEW.status = 'pending' BEGIN {_sqlite_add(PENDING_NEW)} END",
    "CREATE TRIGGER agentops_count_pending_left AFTER UPDATE OF status ON agentops_interaction "
    "WHEN OLD.status = 'pending' AND NEW.status IS NOT 'pending' "
    f"BEGIN {_sqlite_remove(PENDING_OLD)} END",
    "CREATE TRIGGER agentops_count_pending_back AFTER UPDATE OF status ON agentops_interaction "
    "WHEN NEW.status = 'pending' AND OLD.status IS NOT 'pending' "
    f"BEGIN {_sqlite_add(PENDING_NEW)} END",
    "CREATE TRIGGER agentops_count_pending_deleted AFTER DELETE ON agentops_interaction "
    f"WHEN OLD.status = 'pending' BEGIN {_sqlite_remove(PENDING_OLD)} END",
]
SQLITE_DROP = [
    f"DROP TRIGGER IF EXISTS {name}"
    for name in (
        "agentops_count_runs_added",
        "agentops_count_runs_moved",
        "agentops_count_runs_deleted",
        "agentops_count_pending_added",
        "agentops_count_pending_left",
        "agentops_count_pending_back",
        "agentops_count_pending_deleted",
    )
] + ["DROP INDEX IF EXISTS statuscount_key"]

# The counts as the tables hold them now (the same statements on both databases).
BACKFILL = [
    f"DELETE FROM {COUNT}",
    f"INSERT INTO {COUNT} (key, n) "
    "SELECT 'run:' || status, count(*) FROM agentops_run GROUP BY status",
    f"INSERT INTO {COUNT} (key, n) "
    "SELECT 'pending:' || kind, count(*) FROM agentops_interaction "
    "WHERE status = 'pending' GROUP BY kind",
]


def create(apps: Any, schema_editor: Any) -> None:
    statements = POSTGRES if schema_editor.connection.vendor == "postgresql" else SQLITE
    for statement in [*statements, *BACKFILL]:
        schema_editor.execute(statement)


def drop(apps: Any, schema_editor: Any) -> None:
    vendor = schema_editor.connection.vendor
    for statement in POSTGRES_DROP if vendor == "postgresql" else SQLITE_DROP:
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0007_approval_policy"),
    ]

    operations = [
        migrations.CreateModel(
            name="StatusCount",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("key", models.CharField(max_length=60)),
                ("n", models.BigIntegerField()),
            ],
        ),
        migrations.AddField(
            model_name="run",
            name="sent_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["agent", "-created_at"], name="run_agent_created"),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                fields=["agent", "version", "-created_at"], name="run_agent_version_created"
            ),
        ),
        migrations.RemoveIndex(model_name="run", name="run_retry_due"),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("status", "retry_wait")),
                fields=["next_attempt_at", "id"],
                name="run_retry_due",
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("status", "needs_attention")),
                fields=["updated_at", "id"],
                name="run_attention",
            ),
        ),
        migrations.RunPython(create, drop),
    ]
