"""Bulk actions by filter, in process: the preview, the job's batches, stop, double submits."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from runtime import InvalidInput, InvalidTransition, bulk, cancel, submit
from runtime.clock import frozen
from runtime.llm.scripted import say
from runtime.models import (
    BulkItemStatus,
    BulkJob,
    BulkJobItem,
    BulkJobStatus,
    Event,
    EventKind,
    Run,
    RunStatus,
)
from runtime.testing import SimulatedCrash, crash_at, recover, run_until_idle
from tests.conftest import make_agent, one_call


def _runs(define: Any, queued: int = 3, completed: int = 2) -> tuple[list[Run], list[Run]]:
    define(make_agent([say("hi")]))
    waiting = [submit("clerk", f"q{i}", actor="alice") for i in range(queued)]
    done = [run_until_idle(submit("clerk", f"c{i}", actor="alice").pk) for i in range(completed)]
    return waiting, done


def _work(job: BulkJob, batch: int = 2) -> int:
    return bulk.work(job.pk, owner="test-worker", batch=batch)


def test_the_preview_counts_what_each_action_touches_and_says_why_not(define):
    _runs(define)
    shown = bulk.preview({"agent": "clerk"})
    assert shown.matched == 5
    cancel_ = shown.actions["cancel"]
    assert (cancel_.touch, cancel_.refused) == (3, 2)
    assert cancel_.reasons == {"it is completed; only unfinished runs can be cancelled": 2}
    assert (shown.actions["pause"].touch, shown.actions["resume"].touch) == (3, 0)
    assert shown.actions["retry"].reasons == {
        "a queued run cannot be retried": 3,
        "a completed run cannot be retried": 2,
    }
    assert len(cancel_.examples) == 2


def test_a_job_touches_every_matching_run_once_in_batches_with_an_audit_entry_each(define):
    queued, done = _runs(define)
    job = bulk.submit("pause", {"status": ["queued"]}, actor="bob", key="k1", reason="outage")
    assert (job.total, job.status) == (3, BulkJobStatus.RUNNING)
    assert bulk.work_batch(job, batch=2) == 2
    job.refresh_from_db()
    assert (job.touched, job.status) == (2, BulkJobStatus.RUNNING)
    assert _work(job) == 1
    job.refresh_from_db()
    assert (job.touched, job.skipped, job.status) == (3, 0, BulkJobStatus.COMPLETED)
    for run in queued:
        run.refresh_from_db()
        assert run.status == RunStatus.PAUSED
        paused = Event.objects.get(run=run, kind=EventKind.PAUSED)
        assert paused.actor == "bob"
        assert paused.data["reason"] == f"bulk job {job.pk}: outage"
    assert all(Run.objects.get(pk=r.pk).status == RunStatus.COMPLETED for r in done)
    submitted = Event.objects.get(run=None, kind=EventKind.BULK_JOB_SUBMITTED)
    assert (submitted.actor, submitted.data["job"], submitted.data["total"]) == (
        "bob",
        str(job.pk),
        3,
    )


def test_submitting_the_same_key_twice_starts_one_job(define):
    _runs(define)
    first = bulk.submit("cancel", {"status": ["queued"]}, actor="bob", key="same")
    again = bulk.submit("cancel", {"status": ["queued"]}, actor="bob", key="same")
    assert again.pk == first.pk
    assert BulkJob.objects.count() == 1
    assert BulkJobItem.objects.count() == 3
    assert Event.objects.filter(kind=EventKind.BULK_JOB_SUBMITTED).count() == 1


def test_a_run_an_operator_changed_meanwhile_is_skipped_with_the_reason(define):
    queued, _ = _runs(define)
    job = bulk.submit("pause", {"status": ["queued"]}, actor="bob", key="k")
    cancel(queued[0].pk, actor="carol")
    _work(job)
    job.refresh_from_db()
    assert (job.touched, job.skipped) == (2, 1)
    skipped = BulkJobItem.objects.get(job=job, status=BulkItemStatus.SKIPPED)
    assert skipped.run_id == queued[0].pk
    assert "cancelled" in skipped.detail
    assert not Event.objects.filter(run=queued[0], kind=EventKind.PAUSED).exists()


def test_a_stopped_job_takes_no_further_item(define):
    _runs(define)
    job = bulk.submit("cancel", {"status": ["queued"]}, actor="bob", key="k")
    bulk.work_batch(job, batch=1)
    job = bulk.stop(job.pk, actor="carol")
    assert (job.status, job.stopped_by) == (BulkJobStatus.STOPPED, "carol")
    assert _work(job) == 0
    assert BulkJobItem.objects.filter(job=job, status=BulkItemStatus.PENDING).count() == 2
    assert Run.objects.filter(status=RunStatus.QUEUED).count() == 2
    with pytest.raises(InvalidTransition, match="stopped"):
        bulk.stop(job.pk, actor="carol")
    assert Event.objects.filter(run=None, kind=EventKind.BULK_JOB_STOPPED).count() == 1


def test_a_worker_that_does_not_hold_the_job_does_nothing(define):
    _runs(define)
    job = bulk.submit("cancel", {"status": ["queued"]}, actor="bob", key="k")
    from runtime.store import surgery as surgery_store

    assert surgery_store.claim_job(job.pk, "worker-a", seconds=60) is not None
    assert bulk.work(job.pk, owner="worker-b") == 0
    assert Run.objects.filter(status=RunStatus.QUEUED).count() == 3


def test_the_filters_match_status_agent_version_time_error_and_blocked_tool(define, effects):
    define(make_agent(one_call("charge")))
    with frozen(dt.datetime(2026, 1, 1, tzinfo=dt.UTC)):
        early = submit("clerk", "early", actor="alice")
    blocked = submit("clerk", "charge", actor="alice")
    with crash_at("after_intent", tool="charge"), pytest.raises(SimulatedCrash):
        recover(blocked.pk)
    recover(blocked.pk)
    Run.objects.filter(pk=early.pk).update(error="Upstream said 502 Bad Gateway")

    def ids(**filters: Any) -> set[Any]:
        return {run.pk for run in bulk.matching(bulk.parse_filter(filters))}

    assert ids(tool="charge") == {blocked.pk}
    assert ids(tool="get_order") == set()
    assert ids(error="bad gateway") == {early.pk}
    assert ids(created_to="2026-01-02T00:00:00+00:00") == {early.pk}
    assert ids(created_from="2026-01-02T00:00:00+00:00") == {blocked.pk}
    assert ids(status=["needs_attention"], agent="clerk", version="1") == {blocked.pk}
    assert ids(agent="other") == set()


@pytest.mark.parametrize(
    ("action", "filters", "message"),
    [
        ("explode", {}, "action must be one of"),
        ("cancel", {"status": ["sleeping"]}, "unknown status"),
        ("cancel", {"owner": "x"}, "owner"),
        ("cancel", {"created_from": "yesterday"}, "created_from"),
        ("cancel", "status=queued", "must be an object"),
    ],
)
def test_it_refuses_a_bad_job_and_creates_nothing(define, action, filters, message):
    _runs(define)
    with pytest.raises(InvalidInput, match=message):
        bulk.submit(action, filters, actor="bob")
    assert not BulkJob.objects.exists()
    assert not Event.objects.filter(kind__startswith="bulk_job").exists()


def test_filter_times_are_kept_in_utc_whatever_offset_they_came_with(define):
    _runs(define)
    far = bulk.parse_filter({"created_from": "0306-02-28T12:07:50.9-17:21"})
    assert far.created_from is not None
    assert far.created_from.utcoffset() == dt.timedelta(0)
    assert bulk.preview({"created_from": "0306-02-28T12:07:50.9-17:21"}).matched == 5
    with pytest.raises(InvalidInput, match="out of range"):
        bulk.parse_filter({"created_to": "0001-01-01T00:00:00+05:00"})
