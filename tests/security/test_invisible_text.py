"""Bidirectional overrides and zero-width characters, where they could mislead an approver.

Tool arguments, a model's text, a rejection reason, reconcile evidence and a webhook receiver's
answer carry U+202E (which turns "gnp.exe" into what looks like "exe.png") and zero-width
characters (two ids that look equal but differ), with markup around them. On every page that
shows them — the decision page with its context and related calls, the run page with its
receipt, the fork and bulk previews, the delivery log, the audit log — the characters
themselves never reach the HTML: each is shown by its code point (the `shown` filter), and the
markup is text. (In a browser, with scripts watched: tests/browser/test_hostile.py.)
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import pytest
from django.contrib.auth.models import User
from django.test import Client

from agentops.integrations.models import WebhookSubscription
from runtime import resolve, respond, submit
from runtime.llm.scripted import call, say
from runtime.models import Interaction, InteractionStatus, Run
from runtime.testing import run_until_idle
from tests.conftest import make_agent
from tests.integrations.receiver import Answer, Receiver

# What a hostile model, customer, operator or receiver writes.
TRICK = "invoice_\u202egnp.exe\u202c for acc\u200bount 42\u2066x\u2069 <script>alert(1)</script>"
TEXTAREA = re.compile(r"<textarea[^>]*>(.*?)</textarea>", re.S)
VALUE = re.compile(r'value="[^"]*"')
INVISIBLE = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")


@pytest.fixture
def tricked(define: Any, effects: Any, users: Any) -> dict[str, Any]:
    define(
        make_agent(
            [
                call(("refund", {"order_id": TRICK, "amount_cents": 1}), text=TRICK, step=1),
                say(TRICK),
            ],
            name="tricky",
        )
    )
    pending = run_until_idle(submit("tricky", TRICK, actor="alice").pk)
    approval = Interaction.objects.get(run=pending, status=InteractionStatus.PENDING)
    rejected = run_until_idle(submit("tricky", TRICK, actor="alice").pk)
    rejection = Interaction.objects.get(run=rejected, status=InteractionStatus.PENDING)
    respond(rejection.pk, {"approved": False, "reason": TRICK}, actor="operator")
    approved = run_until_idle(submit("tricky", TRICK, actor="alice").pk)
    respond(
        Interaction.objects.get(run=approved, status=InteractionStatus.PENDING).pk,
        {"approved": True},
        actor="operator",
    )
    approved = run_until_idle(approved.pk)
    return {"approval": approval, "pending": pending, "rejected": rejected, "approved": approved}


def assert_neutralised(html: str, where: str) -> None:
    # An editable box keeps the value as it is (an edit must give back exactly what it got);
    # the page then says, by code point, what the box holds.
    boxes = TEXTAREA.findall(html)
    html = TEXTAREA.sub("<textarea></textarea>", html)
    if any(INVISIBLE.search(box) for box in boxes):
        assert "invisible characters" in html and "U+202E" in html, where
    # Form values (hidden fields, the filters a person typed) go back as they came.
    found = INVISIBLE.findall(VALUE.sub('value=""', html))
    assert not found, f"{where}: {[f'U+{ord(c):04X}' for c in found]} reached the page"
    assert "<script>alert(1)</script>" not in html, where


def test_the_decision_page_context_and_related_calls_show_code_points(tricked):
    client = Client()
    client.force_login(User.objects.get(username="operator"))
    approval = tricked["approval"]
    for htmx in ({}, {"HTTP_HX_REQUEST": "true"}):
        html = client.get(f"/interactions/{approval.pk}/", **htmx).content.decode()
        assert_neutralised(html, "decision page")
        assert "U+202E" in html and "U+200B" in html  # shown, not dropped
    for url in ("/", "/runs/", f"/runs/{tricked['pending'].pk}/", "/audit/"):
        assert_neutralised(client.get(url).content.decode(), url)


def test_the_receipt_the_rejection_reason_and_the_audit_show_code_points(tricked):
    client = Client()
    client.force_login(User.objects.get(username="operator"))
    for name in ("approved", "rejected"):
        html = client.get(f"/runs/{tricked[name].pk}/").content.decode()
        assert_neutralised(html, f"run page ({name})")
        assert "U+202E" in html
    audit = client.get("/audit/").content.decode()
    assert_neutralised(audit, "audit")


def test_the_fork_and_bulk_previews_show_code_points(tricked):
    client = Client()
    client.force_login(User.objects.get(username="operator"))
    run = tricked["approved"]
    key = run.operations.filter(name="refund").values_list("key", flat=True).first()
    assert key
    for url in (
        f"/runs/{run.pk}/fork/",
        f"/runs/{run.pk}/fork/?at={quote(key)}",
        f"/runs/bulk/?agent=tricky&error={quote(TRICK)}",
        f"/runs/bulk/?tool={quote(TRICK)}",
    ):
        response = client.get(url)
        assert response.status_code < 500, url
        assert_neutralised(response.content.decode(), url)


def test_reconcile_evidence_is_shown_by_code_points(world, users):
    blocked = world.run("blocked")
    resolve(
        blocked.pk,
        blocked.blocked_operation,
        {"receipt_id": "r-1"},
        actor="operator",
        evidence=TRICK,
    )
    client = Client()
    client.force_login(User.objects.get(username="operator"))
    for url in (f"/runs/{blocked.pk}/", f"/runs/{blocked.pk}/reconcile/", "/audit/"):
        html = client.get(url).content.decode()
        assert_neutralised(html, url)
    assert "U+202E" in client.get(f"/runs/{blocked.pk}/").content.decode()


def test_the_delivery_log_shows_a_receivers_answer_by_code_points(tricked, settings):
    from agentops.integrations import pump, webhooks

    settings.AGENTOPS_OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.AGENTOPS_OUTBOX_BACKOFF_SECONDS = 0.0
    receiver = Receiver(lambda _: Answer(500, TRICK.encode())).up()
    try:
        webhooks.create_subscription(name="ops", url=receiver.url, event_kinds=[], actor="a")
        submit("tricky", "more", actor="alice")
        pump.drain(rounds=1)
    finally:
        receiver.down()
    admin = Client()
    admin.force_login(User.objects.create(username="root", is_staff=True, is_superuser=True))
    subscription = WebhookSubscription.objects.get()
    for url in (
        "/admin/integrations/webhookdelivery/",
        "/admin/integrations/webhooksubscription/",
        f"/admin/integrations/webhooksubscription/{subscription.pk}/change/",
    ):
        response = admin.get(url)
        assert response.status_code == 200, url
        assert_neutralised(response.content.decode(), url)
    assert Run.objects.filter(agent="tricky").count() == 4
