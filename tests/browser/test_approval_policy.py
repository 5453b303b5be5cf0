"""The approval policy in the browser, with the real worker: two operators meeting a quorum,
each seeing the other's approval live; and an edit before approving that the model is told of."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Group, Permission, User

from demo.models import Refund
from runtime.models import ApprovalReceipt, ApprovalRule, Operation, RunStatus
from tests.browser.browsing import click_for_answer

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

REFUND_1001 = "Please refund $40 of order 1001, the bowl arrived cracked."


def finance(*usernames: str) -> Group:
    group = Group.objects.create(name="finance")
    for username in usernames:
        User.objects.get(username=username).groups.add(group)
    return group


def test_two_operators_meet_a_quorum_each_seeing_the_other_live(desk, people, stack):
    ApprovalRule.objects.create(
        name="refunds need two",
        agent="refund-desk",
        tool="refund_order",
        condition={">": [{"var": "amount_cents"}, 1000]},
        approver_group=finance("alice", "bob"),
        quorum=2,
    )
    run = desk.submit(REFUND_1001)
    desk.wait_status(run, RunStatus.WAITING)
    approval = desk.pending(run)
    alice, bob = people(stack, "alice"), people(stack, "bob")
    path = f"/interactions/{approval.pk}/"
    alice_page, bob_page = alice.open(path), bob.open(path)
    bob.mark()
    for page in (alice_page, bob_page):
        assert "0 of 2" in page.locator(".policy .quorum").inner_text()
        assert "refunds need two" in page.locator(".policy .why").inner_text()

    answer = click_for_answer(
        alice_page, alice_page.get_by_role("button", name="Approve", exact=True), "/respond/"
    )
    assert answer.status == 200
    assert "needs more approvers" in answer.text()
    # Bob's page shows alice's approval without a reload.
    bob_page.locator(".policy .quorum", has_text="1 of 2").wait_for()
    assert "alice" in bob_page.locator(".policy .approved-by").inner_text()
    assert bob.still_same_document()
    assert desk.wait_status(run, RunStatus.WAITING).status == RunStatus.WAITING
    assert desk.refunds() == 0
    bob.shot("one-of-two")

    click_for_answer(
        bob_page, bob_page.get_by_role("button", name="Approve", exact=True), "/respond/"
    )
    desk.wait_status(run, RunStatus.COMPLETED)
    # Alice's page shows the decision and its receipt, live.
    alice_page.locator(".decided", has_text="Approved by bob").wait_for()
    alice_page.locator(".receipt", has_text="alice, bob").wait_for()
    alice.shot("receipt")
    assert desk.refunds("1001") == 1
    receipt = ApprovalReceipt.objects.get(pk=approval.pk)
    assert receipt.contents["approvers"] == ["alice", "bob"]
    assert receipt.used_at is not None


def test_an_operator_edits_the_amount_then_approves_and_the_model_is_told(desk, people, stack):
    ApprovalRule.objects.create(
        name="refunds", agent="refund-desk", tool="refund_order", approver_group=finance("alice")
    )
    User.objects.get(username="alice").user_permissions.add(
        Permission.objects.get(codename="edit_arguments")
    )
    run = desk.submit(REFUND_1001)
    desk.wait_status(run, RunStatus.WAITING)
    approval = desk.pending(run)
    alice = people(stack, "alice")
    page = alice.open(f"/interactions/{approval.pk}/")

    page.locator("details.edit summary").click()
    amount = page.get_by_label("Amount Cents")
    assert amount.input_value() == "4000"
    amount.fill("a lot")
    answer = click_for_answer(page, page.get_by_role("button", name="Save the edit"), "/edit/")
    assert answer.status == 400
    page.locator(".edit-form .error", has_text="not a valid integer").wait_for()
    page.get_by_label("Amount Cents").fill("2500")
    click_for_answer(page, page.get_by_role("button", name="Save the edit"), "/edit/")
    page.locator(".policy .edited", has_text="Edited by alice").wait_for()
    changed = page.locator(".arguments-side-by-side tr.changed")
    assert "4000" in changed.locator(".proposed").inner_text()
    assert "2500" in changed.locator(".approved").inner_text()
    alice.shot("edited")

    click_for_answer(page, page.get_by_role("button", name="Approve", exact=True), "/respond/")
    finished = desk.wait_status(run, RunStatus.COMPLETED)
    refund = Refund.objects.get()
    assert refund.amount_cents == 2500
    op = Operation.objects.get(run=run, name="refund_order")
    assert op.input["arguments"]["amount_cents"] == 4000
    assert op.input["executed_arguments"]["amount_cents"] == 2500
    told = [
        json.loads(block["content"])
        for message in finished.transcript
        for block in (message["content"] if isinstance(message["content"], list) else [])
        if block.get("type") == "tool_result" and "operator_edited_arguments" in block["content"]
    ]
    assert told[0]["operator_edited_arguments"] == {
        "amount_cents": {"proposed": 4000, "approved": 2500}
    }
    # The model's answer reflects what ran, not what it proposed.
    assert "Refunded $25.00" in finished.output
    assert "An operator changed amount_cents" in finished.output
    page.locator(".policy .executed", has_text="2500").wait_for()
    alice.shot("executed")
