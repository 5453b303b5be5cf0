"""Fixtures of the integration tests: loopback receivers allowed, short retry schedules, runs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from runtime import respond, submit
from runtime.models import Interaction, Run
from runtime.testing import run_until_idle
from tests.conftest import make_agent, one_call
from tests.integrations.receiver import Receiver

# The SQLite test database in a file, as the reliability tests have it: the worker processes of
# test_worker_kill.py must share it.
from tests.reliability.conftest import pytest_configure  # noqa: F401


@pytest.fixture(autouse=True)
def _integration_settings(settings: Any) -> None:
    settings.AGENTOPS_OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.AGENTOPS_OUTBOX_BACKOFF_SECONDS = 0.0
    settings.AGENTOPS_OUTBOX_MAX_ATTEMPTS = 5
    settings.AGENTOPS_OUTBOX_GAP_SECONDS = 60.0
    settings.AGENTOPS_OUTBOUND_TIMEOUT_SECONDS = 5.0
    settings.AGENTOPS_CONSOLE_URL = "https://agentops.example.test"
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver().up()
    yield running
    running.down()


@pytest.fixture
def approval_run(define: Any) -> Any:
    """make() -> a run of `clerk` waiting for approval of `refund`, and its interaction."""
    define(make_agent(one_call("refund")))

    def make(message: str = "refund A1") -> tuple[Run, Interaction]:
        run = run_until_idle(submit("clerk", message, actor="alice").pk)
        return run, Interaction.objects.get(run=run)

    return make


def finish(run: Run, interaction: Interaction) -> Run:
    respond(interaction.pk, {"approved": True}, actor="bob")
    return run_until_idle(run.pk)


TOKEN = "s3cret-scrape-token"


@pytest.fixture
def scrape(client, settings):
    settings.AGENTOPS_METRICS_TOKEN = TOKEN

    def _scrape() -> dict[tuple[str, tuple], float]:
        response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
        assert response.status_code == 200
        assert response["Content-Type"].startswith("text/plain")
        samples = {}
        for family in text_string_to_metric_families(response.content.decode()):
            for sample in family.samples:
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return samples

    return _scrape


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def enable_and_send_what_waited(admin_client: Any, route: Any) -> None:
    """The admin's "Enable, and send what waited" on a flagged route; the pump then sends, and
    the route is on and unflagged again."""
    from agentops.integrations import pump

    response = admin_client.post(
        "/admin/integrations/notificationroute/",
        {"action": "enable_and_send", "_selected_action": [route.pk]},
    )
    assert response.status_code == 302
    pump.drain()
    route.refresh_from_db()
    assert (route.enabled, route.failing_since, route.disabled_reason) == (True, None, "")
