"""The database cache table that counts API requests per token, when Redis is not configured.

`migrate` does not create cache tables by itself; this makes a fresh database complete. The
table is made whatever the cache is today, so that a deployment that drops Redis later (or a
process started without REDIS_URL, as the rate-limit tests start one) finds it.
"""

from __future__ import annotations

from typing import Any

from django.core.management.commands.createcachetable import Command
from django.db import migrations

TABLE = "agentops_api_cache"  # the LOCATION of the api cache in settings, without Redis


def create_cache_table(apps: Any, schema_editor: Any) -> None:
    # createcachetable's own table builder: the command alone makes only the configured caches.
    command = Command()
    command.verbosity = 0
    command.create_table(schema_editor.connection.alias, TABLE, dry_run=False)


class Migration(migrations.Migration):
    dependencies = [("api", "0001_initial")]

    operations = [migrations.RunPython(create_cache_table, migrations.RunPython.noop)]
