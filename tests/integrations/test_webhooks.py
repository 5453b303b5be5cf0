"""Webhooks: signed per Standard Webhooks, delivered from the event log at least once and in order
per run, retried, given up and flagged, and never sent where the network rules say no."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from standardwebhooks import Webhook

from agentops.integrations import outbound, pump, webhooks
from agentops.integrations.models import MessageStatus, WebhookDelivery, WebhookSubscription
from runtime.models import Event
from tests.integrations.conftest import finish
from tests.integrations.receiver import Answer, Receiver


def subscribe(url: str, kinds: list[str] | None = None) -> tuple[WebhookSubscription, str]:
    return webhooks.create_subscription(name="ops", url=url, event_kinds=kinds or [], actor="admin")


def verified(receiver: Receiver, secret: str) -> list[dict]:
    """Every received body, verified the way a receiver does it, with the package's verifier."""
    return [Webhook(secret).verify(got.body, got.headers) for got in receiver.received]


def test_it_signs_deliveries_that_an_independent_receiver_verifies(receiver, approval_run):
    subscription, secret = subscribe(receiver.url)
    run, interaction = approval_run()
    finish(run, interaction)

    pump.drain()

    events = list(Event.objects.filter(run=run).order_by("pk"))
    bodies = verified(receiver, secret)
    assert [b["data"]["event_id"] for b in bodies] == [e.pk for e in events]
    assert [got.headers["webhook-id"] for got in receiver.received] == [str(e.pk) for e in events]
    assert bodies[0]["type"] == "run.submitted"
    assert bodies[0]["data"]["run_id"] == str(run.pk)
    approval = next(b for b in bodies if b["type"] == "run.tool_approval_requested")
    assert approval["data"]["data"]["tool"] == "refund"
    assert all(d.status == MessageStatus.DELIVERED for d in subscription.deliveries.all())


def test_a_wrong_secret_fails_verification(receiver, approval_run):
    subscribe(receiver.url)
    approval_run()
    pump.drain()
    other = webhooks.create_subscription(name="x", url=receiver.url, event_kinds=[], actor="a")[1]
    with pytest.raises(Exception, match="No matching signature"):
        Webhook(other).verify(receiver.received[0].body, receiver.received[0].headers)


def test_it_stores_the_secret_encrypted_and_shows_only_a_hint(receiver, db):
    subscription, secret = subscribe(receiver.url)
    stored = WebhookSubscription.objects.filter(pk=subscription.pk).values().get()
    assert secret.startswith("whsec_")
    assert all(secret not in str(value) for value in stored.values())
    assert secret[6:] not in stored["secret_sealed"]
    assert stored["secret_hint"] == "…" + secret[-4:]


def test_it_delivers_only_the_subscribed_kinds_and_only_new_events(receiver, approval_run):
    approval_run("before the subscription")
    subscribe(receiver.url, kinds=["tool_approval_requested"])
    run, _ = approval_run("after")
    pump.drain()
    assert [json.loads(got.body)["type"] for got in receiver.received] == [
        "run.tool_approval_requested"
    ]
    assert json.loads(receiver.received[0].body)["data"]["run_id"] == str(run.pk)


def test_receiver_down_then_up_everything_arrives_in_order_per_run(approval_run):
    receiver = Receiver()
    receiver.up()
    url = receiver.url
    receiver.down()  # the port is known, nobody listens: connections are refused
    subscription, secret = subscribe(url)
    runs = [approval_run(f"refund {n}") for n in range(3)]
    for run, interaction in runs[:2]:
        finish(run, interaction)

    pump.drain(rounds=3)  # three failed rounds while the receiver is down
    assert not receiver.received
    failing = WebhookDelivery.objects.filter(subscription=subscription)
    assert {d.status for d in failing} == {MessageStatus.PENDING}
    heads = failing.filter(attempts__gt=0)
    # Only the first event of each run was tried: later ones wait behind it.
    assert heads.count() == 3
    assert all("ConnectionRefusedError" in d.last_response for d in heads)

    receiver.up()
    pump.drain()
    receiver.down()

    bodies = verified(receiver, secret)
    by_run = defaultdict(list)
    for body in bodies:
        by_run[body["data"]["run_id"]].append(body["data"]["event_id"])
    for run, _ in runs:
        expected = list(Event.objects.filter(run=run).order_by("pk").values_list("pk", flat=True))
        assert by_run[str(run.pk)] == expected  # all of them, in order, no duplicate
    assert set(failing.values_list("status", flat=True)) == {MessageStatus.DELIVERED}


def test_a_lost_claim_sends_again_with_the_same_id(receiver, approval_run, settings):
    """A sender that dies after the POST and before recording it: the next claim resends the
    same event under the same webhook-id, which is how a receiver deduplicates."""
    subscription, secret = subscribe(receiver.url, kinds=["submitted"])
    approval_run()
    settings.AGENTOPS_OUTBOX_CLAIM_SECONDS = -1  # every claim has already run out
    first = pump.pump().webhooks
    assert len(first) == 1
    # The POST happens, then the worker dies: simulated by posting without recording.
    delivery = WebhookDelivery.objects.get(pk=first[0].pk)
    body = json.dumps(webhooks.payload(delivery.event), separators=(",", ":"), sort_keys=True)
    secret_plain = secret
    outbound.post(
        subscription.url,
        body.encode(),
        webhooks.signed_headers(secret_plain, str(delivery.event_id), body),
    )
    settings.AGENTOPS_OUTBOX_CLAIM_SECONDS = 60
    pump.drain()
    ids = [got.headers["webhook-id"] for got in receiver.received]
    assert ids == [str(delivery.event_id)] * 2
    assert verified(receiver, secret)[0] == verified(receiver, secret)[1]
    assert webhooks.send(first[0]) is None  # the stale claim records nothing


