"""The people of the tests, defined once: who each persona is and what it may do.

Console personas are members of the groups the migration creates (as real operators are); the
agent admin is staff with the agent-version permissions; `user_with` makes anyone else from
permission names. Users are created without a password (tests log in with `force_login`).
"""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission, User
from django.test import Client

# persona -> the group the migration created for it (the outsider is in none).
CONSOLE_PERSONAS: dict[str, str | None] = {
    "viewer": "viewers",
    "approver": "approvers",
    "reconciler": "reconcilers",
    "operator": "operators",
    "outsider": None,
}
# The admin's agent-version pages, and the runs they link to.
AGENT_ADMIN_PERMISSIONS = ("manage_agentversion", "view_agentversion", "view_run")
# Every persona of the authorization matrix.
ALL_PERSONAS = (*[p for p in CONSOLE_PERSONAS if p != "outsider"], "agent_admin", "outsider")


def user_with(username: str, *codenames: str, staff: bool = False) -> User:
    """A user holding the agentops permissions `codenames` directly."""
    user = User.objects.create(username=username, is_staff=staff)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="agentops", codename__in=codenames)
    )
    return user


def superuser(username: str) -> User:
    return User.objects.create(username=username, is_staff=True, is_superuser=True)


def with_password(user: User, password_hash: str) -> User:
    """`user`, able to log in through the login form (the browser tests): a hash made once,
    since hashing is slow on purpose."""
    user.password = password_hash
    user.save(update_fields=["password"])
    return user


def console_user(persona: str) -> User:
    """The console persona `persona`, named after it, in its group."""
    user = User.objects.create(username=persona)
    group = CONSOLE_PERSONAS[persona]
    if group:
        user.groups.add(Group.objects.get(name=group))
    return user


def agent_admin(username: str = "agent_admin") -> User:
    return user_with(username, *AGENT_ADMIN_PERMISSIONS, staff=True)


def logged_in(user: User | None, **client_options: object) -> Client:
    """A test client logged in as `user` (None: anonymous)."""
    client = Client(**client_options)
    if user is not None:
        client.force_login(user)
    return client


def ensure_groups() -> None:
    """Make the groups the migrations make, again: a transactional test's flush empties them
    (restoring them with serialized_rollback clashes with the content types that the flush of
    another transactional test re-created under new ids). The migrations' own functions are
    not called here: they switch an app's models off and on, which the live registry must not
    see."""
    import importlib

    from django.apps import apps
    from django.contrib.auth.management import create_permissions

    console = importlib.import_module("runtime.migrations.0002_console_groups")
    submitters = importlib.import_module("agentops.api.migrations.0003_submitters_group")
    wanted: dict[str, dict[str, list[str]]] = {
        name: {"agentops": codenames} for name, codenames in console.GROUPS.items()
    }
    wanted[submitters.GROUP] = submitters.PERMISSIONS
    for label in ("agentops", "api"):
        create_permissions(apps.get_app_config(label), verbosity=0)
    for name, by_app in wanted.items():
        group, _ = Group.objects.get_or_create(name=name)
        for app_label, codenames in by_app.items():
            group.permissions.add(
                *Permission.objects.filter(
                    content_type__app_label=app_label, codename__in=codenames
                )
            )
