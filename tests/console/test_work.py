"""The approval policy on the decision page and the inbox: the rule and the quorum shown,
claims, edits from the schema's form, the password asked again for a high-risk approval, the
inbox's filters; and the API's high-risk scope."""

from __future__ import annotations

import datetime as dt
from html import unescape

import pytest
from django.contrib.auth.models import Group, User
from django.utils.html import strip_tags

from runtime.models import ApprovalRule, Event, InteractionStatus, WorkItem
from tests.api.conftest import Api, error_of, make_account, make_token
from tests.console.conftest import htmx
from tests.console.test_decisions import desk, refund_waiting  # noqa: F401 - fixture
from tests.support.personas import console_user, logged_in

MESSAGE = "Please refund $20 of order 1003."


def text(html: bytes) -> str:
    return " ".join(unescape(strip_tags(html.decode())).split())


@pytest.fixture
def operators(desk):  # noqa: F811 - the fixture
    users = [console_user("operator")]
    olga = User.objects.create(username="olga")
    olga.set_password("olga's password")
    olga.save()
    olga.groups.add(Group.objects.get(name="operators"))
    return [*users, olga]


def make_rule(**fields):
    fields.setdefault("approver_group", Group.objects.get(name="operators"))
    return ApprovalRule.objects.create(
        name="refunds",
        agent="refund-desk",
        tool="refund_order",
        condition={">": [{"var": "amount_cents"}, 1000]},
        **fields,
    )


def test_it_shows_the_rule_the_quorum_and_who_may_still_approve(operators):
    make_rule(quorum=2)
    approval = refund_waiting(MESSAGE)
    client = logged_in(operators[0])
    client.post(f"/interactions/{approval.pk}/respond/", {"decision": "approve"})
    page = text(client.get(f"/interactions/{approval.pk}/").content)
    assert "Rule refunds: rule 'refunds' applies: its condition amount_cents > 1000 holds" in page
    assert "1 of 2: operator" in page
    assert "May still approveolga" in page
    approval.refresh_from_db()
    assert approval.status == InteractionStatus.PENDING


def test_a_claim_shows_to_everyone_and_a_second_claim_is_refused(operators):
    make_rule()
    approval = refund_waiting(MESSAGE)
    first, second = (logged_in(u) for u in operators)
    first.post(f"/interactions/{approval.pk}/claim/", **htmx())
    assert "operator is on it" in text(second.get(f"/interactions/{approval.pk}/").content)
    refused = second.post(f"/interactions/{approval.pk}/claim/", **htmx())
    assert refused.status_code == 409
    assert WorkItem.objects.get(pk=approval.pk).claimed_by == "operator"
    link = f"/interactions/{approval.pk}/"
    assert link in first.get("/?show=mine").content.decode()
    assert link not in second.get("/?show=mine").content.decode()
    assert link not in second.get("/?show=unassigned").content.decode()
    assert link in second.get("/").content.decode()


def test_an_edit_from_the_schema_form_is_validated_and_recorded(operators):
    make_rule()
    approval = refund_waiting(MESSAGE)
    client = logged_in(operators[0])
    before = Event.objects.count()
    form = {"arg-order_number": "1003", "arg-amount_cents": "lots", "arg-reason": "r"}
    bad = client.post(f"/interactions/{approval.pk}/edit/", form, **htmx())
    assert bad.status_code == 400
    assert "'lots' is not a valid integer" in text(bad.content)
    assert Event.objects.count() == before
    form["arg-amount_cents"] = "1500"
    client.post(f"/interactions/{approval.pk}/edit/", form, **htmx())
    item = WorkItem.objects.get(pk=approval.pk)
    assert item.arguments["amount_cents"] == 1500
    assert item.edited_by == "operator"
    page = text(client.get(f"/interactions/{approval.pk}/").content)
    assert "Edited by operator" in page and "amount_cents" in page


def test_an_approver_without_the_edit_permission_cannot_edit(operators):
    make_rule(approver_group=None)
    approval = refund_waiting(MESSAGE)
    approver = logged_in(console_user("approver"))
    response = approver.post(f"/interactions/{approval.pk}/edit/", {"arg-amount_cents": "1"})
    assert response.status_code == 403
    assert WorkItem.objects.get(pk=approval.pk).arguments is None


def test_a_high_risk_approval_asks_for_the_password_again(operators):
    make_rule(high_risk=True)
    approval = refund_waiting(MESSAGE)
    olga = logged_in(operators[1])
    page = text(olga.get(f"/interactions/{approval.pk}/").content)
    assert "sign in again to approve it" in page
    url = f"/interactions/{approval.pk}/respond/"
    refused = olga.post(url, {"decision": "approve", "confirm": "yes"}, **htmx())
    assert refused.status_code == 409
    assert "sign in again" in text(refused.content)
    wrong = olga.post(url, {"decision": "approve", "confirm": "yes", "password": "no"}, **htmx())
    assert "The password is not right" in text(wrong.content)
    approval.refresh_from_db()
    assert approval.status == InteractionStatus.PENDING
    olga.post(url, {"decision": "approve", "confirm": "yes", "password": "olga's password"})
    approval.refresh_from_db()
    assert approval.status == InteractionStatus.ANSWERED


def test_the_urgent_filter_shows_what_is_about_to_expire(operators):
    make_rule(expires_after=dt.timedelta(minutes=30), expiry_reason="too late")
    soon = refund_waiting(MESSAGE)
    client = logged_in(operators[0])
    urgent = client.get("/?show=urgent").content.decode()
    assert f"/interactions/{soon.pk}/" in urgent
    assert "expires" in urgent


def test_the_api_needs_the_high_risk_scope_for_a_high_risk_approval(operators):
    make_rule(high_risk=True)
    approval = refund_waiting(MESSAGE)
    account = make_account("bot")
    account.user.groups.add(Group.objects.get(name="operators"))
    path = f"/interactions/{approval.pk}/respond"
    plain = Api(make_token(account, ["respond"])).post(path, {"approved": True})
    assert plain.status_code == 409
    assert error_of(plain) == "reauthentication_required"
    approval.refresh_from_db()
    assert approval.status == InteractionStatus.PENDING
    strong = Api(make_token(account, ["respond", "respond_high_risk"])).post(
        path, {"approved": True}
    )
    assert strong.status_code == 200


def test_the_run_page_and_the_audit_log_show_the_receipt(operators):
    make_rule(quorum=2)
    approval = refund_waiting(MESSAGE)
    first, second = (logged_in(u) for u in operators)
    first.post(f"/interactions/{approval.pk}/respond/", {"decision": "approve"})
    second.post(f"/interactions/{approval.pk}/respond/", {"decision": "approve"})
    receipt = WorkItem.objects.get(pk=approval.pk).interaction.receipt
    expected = f"Receipt {receipt.digest[:16]}: approved by olga, operator under rule refunds."
    assert expected in text(first.get(f"/runs/{approval.run_id}/").content)
    assert expected in text(first.get("/audit/").content)
