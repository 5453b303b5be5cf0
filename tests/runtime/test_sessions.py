"""One unfinished run per session (S5): submit and retry check and write in one transaction,
and the database's rule decides the races the checks cannot see."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from runtime import RetryRejected, SessionBusy, retry, submit
from runtime.llm.scripted import say
from runtime.models import UNFINISHED_STATUSES, Event, Run, RunStatus
from runtime.testing import run_until_idle
from tests.conftest import make_agent
from tests.runtime.threads import at_once, won

ROUNDS = 60


def unfinished(session_id) -> int:
    return Run.objects.filter(session_id=session_id, status__in=UNFINISHED_STATUSES).count()


@pytest.fixture
def failing(define):
    """An agent whose model always fails: each run ends failed, and may be retried."""
    return define(make_agent([RuntimeError("provider down")] * 20, name="failing"))


def failed_run(agent) -> Run:
    run = run_until_idle(submit(agent.name, "first", actor="alice").pk)
    assert run.status == RunStatus.FAILED
    return run


def test_it_refuses_a_message_while_the_session_has_an_unfinished_run(failing):
    first = submit(failing.name, "first", actor="alice")
    runs = Run.objects.count()
    with pytest.raises(SessionBusy, match=str(first.pk)):
        submit(failing.name, "second", actor="bob", session=first.session_id)
    assert Run.objects.count() == runs
    assert not Event.objects.filter(actor="bob").exists()


def test_it_refuses_to_retry_a_failed_run_while_a_later_one_is_unfinished(failing):
    first = failed_run(failing)
    later = submit(failing.name, "second", actor="alice", session=first.session_id)
    with pytest.raises(RetryRejected, match=str(later.pk)):
        retry(first.pk, actor="ops")
    first.refresh_from_db()
    assert first.status == RunStatus.FAILED
    assert unfinished(first.session_id) == 1


def test_the_database_refuses_a_second_unfinished_run_in_a_session(failing):
    first = submit(failing.name, "first", actor="alice")
    second = failed_run(failing)
    with pytest.raises(IntegrityError), transaction.atomic():
        Run.objects.filter(pk=second.pk).update(session=first.session, seq=2, status="queued")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_retry_and_submit_at_once_leave_one_unfinished_run_and_the_loser_a_typed_error(failing):
    for i in range(ROUNDS):
        first = failed_run(failing)
        session = first.session_id
        racing = [
            lambda run=first.pk: retry(run, actor="ops"),
            lambda s=session, m=f"next {i}": submit(failing.name, m, actor="alice", session=s),
        ]
        if i % 2:
            racing.reverse()
        outcomes = at_once(racing)
        assert sum(map(won, outcomes)) == 1, outcomes
        loser = next(o for o in outcomes if not won(o))
        assert isinstance(loser, RetryRejected | SessionBusy), repr(loser)
        assert loser.message
        assert unfinished(session) == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_submits_at_once_to_one_session_start_one_run(define):
    agent = define(make_agent([say("hi")] * 20, name="chatty"))
    for _ in range(ROUNDS // 2):
        first = run_until_idle(submit(agent.name, "first", actor="alice").pk)
        session = first.session_id
        outcomes = at_once(
            [
                lambda n=n, s=session: submit(agent.name, "again", actor=f"op{n}", session=s)
                for n in range(4)
            ]
        )
        assert sum(map(won, outcomes)) == 1, outcomes
        assert all(isinstance(o, SessionBusy) for o in outcomes if not won(o)), outcomes
        assert unfinished(session) == 1
        assert list(
            Run.objects.filter(session_id=session).order_by("seq").values_list("seq", flat=True)
        ) == [1, 2]
