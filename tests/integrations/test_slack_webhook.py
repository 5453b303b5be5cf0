"""Slack routes through an incoming webhook, against the local fake of Slack
(tests/fakes/slack_server.py): an error about the route itself (the webhook URL, its workspace
or its channel) turns the route off and flags it, as for a bot token, and what waited is sent
when it is enabled again; an error about one message gives up that message only."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core import mail

from agentops.integrations import notifications, pump
from agentops.integrations.models import Channel, MessageStatus, Notification, NotificationRoute
from runtime.models import InteractionStatus
from tests.fakes.slack_server import (
    CHANNEL,
    GENERAL,
    HOOK,
    HOOK_ERRORS,
    HOOK_SECRET,
    TEAM,
    FakeSlack,
    Hook,
)
from tests.integrations.conftest import enable_and_send_what_waited


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        yield fake


@pytest.fixture
def oncall(db: Any) -> Group:
    group = Group.objects.create(name="payments-oncall")
    group.user_set.add(User.objects.create_user("paula", "paula@example.test", "pw"))
    return group


@pytest.fixture
def hook_route(slack: FakeSlack, oncall: Group, approval_run: Any) -> NotificationRoute:
    # After the agent's registration (approval_run): the notifier starts after the newest event.
    route = NotificationRoute(
        name="payments", kinds=["approval_requested"], group=oncall, channel=Channel.SLACK
    )
    notifications.set_slack_url(route, slack.hook_url())
    notifications.save_route(route)
    return route


def test_the_webhook_posts_block_kit_to_its_channel(slack, hook_route, approval_run):
    _run, interaction = approval_run()
    pump.drain()

    assert slack.requests[0].path == f"/services/{TEAM}/{HOOK}/{HOOK_SECRET}"
    [message] = slack.posted[CHANNEL]
    assert message["blocks"][0]["text"]["text"] == "A tool call waits for approval"
    notification = Notification.objects.get()
    assert (notification.status, notification.attempts) == (MessageStatus.DELIVERED, 1)
    assert (notification.last_status_code, notification.last_response) == (200, "ok")
    interaction.refresh_from_db()
    assert interaction.status == InteractionStatus.PENDING


def remove_hook(slack: FakeSlack) -> None:
    del slack.hooks[HOOK]


def regenerate_secret(slack: FakeSlack) -> None:
    slack.hooks[HOOK].secret = "regeneratedSecret000000000"


def delete_workspace(slack: FakeSlack) -> None:
    slack.teams.discard(TEAM)


def disable_workspace(slack: FakeSlack) -> None:
    slack.disabled_teams.add(TEAM)


def delete_channel(slack: FakeSlack) -> None:
    slack.channels.discard(CHANNEL)


def archive_channel(slack: FakeSlack) -> None:
    slack.archived.add(CHANNEL)


def restrict_webhooks(slack: FakeSlack) -> None:
    slack.prohibited_teams.add(TEAM)


def restrict_general(slack: FakeSlack) -> None:
    slack.hooks[HOOK].channel = GENERAL
    slack.general_restricted.add(TEAM)


BREAKAGES = {
    "no_service": remove_hook,
    "invalid_token": regenerate_secret,
    "no_team": delete_workspace,
    "team_disabled": disable_workspace,
    "channel_not_found": delete_channel,
    "channel_is_archived": archive_channel,
    "action_prohibited": restrict_webhooks,
    "posting_to_general_channel_denied": restrict_general,
}


def repair(slack: FakeSlack, route: NotificationRoute) -> None:
    """What an admin does: the workspace and channel put right, a webhook installed anew for
    the channel, and its URL typed into the route."""
    slack.teams.add(TEAM)
    slack.disabled_teams.clear()
    slack.prohibited_teams.clear()
    slack.general_restricted.clear()
    slack.channels.add(CHANNEL)
    slack.archived.clear()
    slack.hooks["B0REINSTALLED"] = Hook(TEAM, CHANNEL, "reinstalledSecret000000000")
    notifications.set_slack_url(route, slack.hook_url("B0REINSTALLED"))
    route.save()


@pytest.fixture
def email_route(oncall: Group, hook_route: NotificationRoute) -> NotificationRoute:
    route = NotificationRoute(
        name="by email", kinds=["approval_requested"], group=oncall, channel=Channel.EMAIL
    )
    notifications.save_route(route)
    return route


@pytest.mark.usefixtures("email_route")
@pytest.mark.parametrize("error", list(BREAKAGES))
def test_a_webhook_slack_refuses_is_turned_off_flagged_and_resumes_when_fixed(
    slack, hook_route, approval_run, admin_client, error
):
    BREAKAGES[error](slack)
    approval_run("one")
    pump.drain()

    route = NotificationRoute.objects.get(pk=hook_route.pk)
    assert not route.enabled
    assert route.failing_since is not None
    assert route.disabled_reason == f"Slack refused the route: {error}"
    page = admin_client.get("/admin/integrations/notificationroute/").content.decode()
    assert f"Slack refused the route: {error}" in page
    # Not given up: it waits, with Slack's answer, and later notices wait with it.
    first = Notification.objects.get(route=route)
    assert (first.status, first.attempts, first.last_status_code, first.last_response) == (
        MessageStatus.PENDING,
        1,
        HOOK_ERRORS[error],
        error,
    )
    approval_run("two")
    pump.drain()
    assert len(slack.requests) == 1
    assert slack.posted == {}
    second = Notification.objects.exclude(pk=first.pk).get(route=route)
    assert (second.status, second.attempts) == (MessageStatus.PENDING, 0)
    # Nothing else changed: the route keeps its URL and settings, the other route sends.
    assert (route.slack_url_sealed, route.kinds) == (hook_route.slack_url_sealed, hook_route.kinds)
    assert NotificationRoute.objects.get(channel=Channel.EMAIL).enabled
    assert [m.to for m in mail.outbox] == [["paula@example.test"]] * 2

    repair(slack, route)
    enable_and_send_what_waited(admin_client, route)
    assert len(slack.posted[CHANNEL]) == 2
    assert set(Notification.objects.values_list("status", flat=True)) == {MessageStatus.DELIVERED}


@pytest.mark.parametrize("error", ["invalid_payload", "no_text", "too_many_attachments"])
def test_an_error_about_one_message_gives_up_that_message_only(
    slack, hook_route, approval_run, caplog, error
):
    slack.refuse_next_post(error)
    approval_run("one")
    pump.drain()

    refused = Notification.objects.get()
    assert (refused.status, refused.attempts, refused.last_status_code, refused.last_response) == (
        MessageStatus.FAILED,
        1,
        400,
        error,
    )
    assert f"notification {refused.pk} given up: {error}" in caplog.text
    route = NotificationRoute.objects.get()
    assert (route.enabled, route.failing_since, route.disabled_reason) == (True, None, "")
    # The route goes on: the next notice is posted.
    approval_run("two")
    pump.drain()
    assert len(slack.posted[CHANNEL]) == 1
    refused.refresh_from_db()
    assert refused.status == MessageStatus.FAILED
    assert Notification.objects.exclude(pk=refused.pk).get().status == MessageStatus.DELIVERED


def test_slacks_own_failure_is_retried_and_the_route_stays_on(slack, hook_route, approval_run):
    slack.refuse_next_post("rollup_error")
    approval_run()
    pump.drain()
    notification = Notification.objects.get()
    assert (notification.status, notification.attempts) == (MessageStatus.DELIVERED, 2)
    assert len(slack.posted[CHANNEL]) == 1
    assert NotificationRoute.objects.get().enabled
