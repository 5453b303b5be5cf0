"""Retention: finished runs older than an age move to a gzip archive file and leave the database,
batch by batch; nothing unfinished, recent, forked from or held by a running bulk job moves."""

from __future__ import annotations

import datetime as dt
import io
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.core.management import CommandError, call_command
from django.db import connections
from django.db.models import F

from runtime import bulk, cancel, clock, fork, respond, retry, submit
from runtime.llm.scripted import call, say
from runtime.models import (
    BulkJobStatus,
    Event,
    Interaction,
    Run,
    RunStatus,
)
from runtime.retention import ArchiveError, archive_runs, parse_age
from runtime.store import archive, event
from runtime.testing import run_until_idle
from tests.conftest import ARGS, make_agent

OLD = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
NOW = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
AGE = dt.timedelta(days=90)


def _script(request: Any) -> Any:
    """By the customer's message: fail, ask for a refund's approval, look an order up, or say."""
    first = json.dumps(request.messages[0])
    turn = sum(1 for m in request.messages if m["role"] == "assistant")
    if "fail" in first:
        return RuntimeError("provider down")
    if "refund" in first and turn == 0:
        return call(("refund", ARGS["refund"]), step=1)
    if "order" in first and turn == 0:
        return call(("get_order", ARGS["get_order"]), step=1)
    return say("done")


def _finished(message: str) -> Run:
    run = run_until_idle(submit("clerk", message, actor="alice").pk)
    if run.status == RunStatus.WAITING:
        interaction = Interaction.objects.get(run=run, status="pending")
        respond(interaction.pk, {"approved": True}, actor="bob")
        run = run_until_idle(run.pk)
    return run


@pytest.fixture
def world(define: Any, effects: Any) -> dict[str, Any]:
    """Old runs of every ending and history, an old unfinished one, and recent finished ones."""
    define(make_agent(_script))
    with clock.frozen(OLD):
        old = {
            "plain": _finished("hello"),
            "tool": _finished("where is my order"),
            "approved": _finished("a refund please"),
            "failed": _finished("fail"),
        }
        waiting = run_until_idle(submit("clerk", "another refund", actor="alice").pk)
        queued = submit("clerk", "hello again", actor="alice")
        old["cancelled"] = cancel(queued.pk, actor="alice")
    with clock.frozen(NOW - dt.timedelta(days=10)):
        recent = _finished("where is my order, recently")
    assert old["approved"].status == RunStatus.COMPLETED
    assert old["failed"].status == RunStatus.FAILED
    assert old["cancelled"].status == RunStatus.CANCELLED
    assert waiting.status == RunStatus.WAITING
    return {"old": old, "waiting": waiting, "recent": recent}


