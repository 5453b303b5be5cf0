"""The decision page and the inbox, with the facts the demo's refund_order declares.

The refund desk runs on its scripted model over the demo's orders: every approval here is one
the agent really asked for, with arguments that came from the customer or the operator.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace
from html import unescape

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agentops.decisions import RELATED_SCAN
from demo import agents
from demo.brain import RefundDeskBrain
from demo.models import Customer, Order
from demo.seed import CUSTOMERS
from runtime import respond, submit
from runtime.models import Interaction, InteractionKind, InteractionStatus, Run, RunStatus
from runtime.testing import run_until_idle
from tests.console.conftest import htmx
from tests.console.test_inbox import QUERIES_BEFORE_QUEUES


@pytest.fixture
def desk(define):
    define(replace(agents.refund_desk_v2, llm=RefundDeskBrain(outages=Counter())))
    placed = timezone.now()
    for name, email, number, item, total in CUSTOMERS:
        customer = Customer.objects.create(name=name, email=email)
        Order.objects.create(
            number=number, customer=customer, item=item, total_cents=total, placed_at=placed
        )


def pending(run: Run) -> Interaction:
    return Interaction.objects.get(run=run, status=InteractionStatus.PENDING)


def refund_waiting(message: str, *answers: str) -> Interaction:
    """Submit `message`, answer the agent's questions with `answers`, until it asks to refund."""
    run = run_until_idle(submit("refund-desk", message, actor="support").pk)
    for answer in answers:
        question = pending(run)
        assert question.kind == InteractionKind.QUESTION, question.payload
        respond(question.pk, {"answer": answer}, actor="operator")
        run = run_until_idle(run.pk)
    approval = pending(run)
    assert approval.tool_name == "refund_order"
    return approval


def page(client, interaction: Interaction) -> str:
    return client.get(f"/interactions/{interaction.pk}/").content.decode()


def text(html: str) -> str:
    """What a person reads: the text without tags, entities decoded, spaces collapsed."""
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


def test_it_shows_the_facts_of_the_order_fetched_now(desk, as_user):
    approval = refund_waiting("Please refund $20 of order 1003, it arrived broken.")
    shown = text(page(as_user("approver"), approval))
    assert "amount_cents $20.00 2000" in shown  # the amount in its currency, the raw value beside
    assert "Customer Chen Wei <chen@example.com>" in shown
    assert "Order total $139.00" in shown
    assert "Refunded so far $0.00" in shown
    assert "Refunded after this refund $20.00" in shown
    assert "Left to refund after it $119.00" in shown
    assert "fetched" in shown


def test_it_says_where_each_argument_came_from(desk, as_user):
    approval = refund_waiting("I want a refund please.", "It is order 1003", "Make it $20")
    shown = text(page(as_user("approver"), approval))
    assert "1003 in the operator's answer to “Which order number is this about?”" in shown
    assert "$20.00 2000 in the operator's answer to “How much of order 1003 should I refund?" in (
        shown
    )
    # The order number also appears in the results of the lookups, listed after the answer.
    assert "the result of get_order" in shown


def test_it_says_when_the_agent_supplied_a_value_nobody_wrote(world, as_user):
    run = world.run("waiting")  # refund {"order_id": "A1", "amount_cents": 500}
    shown = text(page(as_user("approver"), world.pending(run)))
    assert "A1 in the customer's message" in shown
    assert "500 not in any earlier message: the agent supplied it" in shown


def test_s_related_it_warns_of_another_refund_of_the_same_order(desk, as_user):
    first = refund_waiting("Please refund $20 of order 1003.")
    second = refund_waiting("Refund $15 of order 1003 please.")
    other = refund_waiting("Refund $10 of order 1004.")
    client = as_user("approver")

    shown = text(page(client, second))
    assert "⚠ 1 other call of refund_order on order 1003" in shown
    assert "amount_cents $20.00 waiting for approval" in shown
    alone = text(page(client, other))
    assert "No other call of refund_order on order 1004" in alone
    assert "None pending, and none in the last 30 days." in alone

    # Once the first is approved and made, the second's page says so.
    respond(first.pk, {"approved": True, "reason": ""}, actor="approver")
    run_until_idle(first.run_id)
    assert "amount_cents $20.00 approved by approver, done" in text(page(client, second))

    inbox = text(client.get("/").content.decode())
    assert "⚠ 1 other call on order 1003: amount_cents $20.00 (approved by approver, done)" in inbox
    assert "on order 1004" in inbox


