"""The console's groups: who may look, answer, reconcile, retry and cancel.

viewers      see every page, act on nothing
approvers    + answer approvals and questions (agentops.respond_run)
reconcilers  + reconcile uncertain operations (agentops.resolve_run)
operators    + all three actions: answer, reconcile, retry and cancel (agentops.control_run)
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

VIEW = ["view_run", "view_session", "view_operation", "view_interaction", "view_event"]
GROUPS: dict[str, list[str]] = {
    "viewers": VIEW,
    "approvers": [*VIEW, "respond_run"],
    "reconcilers": [*VIEW, "resolve_run"],
    "operators": [*VIEW, "respond_run", "resolve_run", "control_run"],
}


def create_groups(apps: Any, schema_editor: Any) -> None:
    # Permissions are normally created after all migrations ran (post_migrate); create them now
    # so that the groups can hold them on a fresh database.
    from django.contrib.auth.management import create_permissions

    app_config = apps.get_app_config("agentops")
    app_config.models_module = True
    create_permissions(app_config, apps=apps, verbosity=0)
    app_config.models_module = None

    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, codenames in GROUPS.items():
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.add(
            *Permission.objects.filter(content_type__app_label="agentops", codename__in=codenames)
        )


def remove_groups(apps: Any, schema_editor: Any) -> None:
    apps.get_model("auth", "Group").objects.filter(name__in=GROUPS).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_groups, remove_groups)]
