"""The tool calls' trigram index leaves the operations table.

Each record wrote an entry into it in its own statement, and each outcome, by changing an
indexed expression, rewrote all of the operation's index entries (no HOT update on PostgreSQL):
about a tenth of a PostgreSQL run's time. The console's search now reads a table folded from
the event log (integrations.ToolCallText, its migration 0003) and the calls not folded yet.

Dropped CONCURRENTLY so that the workers' records go on meanwhile; put back the same way.
"""

from typing import Any

from django.db import migrations

NAME = "operation_search_trgm"
DEFINITION = (
    "agentops_operation USING gin "
    "((input::text || ' ' || coalesce(result::text, '')) gin_trgm_ops) WHERE kind = 'tool'"
)


def drop(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {NAME}")


def create(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {NAME} ON {DEFINITION}")


class Migration(migrations.Migration):
    # DROP INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ("agentops", "0011_audit_index_leaves_out_the_runtime"),
    ]

    operations = [migrations.RunPython(drop, create)]
