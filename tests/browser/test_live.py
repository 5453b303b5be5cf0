"""The console is live: new work shows within a second, and a page catches up after its
websocket dropped (the server process was killed and started again)."""

from __future__ import annotations

import time
from urllib.parse import urlparse

import pytest
from playwright.sync_api import Route

from runtime import respond
from runtime.models import Event, EventKind, RunStatus
from tests.browser.browsing import inbox_row

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_it_shows_new_work_within_a_second_and_catches_up_after_a_reconnect(desk, people, stack):
    alice = people(stack, "alice")
    # Chrome logs each failed reconnection attempt while the server is down.
    alice.watch.allow_websocket_errors = True
    inbox = alice.open("/")
    alice.mark()

    # New work: from the commit of the approval request to the row on the screen.
    delays, runs = [], []
    for message in (
        "Please refund $40 of order 1001, the bowl arrived cracked.",
        "Refund $12 for order 1006, it arrived two weeks late.",
    ):
        run = desk.submit(message)
        inbox_row(inbox, "approvals", run).wait_for()
        seen = time.time()
        requested = Event.objects.get(run=run, kind=EventKind.TOOL_APPROVAL_REQUESTED)
        delays.append(round(seen - requested.created_at.timestamp(), 3))
        runs.append(run)
    assert max(delays) < 1.0, f"approvals took {delays} s to show"
    first, second = runs
    alice.shot("two-approvals-live")

    # The websocket drops: the server process is gone.
    stack.stop_server()
    inbox.locator("#live-status:not([data-state=open])").wait_for()
    alice.shot("server-down")

    # Meanwhile: one approval is answered elsewhere, a new one comes in, a run gets blocked...
    respond(desk.pending(first).pk, {"approved": True, "reason": ""}, actor="bob")
    third = desk.submit("Please refund $20 of order 1007, the desk wobbles.")
    desk.wait_status(first, RunStatus.COMPLETED)
    desk.wait_status(third, RunStatus.WAITING)
    # ...and nothing of it reached the page.
    assert inbox_row(inbox, "approvals", first).count() == 1
    assert inbox_row(inbox, "approvals", third).count() == 0

    # The server is back: the page reconnects by itself and catches up from the event log.
    stack.start_server()
    alice.wait_live(timeout=45_000)
    inbox_row(inbox, "approvals", third).wait_for()
    inbox_row(inbox, "approvals", first).wait_for(state="detached")
    assert inbox_row(inbox, "approvals", second).count() == 1
    assert inbox.locator("#approvals-title .tally").inner_text() == "2"
    assert alice.still_same_document()
    alice.shot("caught-up")


def test_a_page_whose_login_ended_in_another_tab_says_so_and_shows_nothing_more(
    desk, people, stack
):
    alice = people(stack, "alice")
    inbox = alice.open("/")
    # Alice logs out in another tab; the inbox tab stays open.
    other = alice.context.new_page()
    other.goto("/")
    with other.expect_navigation():
        other.get_by_role("button", name="Log out").click()
    other.close()

    run = desk.submit("Please refund $40 of order 1001, the bowl arrived cracked.")
    desk.wait_status(run, RunStatus.WAITING)
    inbox.locator("#live-status[data-state=closed]", has_text="signed out").wait_for()
    assert inbox_row(inbox, "approvals", run).count() == 0
    alice.shot("signed-out")
    inbox.reload()
    assert urlparse(inbox.url).path == "/accounts/login/"


