"""Canary secrets of our own: an API token, a webhook signing secret, a Slack webhook URL and
Slack bot tokens, made as an admin makes them, then used, failed and refused. Each appears in its
one-time display (a token or secret we make) or in the form the admin typed it into (a Slack
secret), and nowhere else: not in the database (but as ciphertext), the admin's pages, the
console, the API's answers, the delivery logs, the log records (as the configured handlers write
them) or the error reports. (The model provider's key: test_secrets.py.)
"""

from __future__ import annotations

import logging
import re
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, User
from django.test import Client, RequestFactory
from django.views.debug import ExceptionReporter

from agentops.api.models import ApiToken, ServiceAccount
from agentops.integrations import pump
from agentops.integrations import secrets as sealing
from agentops.integrations.admin import NotificationRouteAdmin
from agentops.integrations.kinds import KINDS
from agentops.integrations.models import (
    Notification,
    NotificationRoute,
    WebhookDelivery,
    WebhookSubscription,
)
from tests.api.conftest import Api, make_account
from tests.fakes.slack_server import CHANNEL, FakeSlack
from tests.integrations.receiver import Answer, Received, Receiver

SHOWN_ONCE = {
    "token": re.compile(r'<code id="api-token">([^<]+)</code>'),
    "secret": re.compile(r'<code id="secret">([^<]+)</code>'),
}


def echo(got: Received) -> Answer:
    """A receiver that fails and echoes what it was sent, as a misconfigured proxy does."""
    return Answer(500, f"upstream error for {got.path}: {got.headers}".encode())


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver(echo).up()
    yield running
    running.down()


@pytest.fixture
def slack(settings: Any) -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        settings.AGENTOPS_SLACK_API_URL = fake.url
        yield fake


@pytest.fixture
def admin_client(db: None) -> Client:
    client = Client()
    client.force_login(User.objects.create(username="root", is_staff=True, is_superuser=True))
    return client


def shown_once(response: Any, what: str) -> str:
    assert response.status_code == 200, response.content[:500]
    found = SHOWN_ONCE[what].search(response.content.decode())
    assert found, response.content[:500]
    return found.group(1)


def everything_stored() -> str:
    return "\n".join(
        str(row) for model in apps.get_models() for row in model._default_manager.values()
    )


def error_report(request: Any) -> str:
    """Django's error reports of a failing view: the 500 page with DEBUG, and the text the
    admins' email carries."""
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        reporter = ExceptionReporter(request, *sys.exc_info())
        return reporter.get_traceback_html() + reporter.get_traceback_text()


def logged(records: list[logging.LogRecord]) -> str:
    """The records as the logging configuration's handlers write them."""
    handlers = [h for h in logging.getLogger().handlers if h.formatter is not None] or [
        logging.StreamHandler()
    ]
    fallback = logging.Formatter("%(name)s %(levelname)s %(message)s %(exc_info)s")
    lines = []
    for record in records:
        lines.append(fallback.format(record))
        lines.extend(handler.format(record) for handler in handlers)
        lines.append(repr(getattr(record, "request", "")))
    return "\n".join(lines)


def bot_routes(
    admin_client: Client, slack: FakeSlack, group: Group, pages: dict[str, str]
) -> tuple[str, str]:
    """Two Slack bot routes made in the admin, each refused once first (a channel name where
    its id belongs): one whose token the workspace knows, one Slack refuses (invalid_auth).
    Their tokens; the admin's answers go into `pages`."""
    bot, unknown_bot = (f"xoxb-canary-{uuid.uuid4().hex}" for _ in range(2))
    slack.tokens.add(bot)
    for name, token in [("slack-bot", bot), ("slack-bot-unknown", unknown_bot)]:
        form = {"name": name, "kinds": list(KINDS), "group": group.pk, "channel": "slack_bot"}
        form.update(slack_token=token, enabled="on")
        refused = admin_client.post(
            "/admin/integrations/notificationroute/add/", {**form, "slack_channel": "#payments"}
        )
        assert refused.status_code == 200  # the form again, with its error
        pages[f"refused route form {name}"] = refused.content.decode()
        saved = admin_client.post(
            "/admin/integrations/notificationroute/add/", {**form, "slack_channel": CHANNEL}
        )
        assert saved.status_code == 302, saved.content[:500]
        pages[f"route created {name}"] = saved.content.decode()
    sealed = NotificationRoute.objects.filter(channel="slack_bot").exclude(slack_token_sealed="")
    assert sealed.count() == 2  # kept, as ciphertext (the search of the database reads it)
    return bot, unknown_bot


def slack_answered(slack: FakeSlack, bot: str, unknown_bot: str) -> None:
    """The bot posted with its token; the other's token was refused, and its route flagged."""
    assert slack.posted[CHANNEL]
    sent_with = {request.headers["Authorization"] for request in slack.requests}
    assert sent_with == {f"Bearer {bot}", f"Bearer {unknown_bot}"}
    flagged = NotificationRoute.objects.get(name="slack-bot-unknown")
    assert flagged.disabled_reason == "Slack refused the route: invalid_auth"


