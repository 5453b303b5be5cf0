"""Run surgery in the browser: a fork's preview and its acknowledgement; a bulk job's live
progress bar, from the runs list to the end of the job, without a reload."""

from __future__ import annotations

import uuid

import pytest
from django.utils import timezone

from runtime import respond
from runtime.models import AttentionReason, BulkJob, Event, EventKind, Run, RunStatus, Session
from tests.browser.browsing import click_for_answer

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_a_fork_preview_warns_of_the_manual_refund_and_needs_its_acknowledgement(
    desk, people, stack
):
    run = desk.submit("Please refund $40 of order 1001, the bowl arrived cracked.")
    desk.wait_status(run, RunStatus.WAITING)
    respond(desk.pending(run).pk, {"approved": True}, actor="bob")
    run = desk.wait_status(run, RunStatus.COMPLETED)
    refund_key = run.operations.get(name="refund_order").key

    alice = people(stack, "alice")
    page = alice.open(f"/runs/{run.pk}/")
    page.get_by_role("link", name="Fork from an operation…").click()
    page.wait_for_url(f"**/runs/{run.pk}/fork/")
    page.select_option("select[name=at]", refund_key)
    page.get_by_role("button", name="Preview", exact=True).click()
    row = page.locator(f"#fork-preview tr[data-key='{refund_key}']")
    row.wait_for()
    assert row.get_attribute("data-plan") == "rerun"
    assert "manual" in row.inner_text()
    assert "NOT safe to repeat" in row.inner_text()
    alice.shot("fork-preview")

    alice.mark()
    start = page.get_by_role("button", name="Start the fork")
    answer = click_for_answer(page, start, "/fork/start/")
    assert answer.status == 409
    page.locator("#fork-preview .error", has_text="acknowledge each").wait_for()
    assert alice.still_same_document()  # swapped in place
    assert not Run.objects.filter(parent=run).exists()

    page.locator(f"#fork-preview input[name=acknowledge][value='{refund_key}']").check()
    with page.expect_navigation():
        page.get_by_role("button", name="Start the fork").click()
    child = Run.objects.get(parent=run)
    assert page.url.endswith(f"/runs/{child.pk}/")
    page.locator("#run-surgery", has_text="A fork of run").wait_for()
    forked = Event.objects.get(run=child, kind=EventKind.FORKED)
    assert (forked.actor, forked.data["acknowledged"]) == ("alice", [refund_key])
    # The fork asks for the refund's approval again before anything is refunded twice.
    desk.wait_status(child, RunStatus.WAITING)
    assert desk.refunds("1001") == 1


RUNS = 1500


def _blocked_runs(count: int) -> None:
    """Runs blocked on a missing version, inserted in bulk: no worker picks them up."""
    now = timezone.now()
    sessions = Session.objects.bulk_create(
        [Session(agent="ghost-desk", created_at=now) for _ in range(count)]
    )
    Run.objects.bulk_create(
        [
            Run(
                id=uuid.uuid4(),
                session=session,
                seq=1,
                agent="ghost-desk",
                version="1",
                fingerprint="0" * 64,
                status=RunStatus.NEEDS_ATTENTION,
                attention_reason=AttentionReason.VERSION_MISSING,
                input="Refund order 1001",
                created_at=now,
                updated_at=now,
            )
            for session in sessions
        ]
    )


def test_a_bulk_jobs_progress_bar_follows_it_to_the_end(desk, people, stack):
    _blocked_runs(RUNS)
    alice = people(stack, "alice")
    page = alice.open("/runs/?agent=ghost-desk", live=False)
    page.get_by_role("link", name="Retry, cancel, pause or resume every matching run…").click()
    page.wait_for_url("**/runs/bulk/**")
    page.fill("input[name=agent]", "ghost-desk")
    page.get_by_role("button", name="Preview").click()
    pause_row = page.locator("#bulk-preview tr[data-action=pause]")
    pause_row.locator("[data-touch]", has_text=str(RUNS)).wait_for()
    retry_row = page.locator("#bulk-preview tr[data-action=retry]")
    assert "no longer defined in the code" in retry_row.inner_text()  # why not, per action
    alice.shot("bulk-preview")

    pause_row.locator("input[name=reason]").fill("ghost desk outage")
    with page.expect_navigation():
        pause_row.get_by_role("button", name=f"Pause {RUNS} runs").click()
    job = BulkJob.objects.get()
    assert page.url.endswith(f"/bulk/{job.pk}/")
    alice.mark()
    progress = page.locator("#bulk-job progress")
    assert progress.get_attribute("max") == str(RUNS)
    page.locator("#bulk-job[data-status=completed]").wait_for(timeout=120_000)
    assert progress.get_attribute("value") == str(RUNS)
    assert alice.still_same_document()  # the bar moved by itself
    assert f"{RUNS} of {RUNS} runs done" in page.locator("#bulk-job").inner_text()
    assert page.get_by_role("button", name="Stop the job").count() == 0
    alice.shot("bulk-done")
    assert Run.objects.filter(agent="ghost-desk", status=RunStatus.PAUSED).count() == RUNS
