"""Slack and email notifications: routed per group, muted per person, each sent once, with a
link to the console page that never approves anything by itself."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Group, User
from django.core import mail

from agentops.integrations import notifications, pump
from agentops.integrations.models import (
    Channel,
    MessageStatus,
    Notification,
    NotificationPreference,
    NotificationRoute,
)
from runtime import store
from runtime.models import InteractionStatus, RunStatus
from tests.integrations.receiver import Answer, Receiver


@pytest.fixture
def approvers(db):
    group = Group.objects.create(name="on-call")
    people = [
        User.objects.create_user(name, f"{name}@example.test", "pw")
        for name in ("alice", "bob", "carol")
    ]
    group.user_set.add(*people)
    User.objects.create_user("outsider", "outsider@example.test", "pw")
    return group


def route(group, channel, kinds, slack_url=""):
    made = NotificationRoute(name=f"{channel} route", kinds=kinds, group=group, channel=channel)
    if slack_url:
        notifications.set_slack_url(made, slack_url)
    notifications.save_route(made)
    return made


def test_slack_gets_block_kit_with_tool_arguments_agent_and_link(approvers, approval_run, receiver):
    route(approvers, Channel.SLACK, ["approval_requested"], receiver.url)
    _run, interaction = approval_run()
    pump.drain()

    assert len(receiver.received) == 1
    posted = json.loads(receiver.received[0].body)
    assert receiver.received[0].headers["Content-Type"] == "application/json"
    text = json.dumps(posted["blocks"])
    assert posted["blocks"][0] == {
        "type": "header",
        "text": {"type": "plain_text", "text": "A tool call waits for approval", "emoji": False},
    }
    assert "clerk v1" in text and "refund" in text
    assert {"type": "plain_text", "text": "order_id", "emoji": False} in posted["blocks"][2][
        "fields"
    ]
    button = posted["blocks"][-1]["elements"][0]
    assert button["url"] == f"https://agentops.example.test/interactions/{interaction.pk}/"
    assert posted["text"].startswith("A tool call waits for approval")
    # A notification is not a decision.
    interaction.refresh_from_db()
    assert interaction.status == InteractionStatus.PENDING
    assert Notification.objects.get().status == MessageStatus.DELIVERED


def test_agent_text_reaches_slack_as_plain_text_only(approvers, receiver, define):
    from runtime import submit
    from runtime.testing import run_until_idle
    from tests.conftest import make_agent, one_call

    hostile = {"order_id": "<https://evil.test|click to approve> <!channel>", "amount_cents": 1}
    define(make_agent(one_call("refund", hostile)))
    route(approvers, Channel.SLACK, ["approval_requested"], receiver.url)
    run_until_idle(submit("clerk", "refund", actor="alice").pk)
    pump.drain()
    posted = json.loads(receiver.received[0].body)
    for block in posted["blocks"][2:-1]:
        for item in block.get("fields", [block.get("text")]):
            assert item["type"] == "plain_text"


def test_email_goes_to_each_member_once_with_the_decision_link(approvers, approval_run):
    route(approvers, Channel.EMAIL, ["approval_requested"])
    _run, interaction = approval_run()
    pump.drain()
    pump.drain()  # a second sweep sends nothing again

    assert sorted(m.to[0] for m in mail.outbox) == [
        "alice@example.test",
        "bob@example.test",
        "carol@example.test",
    ]
    message = mail.outbox[0]
    assert message.subject == "[AgentOps] A tool call waits for approval: refund"
    assert f"https://agentops.example.test/interactions/{interaction.pk}/" in message.body
    assert "order_id: A1" in message.body
    assert Notification.objects.count() == 3


def test_a_person_who_muted_the_kind_gets_nothing(approvers, approval_run):
    route(approvers, Channel.EMAIL, ["approval_requested", "needs_attention"])
    bob = User.objects.get(username="bob")
    NotificationPreference.objects.create(user=bob, muted_kinds=["approval_requested"])
    approval_run()
    pump.drain()
    assert sorted(m.to[0] for m in mail.outbox) == ["alice@example.test", "carol@example.test"]


def test_slack_is_skipped_when_every_member_muted_the_kind(approvers, approval_run, receiver):
    route(approvers, Channel.SLACK, ["approval_requested"], receiver.url)
    for user in approvers.user_set.all():
        NotificationPreference.objects.create(user=user, muted_kinds=["approval_requested"])
    approval_run()
    pump.drain()
    assert not receiver.received
    assert not Notification.objects.exists()


def test_a_route_sends_only_its_kinds(approvers, approval_run):
    route(approvers, Channel.EMAIL, ["needs_attention"])
    approval_run()
    pump.drain()
    assert mail.outbox == []


def test_a_run_needing_attention_links_to_the_run(approvers, approval_run):
    route(approvers, Channel.EMAIL, ["needs_attention"])
    run, _ = approval_run()
    store.event(run.pk, "blocked", reason="uncertain_operation", message="refund may have run")
    pump.drain()
    assert len(mail.outbox) == 3
    assert f"https://agentops.example.test/runs/{run.pk}/" in mail.outbox[0].body
    assert "refund may have run" in mail.outbox[0].body


def test_escalation_events_plug_into_the_kinds_table(approvers, approval_run):
    """The approval-policy work emits `approval_escalated`; the table routes it already."""
    route(approvers, Channel.EMAIL, ["approval_escalated"])
    run, interaction = approval_run()
    store.event(run.pk, "approval_escalated", interaction=str(interaction.pk), tool="refund")
    pump.drain()
    assert len(mail.outbox) == 3
    assert mail.outbox[0].subject == "[AgentOps] An approval was escalated: refund"


def test_a_refusal_slack_does_not_name_is_given_up_and_the_route_stays_on(approvers, approval_run):
    # Not one of Slack's codes (a proxy's page): about this message, as far as anyone can tell.
    slack = Receiver(lambda _: Answer(404, b"<html>Not Found</html>")).up()
    try:
        made = route(approvers, Channel.SLACK, ["approval_requested"], slack.url)
        approval_run()
        pump.drain()
    finally:
        slack.down()
    notification = Notification.objects.get()
    assert notification.status == MessageStatus.FAILED
    assert notification.attempts == 1
    assert notification.last_response == "<html>Not Found</html>"
    made.refresh_from_db()
    assert (made.enabled, made.failing_since, made.disabled_reason) == (True, None, "")


def test_slack_rate_limit_is_retried(approvers, approval_run):
    answers = iter([Answer(429, b"rate_limited", {"Retry-After": "0"}), Answer(200, b"ok")])
    slack = Receiver(lambda _: next(answers)).up()
    try:
        route(approvers, Channel.SLACK, ["approval_requested"], slack.url)
        approval_run()
        pump.drain()
    finally:
        slack.down()
    notification = Notification.objects.get()
    assert notification.status == MessageStatus.DELIVERED
    assert notification.attempts == 2
    assert len(slack.received) == 2


def test_answering_by_the_link_needs_a_login_and_a_form(approvers, approval_run, client):
    route(approvers, Channel.EMAIL, ["approval_requested"])
    run, interaction = approval_run()
    pump.drain()
    link = next(line for line in mail.outbox[0].body.splitlines() if "https://" in line)
    path = link.split("https://agentops.example.test", 1)[1]
    response = client.get(path)
    assert response.status_code == 302
    assert "/accounts/login/" in response["Location"]
    client.force_login(User.objects.get(username="alice"))
    assert client.get(path).status_code in (200, 403)
    interaction.refresh_from_db()
    run.refresh_from_db()
    assert interaction.status == InteractionStatus.PENDING
    assert run.status == RunStatus.WAITING


def test_an_escalation_fired_by_the_sweep_reaches_the_route(approvers, approval_run):
    import datetime as dt

    from runtime import clock, work
    from runtime.models import ApprovalRule

    ApprovalRule.objects.create(
        name="refunds",
        agent="clerk",
        tool="refund",
        escalation_group=approvers,
        escalate_after=dt.timedelta(minutes=5),
    )
    route(approvers, Channel.EMAIL, ["approval_escalated"])
    with clock.frozen() as frozen:
        _run, interaction = approval_run()
        frozen.advance(301)
        assert work.fire_due_timers() == 1
    pump.drain()
    assert len(mail.outbox) == 3
    assert mail.outbox[0].subject == "[AgentOps] An approval was escalated: refund"
    assert f"/interactions/{interaction.pk}/" in mail.outbox[0].body