def test_the_canaries_appear_once_at_creation_and_nowhere_else(  # noqa: PLR0917 - fixtures
    admin_client, users, world, receiver, slack, settings, caplog
):
    caplog.set_level(logging.DEBUG)
    settings.AGENTOPS_OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.AGENTOPS_OUTBOX_BACKOFF_SECONDS = 0.0
    settings.AGENTOPS_OUTBOX_MAX_ATTEMPTS = 2
    settings.AGENTOPS_OUTBOUND_TIMEOUT_SECONDS = 5.0
    pages: dict[str, str] = {}

    # An API token, made in the admin.
    account = make_account("ci")
    created = admin_client.post(
        "/admin/api/apitoken/add/",
        {"account": account.pk, "label": "deploys", "scopes": ["read", "respond"]},
    )
    token = shown_once(created, "token")
    # A webhook subscription to a receiver that fails, made in the admin.
    created = admin_client.post(
        "/admin/integrations/webhooksubscription/add/",
        {"name": "ops", "url": receiver.url, "enabled": "on", "kinds_text": ""},
    )
    secret = shown_once(created, "secret")
    # Slack routes whose URLs carry the secret: one to the failing receiver, one refused.
    slack_secret = f"canary{uuid.uuid4().hex}"
    group = Group.objects.get(name="operators")
    for name, url in [
        ("slack", f"http://127.0.0.1:{receiver.port}/services/T0/B0/{slack_secret}"),
        ("slack-ftp", f"ftp://hooks.example.test/services/T0/B0/{slack_secret}"),
    ]:
        form = {"name": name, "kinds": list(KINDS), "group": group.pk, "channel": "slack"}
        refused = admin_client.post("/admin/integrations/notificationroute/add/", {
            **form, "name": "", "slack_url": url})  # fmt: skip
        assert refused.status_code == 200  # the form again, with its error
        pages[f"refused route form {name}"] = refused.content.decode()
        saved = admin_client.post(
            "/admin/integrations/notificationroute/add/",
            {**form, "enabled": "on", "slack_url": url},
        )
        assert saved.status_code == 302, saved.content[:500]
    bot, unknown_bot = bot_routes(admin_client, slack, group, pages)
    canaries = {
        "API token": token,
        "webhook secret": secret,
        "Slack URL secret": slack_secret,
        "Slack bot token": bot,
        "refused Slack bot token": unknown_bot,
    }

    # Work for them: runs that notify, deliveries that fail, the token used right and wrong.
    for state in ("waiting", "blocked", "failed", "question"):
        world.run(state)
    pump.drain()
    assert WebhookDelivery.objects.exclude(last_status_code=None).exists()
    assert receiver.received  # the webhook and Slack posts really went out (and failed)
    assert Notification.objects.filter(last_response__startswith="refused").exists()
    slack_answered(slack, bot, unknown_bot)
    api = Api(token)
    run = world.run("waiting")
    for name, response in {
        "runs": api.get("/runs"),
        "run": api.get(f"/runs/{run.pk}"),
        "unknown run": api.get(f"/runs/{uuid.uuid4()}"),
        "bad filter": api.get("/runs", {"status": "\x01" * 3}),
        "missing scope": api.post("/runs", {"agent": "chatty", "input": "hi"}),
        "bad body": api.post(f"/runs/{run.pk}/cancel", {"reason": 5}),
        "wrong token": Api(token + "x").get("/runs"),
        "method": Api(token).client.delete("/api/v1/runs", HTTP_AUTHORIZATION=f"Bearer {token}"),
    }.items():
        assert response.status_code < 500, name
        pages[f"api {name}"] = response.content.decode()
    assert ApiToken.objects.get().last_used_at is not None  # it was really used

    # Every admin page of them, and the console's.
    for model in (ApiToken, ServiceAccount, WebhookSubscription, WebhookDelivery, NotificationRoute,
                  Notification):  # fmt: skip
        label = f"{model._meta.app_label}/{model._meta.model_name}"
        pages[label] = admin_client.get(f"/admin/{label}/").content.decode()
        for pk in model.objects.values_list("pk", flat=True):
            change = admin_client.get(f"/admin/{label}/{pk}/change/")
            assert change.status_code == 200, label
            pages[f"{label} {pk}"] = change.content.decode()
    operator = Client()
    operator.force_login(User.objects.get(username="operator"))
    for url in ("/", "/runs/", f"/runs/{run.pk}/", "/audit/"):
        pages[url] = operator.get(url).content.decode()

    # Error reports of a request that carried the token.
    request = RequestFactory().get("/api/v1/runs", HTTP_AUTHORIZATION=f"Bearer {token}")
    for debug in (True, False):
        settings.DEBUG = debug
        pages[f"error report (DEBUG={debug})"] = error_report(request)

    stored, logs = everything_stored(), logged(caplog.records)
    assert logs  # the deliveries' failures were logged: the search below had something to read
    assert "Slack answered invalid_auth" in logs  # and the flagged bot route's
    for what, canary in canaries.items():
        assert canary not in stored, what
        assert canary not in logs, what
        for page, html in pages.items():
            assert canary not in html, (what, page)


