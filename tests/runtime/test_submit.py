"""submit in a new session: the version's lock, the session, the run and its SUBMITTED event
written at once (one statement on PostgreSQL, one transaction on SQLite), returned as the ORM
reads them; nothing written when no registered version matches the code; the run handed to the
workers and its event published once, after the commit that wrote them."""

from __future__ import annotations

import datetime as dt
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, transaction

from runtime import Agent, NotFound, clock, store, submit, unregister
from runtime.models import AgentVersion, Event, EventKind, Run, Session
from runtime.testing import run_until_idle
from tests.conftest import make_agent, say
from tests.support.rows import as_read

ENQUEUED: list[tuple[str, bool]] = []
PUBLISHED: list[tuple[Event, bool]] = []
LONG = "Where is my order A1? It was due on Monday and the tracking page says nothing at all."


def _committed() -> bool:
    """Whether no transaction is open on the connection: an after-commit hook's check."""
    if connection.in_atomic_block:
        return False
    if connection.vendor == "postgresql":
        from psycopg.pq import TransactionStatus

        return connection.connection.info.transaction_status == TransactionStatus.IDLE
    return not connection.connection.in_transaction


def enqueue(run_id: str) -> None:
    """AGENTOPS_DISPATCH hook: the run handed over, and whether its write had committed."""
    ENQUEUED.append((run_id, _committed()))


def collect(event: Event) -> None:
    """AGENTOPS_PUBLISH hook: the event published, and whether its write had committed."""
    PUBLISHED.append((event, _committed()))


@pytest.fixture
def agent(define: Any) -> Agent:
    return define(make_agent([say("hi")] * 3))


@pytest.fixture
def hooks(agent: Agent, settings: Any) -> Iterator[None]:
    """The after-commit hooks recorded, from after the agent's registration on."""
    settings.AGENTOPS_DISPATCH = "tests.runtime.test_submit.enqueue"
    settings.AGENTOPS_PUBLISH = "tests.runtime.test_submit.collect"
    ENQUEUED.clear()
    PUBLISHED.clear()
    yield
    ENQUEUED.clear()
    PUBLISHED.clear()


def written() -> tuple[int, int, int]:
    return Session.objects.count(), Run.objects.count(), Event.objects.count()


def test_the_submitted_run_is_as_the_orm_reads_it_with_its_session(define):
    agent = define(make_agent([say("hi")]))
    run = submit(agent.name, "  " + LONG + "  ", actor="alice")
    assert as_read(run) == as_read(Run.objects.get(pk=run.pk))
    # Its session comes with it, not read again: as the ORM reads it too.
    assert Run.session.is_cached(run)
    chat = run.session
    assert as_read(chat) == as_read(Session.objects.get(pk=run.session_id))
    assert (run.status, run.seq, run.input, run.fence, run.transcript) == ("queued", 1, LONG, 0, [])
    assert (run.agent, run.version, run.fingerprint) == (agent.name, "1", agent.fingerprint)
    assert run.created_at == run.updated_at and run.finished_at is None
    assert (chat.agent, chat.title, chat.created_at) == (agent.name, LONG[:80], run.created_at)


def test_it_writes_what_the_orm_path_of_a_continued_session_writes(define):
    """The one-statement path and the ORM's (a message to an existing session) side by side:
    the same run and the same event, but for the run's place in its session."""
    agent = define(make_agent([say("hi")] * 2))
    with clock.frozen(dt.datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=dt.UTC)):
        first = submit(agent.name, "hello", actor="alice", title="  Order A1  ")
        first_read = as_read(Run.objects.get(pk=first.pk))
        first_event = Event.objects.get(run=first)
        run_until_idle(first.pk)
        second = submit(agent.name, "hello", actor="alice", session=first.session_id)
        second_event = Event.objects.filter(run=second).get()
    place = {"id", "seq"}
    second_read = as_read(Run.objects.get(pk=second.pk))
    assert {k: v for k, v in first_read.items() if k not in place} == {
        k: v for k, v in second_read.items() if k not in place
    }
    same = ("kind", "actor", "operation_key", "data", "created_at")
    assert [getattr(first_event, f) for f in same] == [getattr(second_event, f) for f in same]
    assert (first_event.kind, first_event.actor, first_event.operation_key) == (
        EventKind.SUBMITTED,
        "alice",
        "",
    )
    assert first_event.data == {"agent": agent.name, "version": "1"}
    chat = Session.objects.get(pk=first.session_id)
    assert (chat.agent, chat.title, chat.created_at) == (agent.name, "Order A1", first.created_at)
    assert first_event.created_at == first.created_at


@pytest.mark.parametrize(
    ("case", "version"),
    [
        ("not in the code", None),
        ("not registered", None),
        ("registered with other code", None),
        ("unregistered", None),
        ("another version asked for", "2"),
    ],
)
def test_without_a_matching_registered_version_it_writes_nothing(define, case, version):
    agent = make_agent([say("hi")])
    if case == "not in the code":
        define(make_agent([say("hi")], name="other"))
    elif case == "not registered":
        define(agent, register_them=False)
    elif case == "registered with other code":
        define(agent)
        define(make_agent([say("hi")], instructions="Changed."), register_them=False)
    elif case == "unregistered":
        define(agent)
        unregister(agent.name, agent.version, actor="admin")
    else:
        define(agent)
    before = written()
    which = f"version {version!r}" if version else "version"
    message = f"agent 'clerk' has no registered {which} that matches the code"
    with pytest.raises(NotFound) as error:
        submit(agent.name, "hi", actor="alice", version=version)
    assert error.value.message == message
    assert written() == before


