"""An operator's day: decide fast with the keyboard, with the facts on one screen, on any device.

Every page the console has, in the states these tests reach, is checked with axe-core (no
serious or critical violation), at 1440 px and at 390 px (a phone: no horizontal scroll of the
page), and photographed at both widths in var/screenshots/browser/.
"""

from __future__ import annotations

import re

import pytest

from runtime import respond
from runtime.models import Interaction, InteractionStatus, RunStatus
from tests.browser.a11y import page_overflow, violations
from tests.browser.browsing import text_of

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

DESKTOP = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}
RLO = "\u202e"


def waiting_approval(desk, message: str) -> Interaction:
    run = desk.submit(message)
    desk.wait_status(run, RunStatus.WAITING)
    return desk.pending(run)


class Keys:
    """The keys a person presses, counted."""

    def __init__(self, page) -> None:
        self.page = page
        self.count = 0

    def press(self, key: str) -> None:
        self.count += 1
        self.page.keyboard.press(key)


def test_it_approves_from_the_inbox_in_two_keystrokes(desk, people, stack):
    approval = waiting_approval(desk, "Please refund $20 of order 1003, it arrived broken.")
    alice = people(stack, "alice")
    page = alice.open("/")
    # Focus lands on the oldest item's action, so Enter opens it.
    assert page.evaluate("document.activeElement.id") == f"item-{approval.pk}"
    keys = Keys(page)
    with page.expect_navigation():
        keys.press("Enter")
    alice.wait_live()
    assert page.evaluate("document.activeElement.tagName") == "H1"
    with page.expect_response(lambda r: r.url.endswith("/respond/")):
        keys.press("a")
    page.locator(".decided", has_text="Approved by alice").wait_for()
    assert keys.count == 2
    # Focus lands on what was decided (once the answer has settled), not on the page body.
    page.locator(".decided:focus").wait_for(timeout=5000)
    approval.refresh_from_db()
    assert approval.response == {"approved": True, "reason": ""}
    # The notice stays in its own area through the live updates of the run going on.
    desk.wait_status(approval.run, RunStatus.COMPLETED)
    page.locator(".decided", has_text="Follow the run").wait_for()
    notices = page.locator("main .notice")
    assert notices.count() == 1
    assert notices.inner_text() == "Approved refund_order: the run continues."
    alice.shot("approved-by-keyboard")


def test_it_asks_once_more_for_a_high_risk_refund_within_four_keystrokes(desk, people, stack):
    approval = waiting_approval(desk, "Please refund $150 of order 1007.")
    alice = people(stack, "alice")
    page = alice.open("/")
    keys = Keys(page)
    with page.expect_navigation():
        keys.press("Enter")
    alice.wait_live()
    keys.press("a")  # a high-risk call: "a" goes to the confirmation, and approves nothing
    assert page.evaluate("document.activeElement.name") == "confirm"
    assert Interaction.objects.get(pk=approval.pk).status == InteractionStatus.PENDING
    alice.shot("high-risk-confirmation")
    keys.press("Space")
    with page.expect_response(lambda r: r.url.endswith("/respond/")):
        keys.press("Enter")
    page.locator(".decided", has_text="Approved by alice").wait_for()
    assert keys.count == 4


def test_it_approves_and_opens_the_next_and_lists_the_shortcuts(desk, people, stack):
    first = waiting_approval(desk, "Please refund $20 of order 1003.")
    second = waiting_approval(desk, "Please refund $10 of order 1004.")
    alice = people(stack, "alice")
    page = alice.open(f"/interactions/{first.pk}/")

    keys = Keys(page)
    keys.press("?")
    dialog = page.locator("dialog#shortcuts")
    dialog.wait_for(state="visible")
    listed = dialog.inner_text()
    assert "Approve and open the next" in listed and "Write a reason to reject" in listed
    alice.shot("shortcuts")
    assert violations(page, alice.watch) == []
    keys.press("Escape")
    dialog.wait_for(state="hidden")

    with page.expect_navigation(url=re.compile(f"/interactions/{second.pk}/$")):
        keys.press("n")
    alice.wait_live()
    assert "Approved refund_order: the run continues." in text_of(page, ".flash")
    first.refresh_from_db()
    assert first.response == {"approved": True, "reason": ""}

    # Reject with a reason, from the keyboard.
    keys.press("r")
    page.keyboard.type("The customer already got a voucher.")
    with page.expect_response(lambda r: r.url.endswith("/respond/")):
        page.keyboard.press("Control+Enter")
    page.locator(".decided", has_text="Rejected by alice").wait_for()
    second.refresh_from_db()
    assert second.response == {"approved": False, "reason": "The customer already got a voucher."}


