"""The tool calls' text for the console's search, folded from the event log (search_index.py).

On PostgreSQL the table gets the trigram index the search reads, and is filled here with every
tool call's text; the fold's cursor then starts a little below the newest event, so that an
event whose transaction was still open while this ran is folded too (folding an event twice
writes the same text). Migration agentops 0012 drops the index this replaces.
"""

from typing import Any

import django.db.models.deletion
from django.db import migrations, models

CURSOR = "search"
# How far below the newest event the fold starts again: more ids than can be drawn by
# transactions open at once.
MARGIN = 1000
TEXT = "input::text || ' ' || coalesce(result::text, '')"


def fill(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(max(id), 0) FROM agentops_event")
        newest = cursor.fetchone()[0]
        cursor.execute(
            "INSERT INTO integrations_toolcalltext (operation_id, text) "
            f"SELECT id, {TEXT} FROM agentops_operation WHERE kind = 'tool'"
        )
    # Built after the rows: over 990,000 calls, 2.8 s for the rows and 9.3 s for the index,
    # where the rows took about 17 s into the index built first.
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    schema_editor.execute(
        "CREATE INDEX tool_call_text_trgm ON integrations_toolcalltext USING gin "
        "(text gin_trgm_ops)"
    )
    if newest:  # (with no event yet, the fold's first pass starts before the first one)
        cursors = apps.get_model("integrations", "OutboxCursor")
        position = max(0, newest - MARGIN)
        cursors.objects.update_or_create(name=CURSOR, defaults={"position": position})


def empty(apps: Any, schema_editor: Any) -> None:
    apps.get_model("integrations", "OutboxCursor").objects.filter(name=CURSOR).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0011_audit_index_leaves_out_the_runtime"),
        ("integrations", "0002_rule_routes_slack_bot"),
    ]

    operations = [
        migrations.CreateModel(
            name="ToolCallText",
            fields=[
                (
                    "operation",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="+",
                        serialize=False,
                        to="agentops.operation",
                    ),
                ),
                ("text", models.TextField()),
            ],
        ),
        migrations.RunPython(fill, empty),
    ]