def test_it_passes_over_a_version_whose_code_changed_for_an_older_one_that_matches(define):
    old = define(make_agent([say("hi")], version="1"))
    define(make_agent([say("hi")], version="2"))
    assert submit(old.name, "hi", actor="alice").version == "2"
    # Version 2's code changes under it (not registered again): submit falls back to 1.
    define(make_agent([say("hi")], version="2", instructions="Changed."), register_them=False)
    run = submit(old.name, "hi", actor="alice")
    assert (run.version, run.fingerprint) == ("1", old.fingerprint)
    assert Event.objects.get(run=run).data == {"agent": old.name, "version": "1"}
    with pytest.raises(NotFound):
        submit(old.name, "hi", actor="alice", version="2")


def test_the_newest_registration_wins_not_the_highest_version(define):
    define(make_agent([say("hi")], version="2"))
    agent = define(make_agent([say("hi")], version="1"))
    assert submit(agent.name, "hi", actor="alice").version == "1"
    assert submit(agent.name, "hi", actor="alice", version="2").version == "2"


@pytest.mark.django_db(transaction=True)
def test_it_hands_the_run_over_and_publishes_its_event_once_after_the_commit(agent, hooks):
    run = submit(agent.name, "hi", actor="alice")
    assert [(str(run.pk), True)] == ENQUEUED
    [(event, committed)] = PUBLISHED
    assert committed
    assert as_read(event) == as_read(Event.objects.get(run=run))
    # Inside a caller's transaction: only once it commits.
    ENQUEUED.clear()
    PUBLISHED.clear()
    with transaction.atomic():
        second = submit(agent.name, "again", actor="alice")
        assert (ENQUEUED, PUBLISHED) == ([], [])
    assert [(str(second.pk), True)] == ENQUEUED
    assert [(e.kind, e.run_id, c) for e, c in PUBLISHED] == [("submitted", second.pk, True)]


@pytest.mark.django_db(transaction=True)
def test_inside_a_callers_transaction_that_rolls_back_nothing_is_written_or_sent(agent, hooks):
    before = written()

    class Abort(Exception):
        pass

    with pytest.raises(Abort), transaction.atomic():
        submit(agent.name, "hi", actor="alice")
        raise Abort
    assert written() == before
    assert (ENQUEUED, PUBLISHED) == ([], [])
    # The connection is usable, and the next submit lands.
    submit(agent.name, "hi", actor="alice")
    assert len(ENQUEUED) == 1


@pytest.mark.django_db(transaction=True)
def test_a_failed_submit_inside_a_callers_transaction_leaves_it_usable(agent):
    with transaction.atomic():
        with pytest.raises(NotFound):
            submit(agent.name, "hi", actor="alice", version="9")
        run = submit(agent.name, "hi", actor="alice")
    assert Run.objects.filter(pk=run.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_it_is_one_round_trip_and_one_commit(agent, on_postgres):
    """The cut pinned: PostgreSQL gets one statement, committed alone (no BEGIN, no COMMIT);
    SQLite one transaction of its plain statements."""
    submit(agent.name, "warm", actor="alice")  # prepares the statement on this connection
    connection.ensure_connection()
    if on_postgres:
        from psycopg import pq

        with tempfile.NamedTemporaryFile(mode="w+") as trace:
            pgconn = connection.connection.pgconn
            pgconn.trace(trace.fileno())
            pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
            try:
                run = submit(agent.name, "hi", actor="alice")
            finally:
                pgconn.untrace()
            trace.seek(0)
            round_trips = sum(1 for line in trace if "\tReadyForQuery" in line)
        assert round_trips == 1
        # One commit wrote all three rows: they share the transaction id that wrote them.
        rows = " UNION ALL ".join(
            f"SELECT xmin FROM {model._meta.db_table} WHERE {column} = %s"
            for model, column in ((Session, "id"), (Run, "id"), (Event, "run_id"))
        )
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT count(*), count(DISTINCT xmin::text) FROM ({rows}) AS rows",
                [run.session_id, run.pk, run.pk],
            )
            assert cursor.fetchone() == (3, 1)
    else:
        statements: list[str] = []
        connection.connection.set_trace_callback(statements.append)
        try:
            submit(agent.name, "hi", actor="alice")
        finally:
            connection.connection.set_trace_callback(None)
        # sqlite3 reports a statement again for each trigger it fires (the status counts').
        sent = [s.split()[:3] for i, s in enumerate(statements) if s != statements[i - 1] or not i]
        assert sent == [
            ["BEGIN", "IMMEDIATE"],
            ["SELECT", "version,", "fingerprint"],
            ["INSERT", "INTO", Session._meta.db_table],
            ["INSERT", "INTO", Run._meta.db_table],
            ["INSERT", "INTO", Event._meta.db_table],
            ["COMMIT"],
        ], statements


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_it_waits_for_an_unregister_holding_the_version_and_passes_it_over(define):
    """The registration's row lock orders submit against unregister: while an unregister holds
    it, submit waits; once that commits, the version is passed over for an older match."""
    old = define(make_agent([say("hi")], version="1"))
    define(make_agent([say("hi")], version="2"))
    outcome: list[Any] = []

    def submitting() -> None:
        try:
            outcome.append(submit(old.name, "hi", actor="alice"))
        except BaseException as exc:
            outcome.append(exc)
        finally:
            connection.close()

    with transaction.atomic():
        # What unregister does first: lock the row it retires.
        row = AgentVersion.objects.select_for_update().get(agent=old.name, version="2")
        side = threading.Thread(target=submitting)
        side.start()
        time.sleep(0.5)
        assert side.is_alive() and outcome == []  # waiting for the lock
        store.retire_version(row, actor="admin", now=clock.now())
    side.join(timeout=30)
    [run] = outcome
    assert isinstance(run, Run), run
    assert (run.version, run.fingerprint) == ("1", old.fingerprint)