def _snapshot(run_ids: list[Any]) -> dict[str, list[dict[str, Any]]]:
    """Every history row of these runs, by run id, as the ORM reads it: tables parents first,
    each in primary key order."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for table in archive.history_tables():
        lookup = "id__in" if table.model is Run else f"{table.to_run}__in"
        names = [f.attname for f in table.model._meta.concrete_fields]
        found = table.model._default_manager.filter(**{lookup: run_ids}).order_by("pk")
        for row in found.values(*names, _run=F(table.to_run)):
            run = str(row.pop("_run"))
            rows.setdefault(run, []).append({"model": table.label, "fields": row})
    return rows


def _read(path: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, list[Any]]]:
    """The header, the manifest line of each run and each run's rows, read back from the file,
    each value through its model field (times, ids) as the ORM would read it."""
    lines = list(archive.read_archive(path))
    manifests = {line["run"]: line for line in lines[1:] if "rows" in line}
    rows: dict[str, list[Any]] = {}
    for line in lines[1:]:
        if "fields" in line:
            fields = {f.attname: f for f in apps.get_model(line["model"])._meta.concrete_fields}
            values = {name: fields[name].to_python(v) for name, v in line["fields"].items()}
            rows.setdefault(line["run"], []).append({"model": line["model"], "fields": values})
    return lines[0], manifests, rows


def _everything() -> dict[str, list[dict[str, Any]]]:
    return _snapshot(list(Run.objects.values_list("pk", flat=True)))


def test_the_eligible_runs_move_to_the_file_exactly_as_they_were(world, tmp_path):
    old = [run.pk for run in world["old"].values()]
    kept = [world["waiting"].pk, world["recent"].pk]
    before, before_kept = _snapshot(old), _snapshot(kept)
    with clock.frozen(NOW):
        report = archive_runs(AGE, to=tmp_path, batch=2)
    assert report.runs == len(old) == 5
    assert report.batches == 3
    header, manifests, rows = _read(report.path)
    assert (header["format"], header["version"]) == ("agentops-archive", 2)
    assert set(manifests) == {str(pk) for pk in old}
    assert rows == before
    for run_id, manifest in manifests.items():
        counted: dict[str, int] = {}
        for row in rows[run_id]:
            counted[row["model"]] = counted.get(row["model"], 0) + 1
        assert manifest["rows"] == counted
    # Every kind of history was there to move, and the report counts what the file holds.
    assert {"agentops.operation", "agentops.interaction", "agentops.event"} <= set(report.rows)
    assert {"agentops.approvalreceipt", "agentops.workitem"} <= set(report.rows)
    assert report.total_rows == sum(len(r) for r in rows.values())
    assert report.bytes == report.path.stat().st_size
    assert not Run.objects.filter(pk__in=old).exists()
    assert not Event.objects.filter(run_id__in=old).exists()
    assert _everything() == before_kept


def test_times_are_archived_to_the_microsecond(define, tmp_path):
    define(make_agent(_script))
    when = OLD + dt.timedelta(microseconds=123_457)
    with clock.frozen(when):
        run = _finished("where is my order")
    before = _snapshot([run.pk])
    with clock.frozen(NOW):
        report = archive_runs(AGE, to=tmp_path)
    _, _, rows = _read(report.path)
    assert rows == before
    assert rows[str(run.pk)][0]["fields"]["created_at"] == when


@pytest.mark.postgres
def test_postgresql_writes_the_lines_the_orm_would(world):
    """The database builds each line itself; what it builds reads as the ORM's encoding of the
    same row, so an archive says the same whichever database wrote it."""
    ids = list(Run.objects.values_list("pk", flat=True))
    for table in archive.history_tables():
        built = [
            (run, pk, json.loads(line)) for run, pk, line in archive._database_lines(table, ids)
        ]
        encoded = [(run, pk, json.loads(line)) for run, pk, line in archive._orm_lines(table, ids)]
        assert built == encoded, table.label
        assert built or table.model not in (Run, Event, Interaction), table.label


def test_a_dry_run_counts_the_same_and_writes_nothing(world, tmp_path):
    before = _everything()
    with clock.frozen(NOW):
        dry = archive_runs(AGE, to=tmp_path / "nowhere", dry_run=True, batch=2)
        assert list(tmp_path.iterdir()) == []
        assert _everything() == before
        real = archive_runs(AGE, to=tmp_path, batch=3)
    assert (dry.path, dry.runs, dry.rows) == (None, real.runs, real.rows)


def test_nothing_old_enough_leaves_no_file_and_says_so(world, tmp_path):
    before = _everything()
    with clock.frozen(NOW):
        report = archive_runs(dt.timedelta(weeks=1000), to=tmp_path)
        out = io.StringIO()
        call_command("archive_runs", "--older-than=1000w", f"--to={tmp_path}", stdout=out)
    assert (report.path, report.runs, report.rows, report.bytes) == (None, 0, {}, 0)
    assert out.getvalue() == "nothing to archive: no finished run is older than 1000w\n"
    assert list(tmp_path.iterdir()) == []
    assert _everything() == before


@pytest.mark.parametrize("age", ["90", "90x", "-3d", "0d", "d", "ninety days", ""])
def test_a_bad_age_is_refused_and_nothing_changes(world, tmp_path, age):
    before = _everything()
    with pytest.raises(ArchiveError, match="not a positive whole number"):
        parse_age(age)
    with pytest.raises(CommandError, match="not a positive whole number"):
        call_command("archive_runs", f"--older-than={age}", f"--to={tmp_path}")
    assert _everything() == before
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "age",
    [
        "1000000d",  # a date 2,700 years back: before the year 1
        "99999999999w",  # more days than a timedelta holds
        "9" * 5000 + "h",  # more digits than int() reads
    ],
)
def test_an_age_before_the_year_1_is_refused_and_nothing_changes(world, tmp_path, age):
    before = _everything()
    with pytest.raises(CommandError, match="reaches back before the year 1"):
        call_command("archive_runs", f"--older-than={age}", f"--to={tmp_path}")
    with pytest.raises(CommandError, match="reaches back before the year 1"):
        call_command("archive_runs", f"--older-than={age}", "--dry-run")
    assert _everything() == before
    assert list(tmp_path.iterdir()) == []


def test_an_age_in_other_scripts_digits_is_refused():
    # str.isdigit and int() take them; an age is written in ASCII digits.
    with pytest.raises(ArchiveError, match="not a positive whole number"):
        parse_age("\u0669\u0660d")


def test_ages_read_in_hours_days_and_weeks():
    assert [parse_age(a) for a in ("12h", "90d", "2w")] == [
        dt.timedelta(hours=12),
        dt.timedelta(days=90),
        dt.timedelta(weeks=2),
    ]


def test_an_unwritable_destination_is_refused_and_nothing_changes(world, tmp_path):
    before = _everything()
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for where in (tmp_path / "missing", a_file):
        with clock.frozen(NOW), pytest.raises(ArchiveError, match="not a writable directory"):
            archive_runs(AGE, to=where)
    with pytest.raises(CommandError, match="batch size must be at least 1"):
        call_command("archive_runs", "--older-than=90d", f"--to={tmp_path}", "--batch=0")
    assert _everything() == before
    assert list(tmp_path.iterdir()) == [a_file]


def test_a_crash_between_batches_leaves_each_run_either_archived_or_untouched(world, tmp_path):
    old = [run.pk for run in world["old"].values()]
    before = _snapshot(old)

    def crash(batch: int) -> None:
        raise RuntimeError("killed after batch 1")

    with clock.frozen(NOW), pytest.raises(RuntimeError, match="killed"):
        archive_runs(AGE, to=tmp_path, batch=2, after_batch=crash)
    [first] = tmp_path.iterdir()
    _, manifests, rows = _read(first)
    assert len(manifests) == 2
    assert not Run.objects.filter(pk__in=list(manifests)).exists()
    left = [pk for pk in old if str(pk) not in manifests]
    assert _snapshot(left) == {str(pk): before[str(pk)] for pk in left}
    # The next invocation moves the rest into a file of its own; together they hold it all.
    with clock.frozen(NOW + dt.timedelta(seconds=1)):
        report = archive_runs(AGE, to=tmp_path, batch=2)
    _, more, more_rows = _read(report.path)
    assert set(more) == {str(pk) for pk in left}
    assert rows | more_rows == before


def test_a_crash_after_the_file_and_before_the_delete_deletes_nothing(world, tmp_path):
    before = _everything()

    def crash(run_ids: list[str]) -> None:
        raise RuntimeError("killed before the delete")

    with clock.frozen(NOW), pytest.raises(RuntimeError, match="killed"):
        archive_runs(AGE, to=tmp_path, batch=2, before_delete=crash)
    [written] = tmp_path.iterdir()
    _, manifests, _ = _read(written)
    assert len(manifests) == 2  # archived, and still in the database
    assert _everything() == before


def test_a_run_retried_while_the_archive_works_is_untouched(world, tmp_path):
    with clock.frozen(OLD):
        another = _finished("fail again")
    # Batches go by id: of two failed runs, the later one is not in the first batch of one.
    failed = max(world["old"]["failed"], another, key=lambda run: run.pk)

    def retry_it(batch: int) -> None:
        if batch == 1:
            retry(failed.pk, actor="carol")

    with clock.frozen(NOW):
        report = archive_runs(AGE, to=tmp_path, batch=1, after_batch=retry_it)
    assert report.runs == 5
    failed.refresh_from_db()
    assert failed.status == RunStatus.QUEUED
    _, manifests, _ = _read(report.path)
    assert str(failed.pk) not in manifests


def test_forks_go_before_their_parent_and_a_running_bulk_job_holds_its_runs(world, tmp_path):
    plain, tool = world["old"]["plain"], world["old"]["tool"]
    with clock.frozen(OLD):
        child = run_until_idle(fork(tool.pk, "step-1/model", actor="alice").pk)
    assert child.status == RunStatus.COMPLETED
    job = bulk.submit("retry", {"agent": "clerk"}, actor="alice", key="k")
    held = list(job.items.values_list("run_id", flat=True))
    assert job.status == BulkJobStatus.RUNNING
    assert held, "the bulk job holds the failed run"
    with clock.frozen(NOW):
        report = archive_runs(AGE, to=tmp_path, batch=1)
    _, manifests, _ = _read(report.path)
    order = list(manifests)
    assert order.index(str(child.pk)) < order.index(str(tool.pk))
    assert str(plain.pk) in manifests
    assert not set(manifests) & {str(pk) for pk in held}
    assert Run.objects.filter(pk__in=held).count() == len(held)


def test_event_ids_are_never_reused_so_outbox_positions_stay_right(world, tmp_path):
    newest = Event.objects.order_by("-id").values_list("id", flat=True)[0]
    with clock.frozen(NOW):
        archive_runs(AGE, to=tmp_path)
    assert not Event.objects.filter(id=newest).exists() or newest in Event.objects.filter(
        run_id__in=[world["waiting"].pk, world["recent"].pk]
    ).values_list("id", flat=True)
    event(world["waiting"].pk, "note", "alice")
    assert Event.objects.order_by("-id").values_list("id", flat=True)[0] > newest


def test_the_command_says_what_it_moved(world, tmp_path, capsys):
    with clock.frozen(NOW):
        call_command("archive_runs", "--older-than=90d", f"--to={tmp_path}", "--batch=2")
    out = capsys.readouterr().out
    assert "archived 5 runs to " in out
    assert "agentops.event:" in out
    assert "rows/s" in out


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_run_locked_by_another_transaction_is_skipped(define, effects, tmp_path):
    define(make_agent(_script))
    with clock.frozen(OLD):
        runs = [_finished("hello") for _ in range(3)]
    locked, holding, release = runs[1], threading.Event(), threading.Event()

    def hold() -> None:
        other = connections.create_connection("default")
        with other.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute(
                f"SELECT 1 FROM {Run._meta.db_table} WHERE id = %s FOR UPDATE", [locked.pk]
            )
            holding.set()
            release.wait(timeout=60)
            cursor.execute("ROLLBACK")
        other.close()

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert holding.wait(timeout=60)
        with clock.frozen(NOW):
            report = archive_runs(AGE, to=tmp_path)
    finally:
        release.set()
        thread.join()
    assert report.runs == 2
    assert Run.objects.filter(pk=locked.pk).exists()


def test_a_webhook_still_to_send_holds_its_run_and_a_sent_one_moves_with_it(world, tmp_path):
    from agentops.integrations.models import MessageStatus, WebhookDelivery, WebhookSubscription

    plain, tool = world["old"]["plain"], world["old"]["tool"]
    hook = WebhookSubscription.objects.create(
        name="crm",
        url="https://crm.example/hook",
        secret_sealed="x",
        secret_hint="x",
        created_at=OLD,
        created_by="admin",
    )
    for run, status, finished in (
        (plain, MessageStatus.PENDING, None),
        (tool, MessageStatus.DELIVERED, OLD),
    ):
        WebhookDelivery.objects.create(
            subscription=hook,
            event=Event.objects.filter(run=run).first(),
            run_id=run.pk,
            status=status,
            next_attempt_at=OLD,
            created_at=OLD,
            finished_at=finished,
        )
    with clock.frozen(NOW):
        report = archive_runs(AGE, to=tmp_path)
    _, manifests, _ = _read(report.path)
    assert str(plain.pk) not in manifests
    assert Run.objects.filter(pk=plain.pk).exists()
    assert WebhookDelivery.objects.filter(run_id=plain.pk).count() == 1
    assert manifests[str(tool.pk)]["rows"]["integrations.webhookdelivery"] == 1
    assert not WebhookDelivery.objects.filter(run_id=tool.pk).exists()