def test_the_tokens_and_the_secret_are_stored_only_as_digest_and_ciphertext(admin_client):
    account = make_account("ci")
    token = shown_once(
        admin_client.post(
            "/admin/api/apitoken/add/", {"account": account.pk, "label": "", "scopes": ["read"]}
        ),
        "token",
    )
    secret = shown_once(
        admin_client.post(
            "/admin/integrations/webhooksubscription/add/",
            {"name": "ops", "url": "https://hooks.example.test/in", "kinds_text": ""},
        ),
        "secret",
    )
    bot = f"xoxb-canary-{uuid.uuid4().hex}"
    saved = admin_client.post(
        "/admin/integrations/notificationroute/add/",
        {
            "name": "payments",
            "kinds": list(KINDS),
            "group": Group.objects.get(name="operators").pk,
            "channel": "slack_bot",
            "slack_token": bot,
            "slack_channel": CHANNEL,
        },
    )
    assert saved.status_code == 302, saved.content[:500]
    stored_token = ApiToken.objects.get()
    assert stored_token.digest != token and len(stored_token.digest) == 64
    assert token.startswith(stored_token.shown) and len(stored_token.shown) < len(token) // 2
    subscription = WebhookSubscription.objects.get()
    assert secret not in str(WebhookSubscription.objects.values().get())
    assert subscription.secret_hint and secret.endswith(subscription.secret_hint.lstrip("…"))
    assert len(subscription.secret_hint) < len(secret) // 4
    route = NotificationRoute.objects.get()
    assert bot not in str(NotificationRoute.objects.values().get())
    assert sealing.unseal(route.slack_token_sealed) == bot  # its ciphertext, for the sender
    assert bot.endswith(route.slack_token_hint.lstrip("…"))
    assert len(route.slack_token_hint) < len(bot) // 4
    # No change page offers a way to read them again.
    for url in (
        f"/admin/api/apitoken/{stored_token.pk}/change/",
        f"/admin/integrations/webhooksubscription/{subscription.pk}/change/",
        f"/admin/integrations/notificationroute/{route.pk}/change/",
    ):
        page = admin_client.get(url).content.decode()
        assert token not in page and secret not in page and bot not in page
        assert 'id="api-token"' not in page and 'id="secret"' not in page


def crash(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("a bug, after the secret was posted")


@pytest.mark.parametrize("debug", [True, False], ids=["debug 500 page", "production 500"])
def test_a_crash_after_a_secret_was_posted_does_not_report_it(  # noqa: PLR0917 - fixtures
    admin_client, users, world, monkeypatch, settings, caplog, debug
):
    """The password typed for a high-risk approval, and a Slack URL and bot token typed in the
    admin, reach a view that fails: the 500 page (DEBUG's technical one too) and the logged error
    mask them."""
    caplog.set_level(logging.DEBUG)
    settings.DEBUG = debug
    password, slack = f"pw-canary-{uuid.uuid4().hex}", f"canary{uuid.uuid4().hex}"
    bot = f"xoxb-canary-{uuid.uuid4().hex}"
    olga = User.objects.create(username="olga")
    olga.set_password(password)
    olga.save()
    olga.groups.add(Group.objects.get(name="operators"))
    approval = world.pending(world.run("waiting"))
    monkeypatch.setattr("agentops.views.interactions.control.respond", crash)
    monkeypatch.setattr(NotificationRouteAdmin, "save_model", crash)
    console = Client(raise_request_exception=False)
    console.force_login(olga)
    admin_client.raise_request_exception = False
    answers = [
        console.post(
            f"/interactions/{approval.pk}/respond/",
            {"decision": "approve", "confirm": "yes", "password": password},
        ),
        admin_client.post(
            "/admin/integrations/notificationroute/add/",
            {
                "name": "slack",
                "kinds": list(KINDS),
                "group": Group.objects.get(name="operators").pk,
                "channel": "slack",
                "slack_url": f"https://hooks.slack.com/services/T0/B0/{slack}",
                "slack_token": bot,
                "slack_channel": CHANNEL,
            },
        ),
    ]
    assert [answer.status_code for answer in answers] == [500, 500]
    reported = "\n".join(answer.content.decode() for answer in answers) + logged(caplog.records)
    assert "a bug, after the secret was posted" in reported  # the crash was reported...
    assert password not in reported  # ...without what was posted
    assert slack not in reported
    assert bot not in reported
