"""Slack routes with a bot token: chat.postMessage against a local fake of Slack's Web API
(tests/fakes/slack_server.py); rate limits wait as long as Slack says, in the database; a route
Slack refuses (token or channel) is turned off, flagged with Slack's error, and resumes when
enabled again."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Group, User

from agentops.integrations import notifications, pump
from agentops.integrations.models import Channel, MessageStatus, Notification, NotificationRoute
from runtime import clock
from runtime.models import InteractionStatus
from tests.fakes.slack_server import BOT_TOKEN, CHANNEL, FakeSlack
from tests.integrations.conftest import enable_and_send_what_waited


@pytest.fixture
def slack(settings: Any) -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        settings.AGENTOPS_SLACK_API_URL = fake.url
        yield fake


@pytest.fixture
def bot_route(approval_run: Any) -> NotificationRoute:
    # After the agent's registration: the notifier starts after the newest event, and on
    # PostgreSQL an empty log with a sequence already past 1 would look like a hole to wait on.
    group = Group.objects.create(name="payments-oncall")
    group.user_set.add(User.objects.create_user("paula", "paula@example.test", "pw"))
    route = NotificationRoute(
        name="payments",
        kinds=["approval_requested"],
        group=group,
        channel=Channel.SLACK_BOT,
        slack_channel=CHANNEL,
    )
    notifications.set_slack_token(route, BOT_TOKEN)
    notifications.save_route(route)
    return route


def test_the_bot_posts_block_kit_to_the_channel(slack, bot_route, approval_run):
    _run, interaction = approval_run()
    pump.drain()

    request = slack.requests[0]
    assert request.path == "/api/chat.postMessage"
    assert request.headers["Authorization"] == f"Bearer {BOT_TOKEN}"
    [message] = slack.posted[CHANNEL]
    assert message["blocks"][0]["text"]["text"] == "A tool call waits for approval"
    button = message["blocks"][-1]["elements"][0]
    assert button["url"] == f"https://agentops.example.test/interactions/{interaction.pk}/"
    notification = Notification.objects.get()
    assert (notification.status, notification.attempts) == (MessageStatus.DELIVERED, 1)
    # The token is kept encrypted; only its hint is readable.
    route = NotificationRoute.objects.get()
    assert BOT_TOKEN not in route.slack_token_sealed
    assert route.slack_token_hint == "…oken"
    interaction.refresh_from_db()
    assert interaction.status == InteractionStatus.PENDING


def test_a_rate_limit_waits_as_long_as_slack_says_in_the_database(slack, bot_route, approval_run):
    slack.rate_limit(120)
    with clock.frozen() as frozen:
        approval_run()
        pump.drain()
        notification = Notification.objects.get()
        assert (notification.status, notification.attempts) == (MessageStatus.PENDING, 1)
        assert notification.last_status_code == 429
        assert (notification.next_attempt_at - clock.now()).total_seconds() == 120
        pump.drain()  # not due yet: nothing is sent
        assert len(slack.requests) == 1
        frozen.advance(121)
        pump.drain()
    notification.refresh_from_db()
    assert (notification.status, notification.attempts) == (MessageStatus.DELIVERED, 2)
    assert len(slack.posted[CHANNEL]) == 1


def test_slacks_internal_error_is_retried(slack, bot_route, approval_run):
    slack.troubles.append(("internal_error", 0))
    approval_run()
    pump.drain()
    notification = Notification.objects.get()
    assert (notification.status, notification.attempts) == (MessageStatus.DELIVERED, 2)


def revoke(slack: FakeSlack, route: NotificationRoute) -> None:
    slack.revoked.add(BOT_TOKEN)


def unknown_token(slack: FakeSlack, route: NotificationRoute) -> None:
    notifications.set_slack_token(route, "xoxb-9999-not-a-token")
    route.save()


def removed_channel(slack: FakeSlack, route: NotificationRoute) -> None:
    slack.channels.discard(CHANNEL)


def bot_not_in_channel(slack: FakeSlack, route: NotificationRoute) -> None:
    slack.members.discard(CHANNEL)


BREAKAGES = {
    "token_revoked": revoke,
    "invalid_auth": unknown_token,
    "channel_not_found": removed_channel,
    "not_in_channel": bot_not_in_channel,
}


@pytest.mark.parametrize("error", list(BREAKAGES))
def test_a_route_slack_refuses_is_turned_off_flagged_and_resumes_when_fixed(
    slack, bot_route, approval_run, admin_client, error
):
    BREAKAGES[error](slack, bot_route)
    approval_run("one")
    pump.drain()

    route = NotificationRoute.objects.get()
    assert not route.enabled
    assert route.failing_since is not None
    assert route.disabled_reason == f"Slack refused the route: {error}"
    page = admin_client.get("/admin/integrations/notificationroute/").content.decode()
    assert f"Slack refused the route: {error}" in page
    # Not given up: it waits, with Slack's answer, and later notices wait with it.
    first = Notification.objects.get()
    assert (first.status, first.attempts, first.last_response) == (
        MessageStatus.PENDING,
        1,
        error,
    )
    approval_run("two")
    pump.drain()
    assert len(slack.requests) == 1
    assert slack.posted == {}

    slack.revoked.clear()
    slack.channels.add(CHANNEL)
    slack.members.add(CHANNEL)
    notifications.set_slack_token(route, BOT_TOKEN)
    route.save()
    enable_and_send_what_waited(admin_client, route)
    assert len(slack.posted[CHANNEL]) == 2
    assert set(Notification.objects.values_list("status", flat=True)) == {MessageStatus.DELIVERED}


def test_the_admin_keeps_the_bot_token_secret(admin_client):
    group = Group.objects.create(name="payments-oncall")
    response = admin_client.post(
        "/admin/integrations/notificationroute/add/",
        {
            "name": "payments",
            "kinds": ["approval_requested"],
            "group": group.pk,
            "channel": "slack_bot",
            "slack_token": BOT_TOKEN,
            "slack_channel": CHANNEL,
            "enabled": "on",
        },
    )
    assert response.status_code == 302
    route = NotificationRoute.objects.get()
    assert route.slack_channel == CHANNEL
    page = admin_client.get(f"/admin/integrations/notificationroute/{route.pk}/change/")
    assert BOT_TOKEN not in page.content.decode()
    assert route.slack_token_hint in page.content.decode()


@pytest.mark.parametrize(
    ("fields", "refusal"),
    [
        ({"slack_token": "xoxp-a-user-token", "slack_channel": CHANNEL}, "starts with xoxb-"),
        ({"slack_channel": CHANNEL}, "needs its bot token and channel id"),
        ({"slack_token": BOT_TOKEN}, "needs its bot token and channel id"),
        ({"slack_token": BOT_TOKEN, "slack_channel": "#payments"}, "letters and digits"),
    ],
)
def test_a_bot_route_without_a_bot_token_or_channel_is_refused(admin_client, fields, refusal):
    group = Group.objects.create(name="payments-oncall")
    response = admin_client.post(
        "/admin/integrations/notificationroute/add/",
        {
            "name": "payments",
            "kinds": ["approval_requested"],
            "group": group.pk,
            "channel": "slack_bot",
            **fields,
        },
    )
    assert response.status_code == 200
    assert refusal in response.content.decode()
    assert not NotificationRoute.objects.exists()
