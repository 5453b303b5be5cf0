"""After-commit hooks: hand a run to the executor, push an event to the live console.

Both are configured by dotted path in settings, so the runtime never imports the interfaces
(Celery tasks, Channels) that sit on top of it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.db import transaction
from django.dispatch import receiver
from django.utils.module_loading import import_string


@cache
def _hook(setting: str) -> Callable[[Any], None] | None:
    path = getattr(settings, setting, "")
    return import_string(path) if path else None


@receiver(setting_changed)
def _forget_hooks(**kwargs: Any) -> None:
    _hook.cache_clear()


def enqueue_on_commit(run_id: Any) -> None:
    """Ask the executor to advance `run_id` once the current transaction commits."""
    hook = _hook("AGENTOPS_DISPATCH")
    if hook is not None:
        transaction.on_commit(lambda: hook(str(run_id)), robust=True)


def enqueue_job_on_commit(job_id: Any) -> None:
    """Ask the workers to work a bulk job once the current transaction commits."""
    hook = _hook("AGENTOPS_BULK_DISPATCH")
    if hook is not None:
        transaction.on_commit(lambda: hook(str(job_id)), robust=True)


def publish_on_commit(event: Any) -> None:
    """Push a committed event to live subscribers; the event log itself is the outbox."""
    hook = _hook("AGENTOPS_PUBLISH")
    if hook is not None:
        transaction.on_commit(lambda: hook(event), robust=True)
