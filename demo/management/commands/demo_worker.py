"""Advance one run in this process, as a worker would (the seed crashes it on purpose)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from runtime.testing import run_until_idle


class Command(BaseCommand):
    help = "Advance one run until it needs a person or finishes (AGENTOPS_CRASH_AT applies)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("run_id")

    def handle(self, *args: Any, run_id: str, **options: Any) -> None:
        run = run_until_idle(run_id)
        self.stdout.write(f"run {run.pk}: {run.status}")