def test_it_gives_up_disables_and_flags_a_failing_subscription(approval_run, settings):
    receiver = Receiver(lambda _: Answer(500, b"internal error " * 100)).up()
    try:
        subscription, _ = subscribe(receiver.url, kinds=["submitted"])
        approval_run()
        pump.drain()
    finally:
        receiver.down()
    delivery = WebhookDelivery.objects.get(subscription=subscription)
    assert delivery.status == MessageStatus.FAILED
    assert delivery.attempts == settings.AGENTOPS_OUTBOX_MAX_ATTEMPTS
    assert delivery.last_status_code == 500
    assert len(delivery.last_response) == settings.AGENTOPS_RESPONSE_EXCERPT_CHARS
    subscription.refresh_from_db()
    assert not subscription.enabled
    assert subscription.failing_since is not None
    assert "failed" in subscription.disabled_reason
    assert len(receiver.received) == settings.AGENTOPS_OUTBOX_MAX_ATTEMPTS


def test_reenabling_delivers_what_failed_and_what_came_meanwhile(approval_run):
    status = {"code": 503}
    receiver = Receiver(lambda _: Answer(status["code"])).up()
    try:
        subscription, secret = subscribe(receiver.url, kinds=["submitted"])
        approval_run("one")
        pump.drain()
        subscription.refresh_from_db()
        assert not subscription.enabled
        approval_run("two")  # while disabled: waits at the cursor
        pump.drain()
        failed_attempts = len(receiver.received)
        status["code"] = 204
        assert webhooks.enable(subscription) == 1
        pump.drain()
    finally:
        receiver.down()
    delivered = verified(receiver, secret)[failed_attempts:]
    assert [b["data"]["data"]["agent"] for b in delivered] == ["clerk", "clerk"]
    assert set(subscription.deliveries.values_list("status", flat=True)) == {"delivered"}


def test_it_honours_retry_after(approval_run, settings):
    settings.AGENTOPS_OUTBOX_BACKOFF_SECONDS = 1.0
    receiver = Receiver(lambda _: Answer(429, b"slow down", {"Retry-After": "120"})).up()
    try:
        subscription, _ = subscribe(receiver.url, kinds=["submitted"])
        approval_run()
        pump.drain()
    finally:
        receiver.down()
    delivery = WebhookDelivery.objects.get(subscription=subscription)
    assert delivery.attempts == 1
    wait = (delivery.next_attempt_at - delivery.last_attempt_at).total_seconds()
    assert wait == pytest.approx(120, abs=1)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/hook",
        "http://localhost:9/hook",
        "http://[::1]:9/",
        "http://10.1.2.3/",
        "http://169.254.169.254/latest/meta-data",
        "http://192.168.0.1/",
        "http://0.0.0.0:9/",
    ],
)
def test_it_refuses_private_and_loopback_destinations(url, approval_run, settings):
    settings.AGENTOPS_OUTBOUND_ALLOWED_NETWORKS = []
    subscription, _ = subscribe(url, kinds=["submitted"])
    approval_run()
    pump.drain()
    delivery = WebhookDelivery.objects.get(subscription=subscription)
    assert delivery.status == MessageStatus.FAILED
    assert delivery.attempts == 1
    assert delivery.last_status_code is None
    assert delivery.last_response.startswith("refused:")
    subscription.refresh_from_db()
    assert not subscription.enabled
    assert "private, loopback" in subscription.disabled_reason


def test_it_refuses_a_scheme_other_than_http():
    with pytest.raises(outbound.DestinationRefused, match="only http and https"):
        outbound.post("file:///etc/passwd", b"{}", {})


def test_it_does_not_follow_a_redirect_to_loopback(approval_run):
    target = Receiver().up()
    redirecting = Receiver(lambda _: Answer(307, b"", {"Location": target.url})).up()
    try:
        subscription, _ = subscribe(redirecting.url, kinds=["submitted"])
        approval_run()
        pump.drain(rounds=1)
    finally:
        redirecting.down()
        target.down()
    assert not target.received
    delivery = WebhookDelivery.objects.get(subscription=subscription)
    assert delivery.status == MessageStatus.PENDING
    assert delivery.last_status_code == 307


def test_it_checks_every_resolved_address_at_send_time(monkeypatch, settings):
    settings.AGENTOPS_OUTBOUND_ALLOWED_NETWORKS = []
    answers = [(2, 1, 6, "", ("93.184.215.14", 80)), (2, 1, 6, "", ("127.0.0.1", 80))]
    monkeypatch.setattr(outbound.socket, "getaddrinfo", lambda *a, **k: answers)
    with pytest.raises(outbound.DestinationRefused, match=r"127\.0\.0\.1"):
        outbound.post("http://rebinding.example.test/hook", b"{}", {})
