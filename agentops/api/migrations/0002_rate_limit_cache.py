"""The database cache table that counts API requests per token, when Redis is not configured.

`migrate` does not create cache tables by itself; this makes a fresh database complete.
"""

from __future__ import annotations

from typing import Any

from django.core.management import call_command
from django.db import migrations


def create_cache_table(apps: Any, schema_editor: Any) -> None:
    # Creates only the database caches that are missing; a Redis cache needs no table.
    call_command("createcachetable", database=schema_editor.connection.alias, verbosity=0)


class Migration(migrations.Migration):
    dependencies = [("api", "0001_initial")]

    operations = [migrations.RunPython(create_cache_table, migrations.RunPython.noop)]
