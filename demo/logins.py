"""The demo's two logins: an operator (the `operators` group) and an agent admin (the admin).

Each password comes from the environment, else is generated on the first `make run` and kept in
var/ (AGENTOPS_VAR_DIR), readable by its owner only. A password is set only when the account is
new or the password changed, so restarting `make run` neither changes it nor logs anyone out
(Django ends a user's sessions when their password hash changes).
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import Group, Permission, User

OPERATORS_GROUP = "operators"
# The admin's agent-version page, and the runs it links to.
AGENT_ADMIN_PERMISSIONS = ("manage_agentversion", "view_agentversion", "view_run")


@dataclass(frozen=True)
class Login:
    role: str
    username: str
    password: str
    env: str  # the prefix of the variables that set it: {env}_USERNAME, {env}_PASSWORD


def _password(env: str, kept_as: str) -> str:
    password = os.environ.get(f"{env}_PASSWORD", "")
    if password:
        return password
    kept = Path(settings.VAR_DIR) / kept_as
    if not kept.exists():
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.touch(mode=0o600)
        kept.write_text(secrets.token_urlsafe(12))
    return kept.read_text().strip()


def logins() -> list[Login]:
    """The demo logins as configured (generating a password the first time)."""
    return [
        Login(
            "operator",
            os.environ.get("AGENTOPS_OPERATOR_USERNAME", "operator"),
            _password("AGENTOPS_OPERATOR", "operator-password"),
            "AGENTOPS_OPERATOR",
        ),
        Login(
            "agent admin",
            os.environ.get("AGENTOPS_AGENT_ADMIN_USERNAME", "agent-admin"),
            _password("AGENTOPS_AGENT_ADMIN", "agent-admin-password"),
            "AGENTOPS_AGENT_ADMIN",
        ),
    ]


def _account(login: Login) -> User:
    user = User.objects.filter(username=login.username).first()
    if user is None:
        user = User(username=login.username)
    if user.pk is None or not user.check_password(login.password):
        user.set_password(login.password)
    return user


def ensure_logins() -> list[Login]:
    """Create or update both accounts; a password that did not change is left alone."""
    operator, admin = logins()
    user = _account(operator)
    # A console operator, nothing more: the permissions come from the group.
    user.is_staff = user.is_superuser = False
    user.save()
    user.groups.add(Group.objects.get(name=OPERATORS_GROUP))
    user = _account(admin)
    user.is_staff, user.is_superuser = True, False
    user.save()
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="agentops", codename__in=AGENT_ADMIN_PERMISSIONS
        )
    )
    return [operator, admin]
