"""The lease's renewal, written by every record, touches no indexed column.

On PostgreSQL an UPDATE that changes no indexed column is a HOT update: the new row version
goes on the same page and no index gets an entry. The renewal set `lease_expires_at` (indexed
for the sweep) and `updated_at` (in the inbox's partial index), so every record of a run wrote
an entry into each of the run table's indexes. The renewal now sets the lease alone, and its
index goes: the sweep finds the running runs, as many as the workers hold, through
run_status_created. A fill factor of 80 leaves each page of runs room for its rows' renewals.
"""

from typing import Any

from django.db import migrations


def _fill_factor(percent: int | None) -> Any:
    def alter(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return  # SQLite has no fill factor, and updates its indexes by column anyway
        table = schema_editor.quote_name(apps.get_model("agentops", "Run")._meta.db_table)
        setting = f"SET (fillfactor = {percent})" if percent else "RESET (fillfactor)"
        schema_editor.execute(f"ALTER TABLE {table} {setting}")

    return alter


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0009_version_board_index"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="run", name="run_lease_expiry"),
        migrations.RunPython(_fill_factor(80), _fill_factor(None)),
    ]
