"""A real Celery worker killed in the middle of a webhook delivery: nothing is lost, the run's
events still arrive in order, and the only duplicate carries the same webhook-id."""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

import pytest
from standardwebhooks import Webhook

from agentops.integrations import webhooks
from agentops.integrations.models import MessageStatus, WebhookDelivery
from runtime.models import Event
from tests.integrations.receiver import Answer, Received, Receiver
from tests.reliability.conftest import broker_url, cluster  # noqa: F401 - fixtures
from tests.reliability.harness import Cluster
from tests.support.processes import wait_until

pytestmark = pytest.mark.timeout(180)

OUTBOX_ENV = {
    "AGENTOPS_OUTBOX_SECONDS": "0.3",
    # A killed sender's claim runs out after this; the next sweep sends again.
    "AGENTOPS_OUTBOX_CLAIM_SECONDS": "2",
    "AGENTOPS_OUTBOX_BACKOFF_SECONDS": "0.2",
    "AGENTOPS_OUTBOUND_ALLOWED_NETWORKS": "127.0.0.0/8",
    "AGENTOPS_OUTBOUND_TIMEOUT_SECONDS": "60",
}


class HangingOnce:
    """Answers 200, except the first delivery of `event_id`, which never gets an answer."""

    def __init__(self) -> None:
        self.event_id: str | None = None
        self.hung = threading.Event()
        self.release = threading.Event()

    def __call__(self, got: Received) -> Answer:
        if got.headers.get("webhook-id") == self.event_id and not self.hung.is_set():
            self.hung.set()
            self.release.wait(60)
        return Answer(204, b"")


def start_worker(processes: Cluster, name: str) -> Any:
    original = processes._env

    def env_with_outbox(extra: dict[str, str]) -> dict[str, str]:
        return original({**extra, **OUTBOX_ENV})

    processes._env = env_with_outbox  # type: ignore[method-assign]
    return processes.worker(name)


def test_a_worker_killed_mid_delivery_loses_nothing(cluster, approval_run, settings):  # noqa: F811
    settings.AGENTOPS_OUTBOX_CLAIM_SECONDS = 2
    hanging = HangingOnce()
    receiver = Receiver(hanging).up()
    try:
        _subscription, secret = webhooks.create_subscription(
            name="ops", url=receiver.url, event_kinds=[], actor="admin"
        )
        runs = [approval_run(f"refund {n}")[0] for n in range(3)]
        expected = {
            str(run.pk): list(
                Event.objects.filter(run=run).order_by("pk").values_list("pk", flat=True)
            )
            for run in runs
        }
        hanging.event_id = str(expected[str(runs[0].pk)][0])

        first = start_worker(cluster, "doomed")
        wait_until(hanging.hung.is_set, timeout=60, what="the delivery to hang in the receiver")
        first.kill()
        hanging.release.set()

        start_worker(cluster, "survivor")
        total = sum(len(ids) for ids in expected.values())
        wait_until(
            lambda: WebhookDelivery.objects.filter(status=MessageStatus.DELIVERED).count() == total,
            timeout=90,
            what=f"all {total} deliveries to land",
        )
    finally:
        hanging.release.set()
        receiver.down()

    verifier = Webhook(secret)
    seen: dict[str, list[int]] = defaultdict(list)
    for got in receiver.received:
        body = verifier.verify(got.body, got.headers)
        assert got.headers["webhook-id"] == str(body["data"]["event_id"])
        seen[body["data"]["run_id"]].append(body["data"]["event_id"])
    for run_id, ids in expected.items():
        # Every event, in order; a repeat only right after itself (the interrupted delivery).
        assert [i for n, i in enumerate(seen[run_id]) if n == 0 or seen[run_id][n - 1] != i] == ids
    duplicates = len(receiver.received) - total
    assert duplicates >= 1
    assert seen[str(runs[0].pk)].count(int(hanging.event_id)) >= 2
