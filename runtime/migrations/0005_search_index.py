"""Trigram indexes for the console's text search on PostgreSQL (nothing on SQLite).

Each index is on exactly the expression `agentops.selectors._PG_SEARCH` filters with ILIKE, so
a search for a customer's name or a receipt id reads the index instead of every row. pg_trgm
ships with PostgreSQL (contrib); creating the extension needs the CREATE privilege on the
database (a superuser, or the database owner on PostgreSQL 13 and later).
"""

from typing import Any

from django.db import migrations

INDEXES = {
    "run_search_trgm": "agentops_run USING gin ((input || ' ' || output) gin_trgm_ops)",
    "session_title_trgm": "agentops_session USING gin (title gin_trgm_ops)",
    "operation_search_trgm": (
        "agentops_operation USING gin "
        "((input::text || ' ' || coalesce(result::text, '')) gin_trgm_ops) WHERE kind = 'tool'"
    ),
    "interaction_payload_trgm": "agentops_interaction USING gin ((payload::text) gin_trgm_ops)",
}


def create(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    for name, definition in INDEXES.items():
        schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {definition}")


def drop(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in INDEXES:
        schema_editor.execute(f"DROP INDEX IF EXISTS {name}")


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0004_runtime_edges"),
    ]

    operations = [migrations.RunPython(create, drop)]