def test_it_warns_of_a_second_refund_of_the_same_order(desk, people, stack):
    first = waiting_approval(desk, "Please refund $20 of order 1003.")
    second = waiting_approval(desk, "Please refund $15 of order 1003.")
    alice = people(stack, "alice")

    page = alice.open(f"/interactions/{second.pk}/")
    related = page.locator(".related.warn")
    assert "1 other call of refund_order on order 1003" in related.inner_text()
    assert "amount_cents $20.00" in related.inner_text()
    assert "waiting for approval" in related.inner_text()
    facts = page.locator(".facts").inner_text()
    assert "Chen Wei" in facts and "$139.00" in facts
    alice.shot("related-warning")

    inbox = alice.open("/")
    warnings = inbox.locator("#queue-approvals .related-warning")
    assert warnings.count() == 2
    assert "on order 1003" in warnings.first.inner_text()
    del first


def test_it_shows_a_bidi_payload_visibly_and_in_order(desk, people, stack):
    approval = waiting_approval(desk, f"Please refund $5 of order 1002, file invoice_{RLO}gnp.exe")
    alice = people(stack, "alice")
    page = alice.open(f"/interactions/{approval.pk}/")
    reason = page.locator("table.arguments tr", has_text="reason").locator("td.value")
    shown = reason.inner_text()
    assert "invoice_U+202Egnp.exe" in shown
    assert RLO not in page.content()
    # In order: the marker, then "gnp.exe" left to right, as written (an override would have
    # drawn it right to left, "exe.png").
    boxes = reason.evaluate(
        """(cell) => {
          const marker = cell.querySelector(".hidden-char").getBoundingClientRect();
          const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
          let node;
          while ((node = walker.nextNode()) && !node.data.includes("gnp.exe")) {}
          const at = node.data.indexOf("gnp.exe");
          const box = (i) => {
            const range = document.createRange();
            range.setStart(node, i);
            range.setEnd(node, i + 1);
            return range.getBoundingClientRect().left;
          };
          return [marker.right, box(at), box(at + 3), box(at + 6)];
        }"""
    )
    assert boxes == sorted(boxes), boxes
    alice.shot("bidi-visible")

    # The operator rejects with the same text: the audit log shows it visibly too.
    respond(approval.pk, {"approved": False, "reason": f"no {RLO}gnp.exe"}, actor="alice")
    audit = alice.open("/audit/", live=False)
    assert "U+202E" in audit.locator("#audit-table").inner_text()
    assert RLO not in audit.content()


def _pages(desk, stack) -> dict[str, str]:
    """Every console page, each in a state with something to show."""
    from runtime.testing import run_until_idle

    long_word = "x" * 10_000
    waiting = waiting_approval(desk, f"Please refund $20 of order 1003. {long_word}")
    done = waiting_approval(desk, "Please refund $10 of order 1004.")
    respond(done.pk, {"approved": True, "reason": ""}, actor="bob")
    finished = desk.wait_status(done.run, RunStatus.COMPLETED)
    question_run = desk.submit("I want my money back.")
    desk.wait_status(question_run, RunStatus.WAITING)
    question = desk.pending(question_run)
    refund_op = finished.operations.get(name="refund_order")
    del run_until_idle
    return {
        "inbox": "/",
        "decision": f"/interactions/{waiting.pk}/",
        "decided": f"/interactions/{done.pk}/",
        "question": f"/interactions/{question.pk}/",
        "run-waiting": f"/runs/{waiting.run_id}/",
        "run-completed": f"/runs/{finished.pk}/",
        "run-every-event": f"/runs/{finished.pk}/?events=all",
        "reconcile-settled": f"/runs/{finished.pk}/reconcile/?key={refund_op.key}",
        "runs": "/runs/",
        "runs-search": "/runs/?q=Chen",
        "audit": "/audit/",
        "profile": "/profile/",
        "versions": "/versions/",
    }


ADMIN_PAGES = {
    "admin-versions": "/admin/agentops/agentversion/",
    "admin-version": "/admin/agentops/agentversion/version/refund-desk/2/",
    "admin-runs": "/admin/agentops/run/",
}


def test_the_login_page_is_accessible_and_fits_a_phone(desk, stack, chromium):
    context = chromium.new_context(viewport=PHONE)
    try:
        page = context.new_page()
        response = page.goto(stack.url("/accounts/login/"))
        assert response is not None and response.status == 200
        assert page_overflow(page) <= 0
        assert violations(page) == []
        page.set_viewport_size(DESKTOP)
        assert violations(page) == []
    finally:
        context.close()


