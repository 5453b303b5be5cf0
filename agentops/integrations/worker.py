"""The outbox sweep on every Celery worker's timer, beside the runtime's own sweep.

Like agentops.celery.Sweep, a timer rather than Celery beat: nothing extra to deploy, and the
embedded worker of `manage.py serve` gets it too. Claims make concurrent sweeps harmless.
"""

from __future__ import annotations

from typing import Any

from celery import bootsteps


class OutboxSweep(bootsteps.StartStopStep):
    requires = {"celery.worker.components:Timer"}

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self._timer_entry: Any = None

    def start(self, parent: Any) -> None:
        from django.conf import settings

        from agentops.integrations.pump import sweep

        self._timer_entry = parent.timer.call_repeatedly(
            float(settings.AGENTOPS_OUTBOX_SECONDS), sweep
        )

    def stop(self, parent: Any) -> None:
        if self._timer_entry is not None:
            self._timer_entry.cancel()
            self._timer_entry = None

    terminate = stop
