"""The "submitters" group: may submit runs through the API (api.submit_run) and read them.

A service account that starts runs is put in it (beside "operators" or "approvers" when it
also acts on them); the console's groups are unchanged.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

GROUP = "submitters"
PERMISSIONS = {"api": ["submit_run"], "agentops": ["view_run"]}


def create_group(apps: Any, schema_editor: Any) -> None:
    # Permissions are normally created after all migrations ran (post_migrate); create this
    # app's now so that the group can hold them on a fresh database.
    from django.contrib.auth.management import create_permissions

    app_config = apps.get_app_config("api")
    app_config.models_module = True
    create_permissions(app_config, apps=apps, verbosity=0)
    app_config.models_module = None

    Permission = apps.get_model("auth", "Permission")
    group, _ = apps.get_model("auth", "Group").objects.get_or_create(name=GROUP)
    for app_label, codenames in PERMISSIONS.items():
        group.permissions.add(
            *Permission.objects.filter(content_type__app_label=app_label, codename__in=codenames)
        )


def remove_group(apps: Any, schema_editor: Any) -> None:
    apps.get_model("auth", "Group").objects.filter(name=GROUP).delete()


class Migration(migrations.Migration):
    dependencies = [("api", "0002_rate_limit_cache"), ("agentops", "0002_console_groups")]

    operations = [migrations.RunPython(create_group, remove_group)]
