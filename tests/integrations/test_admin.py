"""The admin: a subscription's secret is shown once, the logs are read-only, routes keep the
Slack URL secret."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Group, User

from agentops.integrations.models import NotificationRoute, WebhookSubscription


@pytest.fixture
def admin_client(client, db):
    client.force_login(User.objects.create_superuser("root", "root@example.test", "pw"))
    return client


def test_the_secret_is_shown_once_and_then_only_its_hint(admin_client):
    response = admin_client.post(
        "/admin/integrations/webhooksubscription/add/",
        {
            "name": "ops",
            "url": "https://hooks.example.test/in",
            "kinds_text": "blocked, failed",
            "enabled": "on",
        },
    )
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    secret = re.search(r'<code id="secret">(whsec_[^<]+)</code>', response.content.decode())[1]
    subscription = WebhookSubscription.objects.get()
    assert subscription.event_kinds == ["blocked", "failed"]
    page = admin_client.get(f"/admin/integrations/webhooksubscription/{subscription.pk}/change/")
    assert secret not in page.content.decode()
    assert subscription.secret_hint in page.content.decode()


def test_a_bad_event_kind_is_refused_and_nothing_is_made(admin_client):
    response = admin_client.post(
        "/admin/integrations/webhooksubscription/add/",
        {"name": "ops", "url": "https://hooks.example.test/in", "kinds_text": "<script>"},
    )
    assert response.status_code == 200
    assert "is not an event kind" in response.content.decode()
    assert not WebhookSubscription.objects.exists()


def test_delivery_and_notification_logs_are_read_only(admin_client):
    for model in ("webhookdelivery", "notification"):
        assert admin_client.get(f"/admin/integrations/{model}/").status_code == 200
        assert admin_client.get(f"/admin/integrations/{model}/add/").status_code == 403


def test_a_slack_route_keeps_its_url_secret(admin_client):
    group = Group.objects.create(name="payments-oncall")
    url = "https://hooks.slack.test/services/T000/B000/XXXXXXXXXXXXXXXX"
    response = admin_client.post(
        "/admin/integrations/notificationroute/add/",
        {
            "name": "payments",
            "kinds": ["approval_requested"],
            "group": group.pk,
            "channel": "slack",
            "slack_url": url,
            "enabled": "on",
        },
    )
    assert response.status_code == 302
    route = NotificationRoute.objects.get()
    assert url not in route.slack_url_sealed
    page = admin_client.get(f"/admin/integrations/notificationroute/{route.pk}/change/")
    assert url not in page.content.decode()


def test_a_slack_route_needs_its_url(admin_client):
    group = Group.objects.create(name="payments-oncall")
    response = admin_client.post(
        "/admin/integrations/notificationroute/add/",
        {
            "name": "payments",
            "kinds": ["approval_requested"],
            "group": group.pk,
            "channel": "slack",
        },
    )
    assert "needs its incoming webhook URL" in response.content.decode()
    assert not NotificationRoute.objects.exists()
