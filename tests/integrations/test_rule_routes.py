"""Notifications routed per approval rule: what a rule governs goes to that rule's routes (the
high-value-refund rule pages the payments on-call on Slack and emails finance), everything else
to the routes without a rule; mutes still apply and each notice is made once."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

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
from runtime import clock, submit, work
from runtime.models import ApprovalRule, Interaction
from runtime.testing import run_until_idle
from tests.conftest import make_agent, one_call

HIGH = 90_000
LOW = 500


def people(group_name: str, *names: str) -> Group:
    group = Group.objects.create(name=group_name)
    for name in names:
        group.user_set.add(User.objects.create_user(name, f"{name}@example.test", "pw"))
    return group


def route(group: Group, channel: str, kinds: list[str], **fields: Any) -> NotificationRoute:
    slack_url = fields.pop("slack_url", "")
    made = NotificationRoute(
        name=f"{group.name} {channel}", kinds=kinds, group=group, channel=channel, **fields
    )
    if slack_url:
        notifications.set_slack_url(made, slack_url)
    notifications.save_route(made)
    return made


@pytest.fixture
def desk(define: Any, receiver: Any) -> dict[str, Any]:
    """On call for everything (email), and the high-value-refund rule with its own routes:
    Slack for the payments on-call, email for finance."""
    on_call = people("on-call", "olga", "oscar")
    payments = people("payments-oncall", "paula")
    finance = people("finance", "fred", "fiona")
    define(make_agent(one_call("refund")))
    rule = ApprovalRule.objects.create(
        name="high-value refunds",
        agent="clerk",
        tool="refund",
        condition={">": [{"var": "amount_cents"}, 50_000]},
        approver_group=finance,
        escalation_group=finance,
        escalate_after=dt.timedelta(minutes=5),
    )
    kinds = ["approval_requested", "approval_escalated", "approval_expiring"]
    route(on_call, Channel.EMAIL, [*kinds, "needs_attention"])
    route(payments, Channel.SLACK, kinds, rule=rule, slack_url=receiver.url)
    route(finance, Channel.EMAIL, kinds, rule=rule)
    return {"rule": rule, "define": define}


def refund(desk: dict[str, Any], amount: int) -> Interaction:
    # The same agent, its model scripted to ask for this amount (registered once, by `desk`).
    script = one_call("refund", {"order_id": "A1", "amount_cents": amount})
    desk["define"](make_agent(script), register_them=False)
    run = run_until_idle(submit("clerk", f"refund {amount}", actor="alice").pk)
    return Interaction.objects.get(run=run)


def emailed() -> list[str]:
    return sorted(message.to[0] for message in mail.outbox)


def test_what_a_rule_governs_goes_to_its_routes_only(desk, receiver):
    interaction = refund(desk, HIGH)
    assert interaction.work.rule == desk["rule"]
    pump.drain()

    assert len(receiver.received) == 1
    posted = json.loads(receiver.received[0].body)
    assert posted["blocks"][0]["text"]["text"] == "A tool call waits for approval"
    assert f"/interactions/{interaction.pk}/" in posted["blocks"][-1]["elements"][0]["url"]
    assert emailed() == ["fiona@example.test", "fred@example.test"]


def test_what_no_rule_governs_falls_back_to_the_routes_without_one(desk, receiver):
    interaction = refund(desk, LOW)
    assert interaction.work.rule is None
    pump.drain()
    assert receiver.received == []
    assert emailed() == ["olga@example.test", "oscar@example.test"]


def test_a_kind_the_rule_does_not_route_falls_back(desk, receiver):
    for rule_route in NotificationRoute.objects.filter(rule=desk["rule"]):
        rule_route.kinds = ["approval_escalated"]
        rule_route.save()
    refund(desk, HIGH)
    pump.drain()
    assert receiver.received == []
    assert emailed() == ["olga@example.test", "oscar@example.test"]


def test_the_rules_escalation_reaches_its_routes(desk, receiver):
    with clock.frozen() as frozen:
        interaction = refund(desk, HIGH)
        pump.drain()
        mail.outbox.clear()
        frozen.advance(301)
        assert work.fire_due_timers() == 1
        pump.drain()
    assert [json.loads(r.body)["blocks"][0]["text"]["text"] for r in receiver.received] == [
        "A tool call waits for approval",
        "An approval was escalated",
    ]
    assert emailed() == ["fiona@example.test", "fred@example.test"]
    assert mail.outbox[0].subject == "[AgentOps] An approval was escalated: refund"
    assert f"/interactions/{interaction.pk}/" in mail.outbox[0].body


def test_mutes_apply_to_rule_routes(desk, receiver):
    fred = User.objects.get(username="fred")
    NotificationPreference.objects.create(user=fred, muted_kinds=["approval_requested"])
    paula = User.objects.get(username="paula")
    NotificationPreference.objects.create(user=paula, muted_kinds=["approval_requested"])
    refund(desk, HIGH)
    pump.drain()
    # Paula is the whole of the Slack route's group: no post. Fred muted it: no email.
    assert receiver.received == []
    assert emailed() == ["fiona@example.test"]


def test_each_notice_is_made_and_sent_once(desk, receiver):
    refund(desk, HIGH)
    pump.drain()
    pump.drain()
    notifications.dispatch(100)
    assert len(receiver.received) == 1
    assert len(mail.outbox) == 2
    assert Notification.objects.count() == 3
    assert set(Notification.objects.values_list("status", flat=True)) == {MessageStatus.DELIVERED}


def test_a_deleted_rule_takes_its_routes_and_its_notices_fall_back(desk, receiver):
    with clock.frozen() as frozen:
        interaction = refund(desk, HIGH)
        pump.drain()
        mail.outbox.clear()
        desk["rule"].delete()
        assert not NotificationRoute.objects.filter(name__startswith="payments").exists()
        assert not NotificationRoute.objects.filter(name__startswith="finance").exists()
        # The item keeps the policy it asked under, timers included; it has no rule now.
        frozen.advance(301)
        assert work.fire_due_timers() == 1
        pump.drain()
    assert len(receiver.received) == 1  # only the request, from before the deletion
    assert emailed() == ["olga@example.test", "oscar@example.test"]
    assert mail.outbox[0].subject == "[AgentOps] An approval was escalated: refund"
    assert Interaction.objects.get(pk=interaction.pk).work.rule is None


def test_the_admin_makes_a_route_for_a_rule(desk, admin_client):
    finance = Group.objects.get(name="finance")
    response = admin_client.post(
        "/admin/integrations/notificationroute/add/",
        {
            "name": "finance escalations",
            "kinds": ["approval_escalated"],
            "group": finance.pk,
            "rule": desk["rule"].pk,
            "channel": "email",
            "enabled": "on",
        },
    )
    assert response.status_code == 302
    made = NotificationRoute.objects.get(name="finance escalations")
    assert made.rule == desk["rule"]
    listing = admin_client.get(
        f"/admin/integrations/notificationroute/?rule__id__exact={made.rule_id}"
    )
    assert "finance escalations" in listing.content.decode()
