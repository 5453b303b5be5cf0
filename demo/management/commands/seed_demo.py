"""Seed the refund desk demo once, and make sure its operator and agent admin can log in."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from demo.logins import ensure_logins
from demo.seed import seed


class Command(BaseCommand):
    help = "Create the demo orders and runs (once) and the demo logins."

    def handle(self, *args: Any, **options: Any) -> None:
        seed(log=self.stdout.write)
        ensure_logins()
        # The logins themselves are printed by `serve --demo-login`, once the console is up.
        self.stdout.write("demo logins ready")