def test_it_asks_to_confirm_a_high_risk_refund_and_refuses_without(desk, as_user):
    approval = refund_waiting("Please refund $150 of order 1007.")
    client = as_user("approver")
    assert 'name="confirm"' in page(client, approval)
    url = f"/interactions/{approval.pk}/respond/"

    refused = client.post(url, {"decision": "approve", "reason": ""}, **htmx())
    assert refused.status_code == 400
    assert "marked high-risk: tick the confirmation" in refused.content.decode()
    approval.refresh_from_db()
    assert approval.status == InteractionStatus.PENDING
    assert Run.objects.get(pk=approval.run_id).status == RunStatus.WAITING

    # A rejection needs no confirmation; an approval with it goes through.
    done = client.post(url, {"decision": "approve", "reason": "", "confirm": "yes"})
    assert done.status_code == 302
    approval.refresh_from_db()
    assert approval.response == {"approved": True, "reason": ""}


def test_it_does_not_ask_to_confirm_a_small_refund(desk, as_user):
    approval = refund_waiting("Please refund $20 of order 1003.")
    assert 'name="confirm"' not in page(as_user("approver"), approval)


def test_it_approves_and_opens_the_next_approval(desk, as_user):
    first = refund_waiting("Please refund $20 of order 1003.")
    second = refund_waiting("Refund $10 of order 1004.")
    client = as_user("approver")

    response = client.post(
        f"/interactions/{first.pk}/respond/?then=next", {"decision": "approve", "reason": ""}
    )
    assert response.status_code == 302
    assert response["Location"] == f"/interactions/{second.pk}/"
    following = client.get(response["Location"]).content.decode()
    assert "Approved refund_order: the run continues." in following  # the notice travels along

    # htmx: the browser is sent on, and the last one leads back to the inbox.
    response = client.post(
        f"/interactions/{second.pk}/respond/?then=next",
        {"decision": "approve", "reason": ""},
        **htmx(),
    )
    assert response.status_code == 204
    assert response["HX-Redirect"] == "/"
    assert not Interaction.objects.filter(status=InteractionStatus.PENDING).exists()


def test_it_builds_the_decision_page_with_a_fixed_number_of_queries(
    desk, as_user, django_assert_num_queries
):
    client = as_user("approver")
    approval = refund_waiting("Please refund $20 of order 1003.")
    client.get(f"/interactions/{approval.pk}/")  # warm: sessions, permissions
    with django_assert_num_queries(DECISION_QUERIES - 1):  # no other call: no operations read
        client.get(f"/interactions/{approval.pk}/")
    for amount in range(11, 16):
        refund_waiting(f"Please refund ${amount} of order 1003.")
    with django_assert_num_queries(DECISION_QUERIES):
        html = client.get(f"/interactions/{approval.pk}/").content.decode()
    assert "⚠ 5 other calls of refund_order on order 1003" in text(html)


def test_it_builds_the_inbox_with_related_calls_in_a_fixed_number_of_queries(
    desk, as_user, django_assert_num_queries
):
    client = as_user("approver")
    refund_waiting("Please refund $20 of order 1003.")
    client.get("/")
    with django_assert_num_queries(INBOX_QUERIES - 1):  # no other call: no operations read
        client.get("/")
    for amount in range(11, 16):
        refund_waiting(f"Please refund ${amount} of order 1003.")
    with django_assert_num_queries(INBOX_QUERIES):
        html = client.get("/").content.decode()
    assert text(html).count("⚠ 5 other calls on order 1003") == 6


def test_the_related_calls_scan_reads_of_each_run_only_what_names_its_code(desk, as_user):
    """The scan takes up to RELATED_SCAN approvals at every inbox render: of their runs, only the
    agent and version (which name the code that says a call's subject), not whole rows."""
    for amount in range(11, 14):
        refund_waiting(f"Please refund ${amount} of order 1003.")
    with CaptureQueriesContext(connection) as captured:
        html = as_user("approver").get("/").content.decode()
    assert text(html).count("⚠ 2 other calls on order 1003") == 3
    (scan,) = [q["sql"] for q in captured.captured_queries if f"LIMIT {RELATED_SCAN}" in q["sql"]]
    run_columns = set(re.findall(r'"agentops_run"\."(\w+)"', scan))
    assert run_columns == {"id", "agent", "version"}


# Session, user, permissions (one query: agentops.backends), the interaction, operations, the
# session's earlier runs, the related interactions and their operations, the facts (the order,
# the refunds sum), last event, and the approvals counted so far under the approval policy.
DECISION_QUERIES = 12
# The inbox's own with approvals in its only queue that is not empty (tests/console/test_inbox.py),
# and the related calls with their subjects.
INBOX_QUERIES = QUERIES_BEFORE_QUEUES + 1 + 2


def test_it_traces_arguments_to_what_came_before_the_call_only(desk, as_user):
    approval = refund_waiting("Please refund $20 of order 1003.")
    respond(approval.pk, {"approved": True, "reason": ""}, actor="approver")
    run_until_idle(approval.run_id)
    shown = text(page(as_user("approver"), approval))
    # The refund's own result (and the final answer) repeat the amount: they do not count.
    assert "the result of refund_order" not in shown
    assert "$20.00 2000 in the customer's message" in shown
    # The facts are fetched while the decision is open only: afterwards they would be history.
    assert "The facts" not in shown
