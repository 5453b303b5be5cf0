"""Attacker-controlled text (model output, tool arguments, a question, the customer's message,
an operator's reason and answer) is shown as text on every page that displays it, with its
bidirectional overrides and zero-width characters shown by code point (U+202E) wherever they
could mislead an approver (an editable box keeps them, and the page says so).

Each page is opened in Chromium and checked: the hostile markup is in the page as text, no
element it would have created exists, the CSP header is there, and (checked for every page the
person opened) no dialog opened, no script error or console error (a CSP violation is one)
happened, and no request left for another host.
"""

from __future__ import annotations

import signal
from urllib.parse import quote

import pytest

from runtime import respond
from runtime.models import Interaction, Operation, RunStatus
from tests.browser.agents import HOSTILE
from tests.browser.browsing import csp_of, text_of

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

# Elements the hostile text would create if it were markup, or a script that would run it.
ACTIVE_MARKUP = """() => {
  const found = [];
  for (const script of document.scripts) {
    if ((script.textContent || "").includes("alert(") || !script.src.startsWith(location.origin)) {
      found.push(script.outerHTML.slice(0, 120));
    }
  }
  const selectors = 'img[src="x"], img[src*="evil.example"], [onerror], [onload], ' +
    'a[href^="javascript:"], [hx-get="/admin/"], [hx-trigger="load"]';
  document.querySelectorAll(selectors).forEach((el) => found.push(el.outerHTML.slice(0, 120)));
  return found;
}"""
SHOWN = "<script>alert(1)</script>"
# Text nodes outside editable boxes that still hold an invisible or reordering character.
INVISIBLE_LEFT = """() => {
  const bad = /[\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]/;
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const found = [];
  while (walker.nextNode()) {
    const node = walker.currentNode;
    if (node.parentElement.closest("textarea, script, style")) continue;
    if (bad.test(node.nodeValue)) found.push(node.parentElement.outerHTML.slice(0, 160));
  }
  return found;
}"""
CSP_DIRECTIVES = ["default-src 'self'", "script-src 'self'", "object-src 'none'"]


def _check(person, path: str, name: str, *, shown: bool = True, full: bool = False) -> None:
    """`full`: the page shows the whole hostile text (not cut short), so its code points too."""
    page = person.page
    response = page.goto(path)
    assert response is not None and response.status == 200, (name, response)
    csp = csp_of(response)
    assert all(directive in csp for directive in CSP_DIRECTIVES), (name, csp)
    if page.locator("#live-status").count():
        person.wait_live()
    assert page.evaluate(ACTIVE_MARKUP) == [], name
    assert page.evaluate(INVISIBLE_LEFT) == [], name
    if shown:
        assert SHOWN in text_of(page), f"{name}: the hostile text is not shown"
    if full:
        assert "U+202E" in text_of(page), f"{name}: the override is not shown by code point"
    person.shot(name)


def _check_previews(person, run) -> None:
    """Run surgery's previews: what a fork would run again, what a bulk job would touch."""
    key = Operation.objects.filter(run=run).order_by("pk").values_list("key", flat=True)[0]
    _check(person, f"/runs/{run.pk}/fork/?at={quote(key)}", "fork-preview", shown=False)
    _check(person, "/runs/bulk/?agent=hostile-desk", "bulk-preview", shown=False)


def test_it_shows_hostile_text_as_inert_text_on_every_page(desk, people, stack):
    alice = people(stack, "alice")
    approval_run = desk.submit(HOSTILE, agent="hostile-desk")
    question_run = desk.submit(HOSTILE, agent="hostile-asker")
    desk.wait_status(approval_run, RunStatus.WAITING)
    desk.wait_status(question_run, RunStatus.WAITING)
    approval, question = desk.pending(approval_run), desk.pending(question_run)

    _check(alice, "/", "inbox")
    _check(alice, "/runs/", "runs")
    _check(alice, "/runs/?q=" + quote("<script>"), "runs-search")
    _check(alice, f"/runs/{approval_run.pk}/", "run-waiting-approval")
    _check(alice, f"/interactions/{approval.pk}/", "approval", full=True)
    _check(alice, f"/interactions/{question.pk}/", "question")

    # The operator's own words are hostile too: a rejection reason and an answer.
    page = alice.page
    page.goto(f"/interactions/{approval.pk}/")
    alice.wait_live()
    page.fill(f"#reason-{approval.pk}", HOSTILE)
    page.get_by_role("button", name="Reject").click()
    page.locator(".decided").wait_for()
    assert page.evaluate(ACTIVE_MARKUP) == []
    assert SHOWN in page.locator(".decided").inner_text()
    page.goto(f"/interactions/{question.pk}/")
    alice.wait_live()
    page.fill(f"#answer-{question.pk}", HOSTILE)
    page.get_by_role("button", name="Send the answer").click()
    page.locator(".decided").wait_for()
    assert page.evaluate(ACTIVE_MARKUP) == []
    desk.wait_status(approval_run, RunStatus.COMPLETED)
    desk.wait_status(question_run, RunStatus.COMPLETED)

    _check(alice, f"/runs/{approval_run.pk}/", "run-rejected")
    _check(alice, f"/interactions/{approval.pk}/", "approval-rejected")
    _check(alice, f"/runs/{question_run.pk}/", "run-answered")
    _check(alice, f"/interactions/{question.pk}/", "question-answered")
    _check(alice, "/audit/", "audit")
    _check_previews(alice, approval_run)

    # A hostile call whose worker died after the refund: the reconcile page shows its arguments.
    blocked_run = desk.submit(HOSTILE, agent="hostile-desk")
    desk.wait_status(blocked_run, RunStatus.WAITING)
    crashing = stack.crash_worker("after_handler:refund_order")
    respond(desk.pending(blocked_run).pk, {"approved": True, "reason": ""}, actor="bob")
    assert crashing.wait_exit(60) == -signal.SIGKILL, stack.logs()
    stack.start_worker()
    desk.wait_status(blocked_run, RunStatus.NEEDS_ATTENTION)
    _check(alice, "/", "inbox-blocked", shown=False)
    _check(alice, f"/runs/{blocked_run.pk}/", "run-blocked")
    _check(alice, f"/runs/{blocked_run.pk}/reconcile/", "reconcile")

    # The admin shows the same records read-only.
    ada = people(stack, "ada")
    _check(ada, f"/admin/agentops/run/{approval_run.pk}/change/", "admin-run")
    interaction = Interaction.objects.get(pk=approval.pk)
    _check(ada, f"/admin/agentops/interaction/{interaction.pk}/change/", "admin-interaction")

    for person in (alice, ada):
        assert person.watch.problems() == [], person.watch.problems()