def test_a_push_for_a_region_the_page_no_longer_holds_is_dropped_without_an_error(
    desk, people, stack
):
    run = desk.submit("Please refund $40 of order 1001, the bowl arrived cracked.")
    desk.wait_status(run, RunStatus.WAITING)
    alice = people(stack, "alice")
    page = alice.open(f"/runs/{run.pk}/")
    alice.wait_live()
    # What an action's answer does a moment before the push of the same change arrives: the
    # region the push will carry is no longer on the page.
    page.evaluate("document.getElementById('run-operations').remove()")

    respond(desk.pending(run).pk, {"approved": True, "reason": ""}, actor="bob")
    desk.wait_status(run, RunStatus.COMPLETED)
    # The regions the page holds follow the run; the one it dropped is not put back, and no
    # error was reported for it (the fixture checks every page's console when the test ends).
    page.locator("#run-header .badge", has_text="completed").wait_for()
    assert page.locator("#run-operations").count() == 0
    assert alice.watch.problems() == []


# The newest event id of the pushes, read as each arrives (before the page filters it), and
# when the last one arrived.
RECORD_PUSHES = """
window.pushedUpTo = 0;
document.addEventListener("htmx:wsBeforeMessage", (event) => {
  const found = /id="live-cursor" data-event="(\\d+)"/.exec(event.detail.message);
  if (found) window.pushedUpTo = Math.max(window.pushedUpTo, Number(found[1]));
  window.lastPushAt = performance.now();
});
"""
# Every push of the events up to `upTo` has arrived: one covers it, and none came for a second
# (events that reach the server while it renders one push are sent in the next).
PUSHED_AND_QUIET = (
    "upTo => window.pushedUpTo >= upTo && performance.now() - window.lastPushAt > 1000"
)
# Marks when the retry's answer has been swapped in: htmx:afterRequest follows the swap and is
# heard on the document even when a region it swapped has been replaced since. Not afterSettle:
# the page asks to catch up as the request ends, and that push can replace the answer's regions
# within htmx's settle delay (20 ms), when their afterSettle no longer reaches the document.
ANSWER_SWAPPED = """() => document.addEventListener("htmx:afterRequest", (e) => {
    if ((e.detail.pathInfo || {}).requestPath?.endsWith("/retry/")) window.answerSwapped = true;
})"""
CURSOR_AT_LEAST = (
    "upTo => Number(document.querySelector('#live-cursor')?.dataset.event || 0) >= upTo"
)


def test_an_action_in_flight_keeps_its_region_from_pushes_and_the_page_catches_up_after_it(
    desk, people, stack
):
    run = desk.submit(
        "Where is my order 1004? Has it shipped yet? (provider outage)", agent="flaky-desk"
    )
    desk.wait_status(run, RunStatus.RETRY_WAIT)
    alice = people(stack, "alice")
    page = alice.open(f"/runs/{run.pk}/")
    page.evaluate(RECORD_PUSHES)
    held: list[Route] = []

    def hold(route: Route) -> None:  # answered later, by the test
        held.append(route)

    page.route("**/retry/", hold)

    page.locator("#run-header").get_by_role("button", name="Retry now").click()
    for _ in range(200):
        if held:
            break
        page.wait_for_timeout(25)
    assert held, "the retry request never left the page"
    # The server retries and answers; the run then goes on to completion, and every push of
    # it reaches the page, while the answer (rendered before all that) is still on its way.
    answer = held[0].fetch()
    finished = desk.wait_status(run, RunStatus.COMPLETED)
    completed = Event.objects.get(run=run, kind=EventKind.COMPLETED).pk
    page.wait_for_function(PUSHED_AND_QUIET, arg=completed)
    page.evaluate(ANSWER_SWAPPED)
    held[0].fulfill(response=answer)

    # The answer found its regions (no oobErrorNoTarget, checked with the page's console when
    # the test ends), and what it put back, older than the pushes, was caught up: looked at
    # once the answer has been swapped in, before which the page still shows the pushes' state.
    page.wait_for_function("() => window.answerSwapped === true")
    page.wait_for_function(CURSOR_AT_LEAST, arg=completed)
    page.locator("#run-header .badge", has_text="completed").wait_for()
    page.locator("#run-transcript", has_text=finished.output[:40]).wait_for()
    cursor = page.locator("#live-cursor").get_attribute("data-event")
    assert cursor is not None and int(cursor) >= completed
    assert alice.watch.problems() == []