def test_the_refusal_pages_are_accessible_and_fit_a_phone(desk, people, stack, chromium):
    """The 403 page a person without permissions gets, and the login lockout page."""
    from django.contrib.auth.hashers import make_password

    from tests.browser.browsing import PASSWORD
    from tests.support import personas

    personas.with_password(personas.console_user("outsider"), make_password(PASSWORD))
    olga = people(stack, "outsider")
    problems: list[str] = []
    for width, viewport in (("1440", DESKTOP), ("390", PHONE)):
        olga.page.set_viewport_size(viewport)
        response = olga.page.goto("/runs/")
        assert response is not None and response.status == 403
        problems += [f"403 at {width} px: {v}" for v in violations(olga.page, olga.watch)]
        if page_overflow(olga.page) > 0:
            problems.append(f"403 at {width} px is too wide")
        olga.shot(f"forbidden-{width}")

    context = chromium.new_context(viewport=PHONE)
    try:
        page = context.new_page()
        for _ in range(6):  # one more than the lockout's limit
            page.goto(stack.url("/accounts/login/"))
            page.fill("#id_username", "mallory")
            page.fill("#id_password", "not the password")
            with page.expect_navigation():
                page.click("button[type=submit]")
        assert "logging in is refused" in page.content()
        problems += [f"lockout: {v}" for v in violations(page)]
        if page_overflow(page) > 0:
            problems.append("lockout at 390 px is too wide")
    finally:
        context.close()
    assert problems == [], "\n".join(problems)


def test_every_page_is_accessible_and_fits_a_phone(desk, people, stack):
    pages = _pages(desk, stack)
    alice = people(stack, "alice")
    page = alice.page
    problems: list[str] = []
    for width, viewport in (("1440", DESKTOP), ("390", PHONE)):
        page.set_viewport_size(viewport)
        for name, path in pages.items():
            response = page.goto(path)
            assert response is not None and response.status == 200, (name, response)
            if page.locator("#live-status").count():
                alice.wait_live()
            # The transcript opened: a 10,000-character word must still wrap.
            for details in page.locator("details").all():
                details.evaluate("(el) => { el.open = true; }")
            overflow = page_overflow(page)
            if overflow > 0:
                problems.append(f"{name} at {width} px is {overflow} px too wide")
            problems += [f"{name} at {width} px: {v}" for v in violations(page, alice.watch)]
            alice.shot(f"{name}-{width}")
    assert problems == [], "\n".join(problems)


def test_the_admin_pages_we_own_are_accessible(desk, people, stack):
    # A run's record pages too: its run, an interaction and an event, read-only in the admin.
    waiting = waiting_approval(desk, "Please refund $20 of order 1003.")
    event = waiting.run.events.order_by("pk").first()
    assert event is not None
    records = {
        "admin-run": f"/admin/agentops/run/{waiting.run_id}/change/",
        "admin-interaction": f"/admin/agentops/interaction/{waiting.pk}/change/",
        "admin-event": f"/admin/agentops/event/{event.pk}/change/",
    }
    ada = people(stack, "ada")
    page = ada.page
    problems: list[str] = []
    for width, viewport in (("1440", DESKTOP), ("1280", {"width": 1280, "height": 900})):
        page.set_viewport_size(viewport)
        for name, path in {**ADMIN_PAGES, **records}.items():
            response = page.goto(path)
            assert response is not None and response.status == 200, (name, response)
            overflow = page_overflow(page)
            if overflow > 0:
                problems.append(f"{name} at {width} px is {overflow} px too wide")
            problems += [f"{name} at {width} px: {v}" for v in violations(page, ada.watch)]
            ada.shot(f"{name}-{width}")
    assert problems == [], "\n".join(problems)


# The integrations' and the API's admin pages: lists and the forms that create what they list.
INTEGRATION_ADMIN_PAGES = {
    "admin-routes": "/admin/integrations/notificationroute/",
    "admin-route-add": "/admin/integrations/notificationroute/add/",
    "admin-subscriptions": "/admin/integrations/webhooksubscription/",
    "admin-subscription-add": "/admin/integrations/webhooksubscription/add/",
    "admin-deliveries": "/admin/integrations/webhookdelivery/",
    "admin-notifications": "/admin/integrations/notification/",
    "admin-accounts": "/admin/api/serviceaccount/",
    "admin-account-add": "/admin/api/serviceaccount/add/",
    "admin-tokens": "/admin/api/apitoken/",
}


def test_the_integration_and_api_admin_pages_are_accessible(desk, people, stack):
    from django.contrib.auth.hashers import make_password

    from tests.browser.browsing import PASSWORD
    from tests.support import personas

    personas.with_password(personas.superuser("sam"), make_password(PASSWORD))
    sam = people(stack, "sam")
    page = sam.page
    problems: list[str] = []
    for width, viewport in (("1440", DESKTOP), ("390", PHONE)):
        page.set_viewport_size(viewport)
        for name, path in INTEGRATION_ADMIN_PAGES.items():
            response = page.goto(path)
            assert response is not None and response.status == 200, (name, response)
            problems += [f"{name} at {width} px: {v}" for v in violations(page, sam.watch)]
            sam.shot(f"{name}-{width}")
    assert problems == [], "\n".join(problems)
