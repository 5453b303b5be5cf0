"""Seed the refund desk demo once, and make sure an operator can log in."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from demo.seed import seed


class Command(BaseCommand):
    help = "Create the demo orders and runs (once) and the operator login."

    def handle(self, *args: Any, **options: Any) -> None:
        seed(log=self.stdout.write)
        username, password = self._operator()
        self.stdout.write(f"login: {username} / {password}")

    def _operator(self) -> tuple[str, str]:
        """The operator login: from AGENTOPS_OPERATOR_USERNAME/_PASSWORD, else generated once."""
        username = os.environ.get("AGENTOPS_OPERATOR_USERNAME", "operator")
        password = os.environ.get("AGENTOPS_OPERATOR_PASSWORD", "")
        remembered = Path(settings.BASE_DIR) / "var" / "operator-password"
        if not password:
            if remembered.exists():
                password = remembered.read_text().strip()
            else:
                password = secrets.token_urlsafe(12)
                remembered.parent.mkdir(exist_ok=True)
                remembered.touch(mode=0o600)
                remembered.write_text(password)
        users = get_user_model()
        user = users.objects.filter(username=username).first() or users(username=username)
        # The demo operator may do everything the tour shows, the admin included.
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
        return username, password
