"""A run waiting out a model outage: its countdown ticks, and "Retry now" continues it.

flaky-desk is the demo refund desk with a 30 s retry timer; the demo brain's "(provider
outage)" marker makes the first two requests of each step fail, as an overloaded provider would.
"""

from __future__ import annotations

import time

import pytest

from runtime.models import Event, EventKind, RunStatus
from tests.browser.agents import RETRY_DELAY
from tests.browser.browsing import click_for_answer, inbox_row, seconds_left

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_it_counts_down_a_retry_wait_and_retries_now(desk, people, stack):
    alice = people(stack, "alice")
    inbox = alice.open("/")
    run = desk.submit(
        "Where is my order 1004? Has it shipped yet? (provider outage)", agent="flaky-desk"
    )

    row = inbox_row(inbox, "retries", run)
    row.wait_for()
    assert "overloaded" in row.inner_text()
    countdown = row.locator("td.countdown time")
    first = seconds_left(countdown.inner_text())
    time.sleep(2.2)
    second = seconds_left(countdown.inner_text())
    # It ticks: the same timer, read two seconds apart.
    assert 0 < second < first <= RETRY_DELAY, (first, second)
    # (The page redraws it every second, so two reads 2.2 s apart are 1 to 3 seconds apart.)
    assert 1 <= first - second <= 3, (first, second)
    alice.shot("inbox-countdown")

    row.get_by_role("link", name="Open").click()
    alice.wait_live()
    page = alice.page
    header = page.locator("#run-header")
    assert "Next attempt in 0:" in header.inner_text()
    assert "after attempt 1 of 3" in header.inner_text()
    alice.shot("run-retry-wait")

    # "Retry now" until the outage is over (the brain decides how long it lasts).
    retries = 0
    while desk.wait_status(run, RunStatus.RETRY_WAIT, RunStatus.COMPLETED).status != "completed":
        header.locator(".badge", has_text="retry wait").wait_for()
        answer = click_for_answer(page, header.get_by_role("button", name="Retry now"), "/retry/")
        assert answer.status == 200
        assert "Retrying now." in answer.text()
        retries += 1
        assert retries <= 5, "the run did not get past the outage"
    header.locator(".badge", has_text="completed").wait_for()
    alice.shot("run-completed")

    finished = desk.wait_status(run, RunStatus.COMPLETED)
    assert finished.output.startswith("Order 1004 (Hiking boots) is delivered")
    assert (
        Event.objects.filter(run=run, kind=EventKind.RETRIED_NOW, actor="alice").count() == retries
    )
    # Long before the timer would have fired.
    assert (finished.finished_at - finished.created_at).total_seconds() < RETRY_DELAY
