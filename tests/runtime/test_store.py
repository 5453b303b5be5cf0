"""The store's single-statement writes, on the path workers take: outside any transaction.

The other runtime tests run inside a test transaction, where every write is a savepoint of it;
these run with real commits (transaction=True), as a worker's writes do, on SQLite and on
PostgreSQL alike.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection, transaction

from runtime import LeaseLost, cancel, store, submit
from runtime.models import Event, Operation, OperationKind, OperationStatus, Run, RunStatus
from runtime.registry import code_defines, register
from runtime.store.dialect import dialect_of
from runtime.testing import SimulatedCrash, crash_at, expire_lease, fence_hook
from tests.conftest import make_agent, say
from tests.support.rows import as_read

pytestmark = pytest.mark.django_db(transaction=True)

PUBLISHED: list[tuple[str, bool]] = []
PUBLISHED_EVENTS: list[Event] = []


def collect(event: Event) -> None:
    """AGENTOPS_PUBLISH hook: what was published, and whether its transaction had committed."""
    PUBLISHED.append((event.kind, not _in_transaction()))
    PUBLISHED_EVENTS.append(event)


def _in_transaction() -> bool:
    if connection.in_atomic_block:
        return True
    if connection.vendor == "postgresql":
        from psycopg.pq import TransactionStatus

        return connection.connection.info.transaction_status != TransactionStatus.IDLE
    return bool(connection.connection.in_transaction)


@pytest.fixture
def claimed() -> Iterator[Run]:
    agent = make_agent([say("hi")])
    with code_defines(agent):
        register([agent], actor="admin")
        run = submit(agent.name, "hi", actor="alice")
        yield store.claim(run.pk, "w1")


def intent(run: Run, key: str = "step-1/tool/a", existing: Operation | None = None) -> Operation:
    return store.write_intent(
        run,
        existing,
        key=key,
        kind="tool",
        name="get_order",
        policy="safe",
        input={"tool": "get_order", "arguments": {"order_id": "A1"}},
        input_hash="h",
    )


def writes_of(run: Run) -> tuple[int, int]:
    return Operation.objects.filter(run=run).count(), Event.objects.filter(run=run).count()


@contextmanager
def taken_over(run: Run) -> Iterator[Run]:
    expire_lease(run.pk)
    new = store.claim(run.pk, "w2")
    assert new is not None and new.fence == run.fence + 1
    yield new


def test_the_claimed_run_and_a_new_operation_are_as_the_orm_reads_them(claimed):
    assert as_read(claimed) == as_read(Run.objects.get(pk=claimed.pk))
    assert (claimed.has_operations, claimed.has_interactions) == (False, False)
    op = intent(claimed)
    assert op.get_deferred_fields() == set()  # every column built, none left to a query
    assert as_read(op) == as_read(Operation.objects.get(pk=op.pk))
    assert (op.run is claimed, op._state.adding, op._state.db) == (True, False, "default")
    expire_lease(claimed.pk)
    again = store.claim(claimed.pk, "w2")
    assert as_read(again) == as_read(Run.objects.get(pk=claimed.pk))
    assert again.last_crash and again.lease_expires_at is not None
    assert (again.has_operations, again.has_interactions) == (True, False)


@pytest.mark.postgres
def test_on_postgresql_a_claim_and_the_read_of_its_run_are_one_round_trip(tmp_path):
    """The claim's statement returns the claimed run as the turn reads it (a read of its own
    was one more round trip per claim)."""
    from psycopg import pq

    agent = make_agent([say("hi")])
    with code_defines(agent):
        register([agent], actor="admin")
        # The first claim on a connection prepares the statement: a round trip of its own.
        assert store.claim(submit(agent.name, "hi", actor="alice").pk, "w1") is not None
        run = submit(agent.name, "hi", actor="alice")
        pgconn = store.connection().connection.pgconn
        with (tmp_path / "trace").open("w+") as trace:
            pgconn.trace(trace.fileno())
            pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
            try:
                claimed = store.claim(run.pk, "w1")
            finally:
                pgconn.untrace()
            trace.seek(0)
            round_trips = sum(1 for line in trace if "\tReadyForQuery" in line)
    assert round_trips == 1
    assert claimed is not None and as_read(claimed) == as_read(Run.objects.get(pk=run.pk))
    assert (claimed.has_operations, claimed.has_interactions, claimed.has_rules) == (
        False,
        False,
        False,
    )
    assert claimed.registered_fingerprint == agent.fingerprint


def test_it_commits_each_record_with_its_event(claimed):
    op = intent(claimed)
    store.write_outcome(claimed, op, status=OperationStatus.COMPLETED, result={"ok": True})
    saved = Operation.objects.get(pk=op.pk)
    assert (saved.status, saved.result, saved.attempts) == ("completed", {"ok": True}, 1)
    kinds = list(Event.objects.filter(run=claimed).order_by("id").values_list("kind", "data"))
    assert kinds[-2:] == [
        ("intent", {"call": "tool", "name": "get_order", "attempt": 1}),
        (
            "outcome",
            {
                "call": "tool",
                "name": "get_order",
                "status": "completed",
                "is_error": False,
                "error": "",
            },
        ),
    ]
    assert not _in_transaction()


def test_it_refuses_every_write_of_a_worker_whose_fence_is_stale(claimed):
    old = claimed
    with taken_over(old) as new:
        op = intent(new)
        before = writes_of(old)
        with pytest.raises(LeaseLost):
            intent(old, key="step-1/tool/b")
        with pytest.raises(LeaseLost):
            intent(old, existing=op)
        with pytest.raises(LeaseLost):
            store.write_outcome(old, op, status=OperationStatus.COMPLETED, result={"stolen": 1})
        with pytest.raises(LeaseLost):
            store.record(
                old,
                key="step-1/tool/c",
                name="get_order",
                policy="safe",
                input={},
                input_hash="h",
                status=OperationStatus.COMPLETED,
                result={},
                is_error=False,
            )
        with pytest.raises(LeaseLost):
            store.transition(old, RunStatus.COMPLETED, "completed", output="stolen")
        assert writes_of(old) == before
        saved = Operation.objects.get(pk=op.pk)
        assert (saved.status, saved.result, saved.attempts) == ("started", None, 1)
        run = Run.objects.get(pk=old.pk)
        assert (run.status, run.lease_owner, run.output) == (RunStatus.RUNNING, "w2", "")
        # The new owner's writes land.
        store.write_outcome(new, op, status=OperationStatus.COMPLETED, result={"ok": 1})
        assert Operation.objects.get(pk=op.pk).result == {"ok": 1}


def test_it_refuses_the_writes_of_a_cancelled_run(claimed):
    op = intent(claimed)
    cancel(claimed.pk, actor="alice")
    before = writes_of(claimed)
    with pytest.raises(LeaseLost):
        store.write_outcome(claimed, op, status=OperationStatus.COMPLETED, result={"late": 1})
    with pytest.raises(LeaseLost):
        intent(claimed, key="step-2/model")
    with pytest.raises(LeaseLost):
        store.transition(claimed, RunStatus.COMPLETED, "completed", output="late")
    assert writes_of(claimed) == before
    assert Run.objects.get(pk=claimed.pk).status == RunStatus.CANCELLED
    assert Operation.objects.get(pk=op.pk).status == OperationStatus.STARTED


def test_a_crash_during_the_outcome_rolls_it_back_whole(claimed):
    op = intent(claimed)
    before = writes_of(claimed)
    with crash_at("during_outcome"), pytest.raises(SimulatedCrash):
        store.write_outcome(claimed, op, status=OperationStatus.COMPLETED, result={"ok": 1})
    assert not _in_transaction()
    assert writes_of(claimed) == before
    assert Operation.objects.get(pk=op.pk).status == OperationStatus.STARTED
    # The connection is usable again, and the next owner's outcome lands.
    with taken_over(claimed) as new:
        store.write_outcome(new, op, status=OperationStatus.COMPLETED, result={"ok": 1})
    assert Operation.objects.get(pk=op.pk).status == OperationStatus.COMPLETED


def test_events_are_published_only_after_their_write_committed(claimed, settings):
    settings.AGENTOPS_PUBLISH = "tests.runtime.test_store.collect"
    PUBLISHED.clear()
    PUBLISHED_EVENTS.clear()
    op = intent(claimed)
    store.write_outcome(claimed, op, status=OperationStatus.COMPLETED, result={"ok": 1})
    # Held, then carried by the next intent: one record, two events, in log order.
    second = intent(claimed, key="step-1/tool/b")
    store.write_outcome(claimed, second, status=OperationStatus.COMPLETED, result={}, hold=True)
    intent(claimed, key="step-1/tool/c")
    store.transition(claimed, RunStatus.COMPLETED, "completed", output="hi")
    kinds = ["intent", "outcome", "intent", "outcome", "intent", "completed"]
    assert [(kind, True) for kind in kinds] == PUBLISHED
    # Each as the ORM reads it back, every column built, with its own id.
    assert [e.get_deferred_fields() for e in PUBLISHED_EVENTS] == [set()] * len(kinds)
    read = Event.objects.filter(run=claimed, kind__in=set(kinds)).order_by("id")
    assert [as_read(e) for e in PUBLISHED_EVENTS] == [as_read(e) for e in read]


def test_inside_a_callers_transaction_a_write_is_part_of_it(claimed, settings):
    settings.AGENTOPS_PUBLISH = "tests.runtime.test_store.collect"
    PUBLISHED.clear()
    before = writes_of(claimed)

    class Abort(Exception):
        pass

    with pytest.raises(Abort), transaction.atomic():
        intent(claimed)
        raise Abort
    assert writes_of(claimed) == before
    assert PUBLISHED == []


def test_a_fence_hook_sees_and_decides_every_fenced_write(claimed):
    """tests/reliability logs every fenced write through the fence hook, and substitutes the
    current fence to show its detector works: both need every write to go through the hook."""
    seen: list[tuple[int, str]] = []

    @contextmanager
    def watched(run: Run) -> Iterator[tuple[int, str]]:
        try:
            yield run.fence, RunStatus.RUNNING
        except LeaseLost:
            seen.append((run.fence, "refused"))
            raise
        seen.append((run.fence, "landed"))

    with fence_hook(watched):
        op = intent(claimed)
        store.write_outcome(claimed, op, status=OperationStatus.COMPLETED, result={"ok": 1})
        store.renew(claimed)
        with taken_over(claimed), pytest.raises(LeaseLost):
            intent(claimed, key="step-2/model")
    fence = claimed.fence
    assert seen == [(fence, "landed")] * 3 + [(fence, "refused")]

    @contextmanager
    def unchecked(run: Run) -> Iterator[tuple[int, str]]:
        # What a worker without the check would do: write over whatever the run holds now.
        yield Run.objects.values_list("fence", "status").get(pk=run.pk)

    with fence_hook(unchecked):
        intent(claimed, key="step-2/model")  # the stale write lands: no check is left
    assert Operation.objects.filter(run=claimed, key="step-2/model").exists()


@pytest.mark.parametrize(
    "moment",
    [
        dt.datetime(2026, 12, 2, 13, 5, 9, 123456, tzinfo=dt.UTC),
        dt.datetime(2026, 12, 2, 13, 5, 9, tzinfo=dt.UTC),  # no microseconds: none printed
        dt.datetime(2026, 12, 2, 14, 5, 9, 5, tzinfo=zoneinfo.ZoneInfo("Europe/Paris")),
        dt.datetime(2026, 12, 2, 13, 5, 9, 5, tzinfo=dt.timezone(dt.timedelta(hours=-3))),
        None,
    ],
)
def test_a_record_writes_a_time_as_djangos_adapter_does(moment):
    db = store.connection()
    assert dialect_of(db).moment(db, moment) == db.ops.adapt_datetimefield_value(moment)


@pytest.mark.parametrize(
    "value",
    [
        {"call": OperationKind.TOOL, "status": "completed", "is_error": False, "error": ""},
        {"b": [1, 1.5, 1e16, None, True], "a": "é\u2028\x01\U0001f600", "n": 2**70},
        "text",
        [],
    ],
)
def test_a_record_writes_a_json_value_as_djangos_adapter_does(value):
    db = store.connection()
    ours, djangos = dialect_of(db).json(db, value), db.ops.adapt_json_value(value, None)
    if isinstance(djangos, str):  # SQLite: the text
        assert ours == djangos
    else:  # PostgreSQL: psycopg's Jsonb, which encodes it as it is sent
        assert type(ours) is type(djangos)
        assert (ours.obj, ours.dumps(ours.obj)) == (djangos.obj, djangos.dumps(djangos.obj))
    assert dialect_of(db).json(db, None) is None  # SQL NULL, as the ORM saves None


@pytest.mark.postgres
def test_on_postgresql_a_runs_records_look_their_parameters_dumpers_up_once(claimed, monkeypatch):
    """The store keeps one cursor per connection. psycopg keeps a cursor's dumpers while it
    runs the same statement again, as a run's records do (each intent carrying the outcome
    before it); a new cursor per record looked a record's 25 parameters' dumpers up again."""
    from psycopg.adapt import AdaptersMap

    def carried_intent(key: str) -> Operation:
        op = intent(claimed, key=key)
        store.write_outcome(claimed, op, status=OperationStatus.COMPLETED, result={}, hold=True)
        return op

    carried_intent("step-1/tool/a")
    carried_intent("step-2/model")  # the first intent that carries an outcome
    lookups: list[type] = []
    get_dumper = AdaptersMap.get_dumper

    def counted(self: AdaptersMap, cls: type, format: Any) -> Any:
        lookups.append(cls)
        return get_dumper(self, cls, format)

    monkeypatch.setattr(AdaptersMap, "get_dumper", counted)
    carried_intent("step-2/tool/b")
    carried_intent("step-3/model")
    assert lookups == []
    assert Operation.objects.filter(run=claimed, status="completed").count() == 3


@pytest.mark.postgres
def test_on_postgresql_a_new_connection_or_a_closed_cursor_gets_a_cursor_of_its_own(claimed):
    db = store.connection()
    dialect = dialect_of(db)
    with dialect.cursor(db) as kept:
        pass
    intent(claimed)
    with dialect.cursor(db) as same:
        assert same is kept
    kept.close()  # whatever closed it, the next write is not refused for it
    intent(claimed, key="step-2/model")
    with dialect.cursor(db) as fresh:
        assert fresh is not kept and not fresh.closed
    db.close()  # a dropped connection: Django opens a new one, whose cursor is new
    intent(claimed, key="step-3/model")
    with dialect.cursor(db) as reopened:
        assert reopened is not fresh and reopened.connection is db.connection
    assert writes_of(claimed)[0] == 3
