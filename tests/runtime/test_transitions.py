"""The one transition table, RUN_TRANSITIONS, enumerated: every move it allows lands through the
store, every other one is refused with a clear error and changes nothing."""

from __future__ import annotations

import itertools

import pytest

from runtime import InvalidTransition, clock, store, submit
from runtime.models import RUN_TRANSITIONS, Event, EventKind, Run, RunStatus
from tests.conftest import make_agent, say

pytestmark = pytest.mark.django_db

PAIRS = list(itertools.product(RunStatus, RunStatus))


def test_the_table_names_every_status_and_nothing_else():
    assert set(RUN_TRANSITIONS) == set(RunStatus)
    assert set().union(*RUN_TRANSITIONS.values()) <= set(RunStatus)
    # The ends are ends.
    assert RUN_TRANSITIONS[RunStatus.COMPLETED] == RUN_TRANSITIONS[RunStatus.CANCELLED] == set()


@pytest.fixture
def run_in(define):
    agent = define(make_agent([say("hi")]))

    def _run_in(status: str) -> Run:
        run = submit(agent.name, "hi", actor="alice")
        # The state forced directly, as the crash tests do: this is setup, not a move.
        Run.objects.filter(pk=run.pk).update(status=status)
        run.refresh_from_db()
        return run

    return _run_in


@pytest.mark.parametrize(("source", "target"), PAIRS, ids=[f"{s}->{t}" for s, t in PAIRS])
def test_a_guarded_move_lands_exactly_when_the_table_allows_it(run_in, source, target):
    run = run_in(source)
    before = Run.objects.values().get(pk=run.pk)
    if target in RUN_TRANSITIONS[source]:
        assert store.move_run(run.pk, target, sources=[source], now=clock.now())
        assert Run.objects.get(pk=run.pk).status == target
    else:
        with pytest.raises(InvalidTransition, match=f"from {source} to {target}"):
            store.move_run(run.pk, target, sources=[source], now=clock.now())
        assert Run.objects.values().get(pk=run.pk) == before


@pytest.mark.parametrize("target", list(RunStatus))
def test_the_owning_worker_moves_out_of_running_only_where_the_table_allows(define, target):
    agent = define(make_agent([say("hi")]))
    run = store.claim(submit(agent.name, "hi", actor="alice").pk, "w1")
    assert run is not None
    before = (Run.objects.values().get(pk=run.pk), Event.objects.filter(run=run).count())
    if target in RUN_TRANSITIONS[RunStatus.RUNNING]:
        store.transition(run, target, EventKind.BLOCKED)
        assert Run.objects.get(pk=run.pk).status == target
    else:
        with pytest.raises(InvalidTransition, match=f"from running to {target}"):
            store.transition(run, target, EventKind.BLOCKED)
        after = (Run.objects.values().get(pk=run.pk), Event.objects.filter(run=run).count())
        assert after == before


def test_a_move_from_several_sources_is_refused_if_one_of_them_is_not_allowed(run_in):
    run = run_in(RunStatus.FAILED)
    with pytest.raises(InvalidTransition, match="from completed to queued"):
        store.move_run(
            run.pk,
            RunStatus.QUEUED,
            sources=[RunStatus.FAILED, RunStatus.COMPLETED],
            now=clock.now(),
        )
    assert Run.objects.get(pk=run.pk).status == RunStatus.FAILED
