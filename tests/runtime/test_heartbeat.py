"""The heartbeat (E3): one thread per process renews the lease of each claim in progress, a third
of the lease after its start and after each renewal, and stops for a claim that ended or lost
its lease (runtime/heartbeat.py).

The renewals are seen in the database, through the heartbeat's own connection: these tests
commit (transaction=True), and the lease is a fraction of a second long.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from django.db import connection
from django.db.models import F

from runtime import store, submit
from runtime.heartbeat import HEARTBEATS
from runtime.models import Run
from runtime.registry import code_defines, register
from tests.conftest import make_agent, say

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = 0.3  # a renewal every 0.1 s


@pytest.fixture
def claim(settings) -> Iterator[Callable[[], Run]]:
    settings.AGENTOPS_LEASE_SECONDS = LEASE
    agent = make_agent([say("hi")])
    with code_defines(agent):
        register([agent], actor="admin")

        def claimed() -> Run:
            run = store.claim(submit(agent.name, "hi", actor="alice").pk, "w1")
            assert run is not None
            return run

        yield claimed


def lease_of(run: Run) -> object:
    return Run.objects.values_list("lease_expires_at", flat=True).get(pk=run.pk)


def leases_seen(run: Run, count: int) -> list[object]:
    """The run's lease read until it has taken `count` values after the first (a minute at
    most: a heartbeat that never beats fails here, not by hanging)."""
    seen = [lease_of(run)]
    deadline = time.monotonic() + 60
    while len(seen) <= count and time.monotonic() < deadline:
        time.sleep(LEASE / 10)
        lease = lease_of(run)
        if lease != seen[-1]:
            seen.append(lease)
    return seen


def heartbeat_threads() -> int:
    return sum(t.name == "agentops-heartbeat" for t in threading.enumerate())


def test_e3_one_thread_renews_every_claim_of_the_process(claim) -> None:
    first, second = claim(), claim()
    tokens = [HEARTBEATS.add(first), HEARTBEATS.add(second)]
    try:
        for run in (first, second):
            seen = leases_seen(run, 2)
            assert len(seen) == 3, f"run {run.pk}: renewed {len(seen) - 1} times, not 2"
            assert seen == sorted(seen)  # each renewal moves the lease on
        assert heartbeat_threads() == 1
    finally:
        for token in tokens:
            HEARTBEATS.remove(token)


def test_e3_no_renewal_once_the_claim_ended(claim) -> None:
    run = claim()
    token = HEARTBEATS.add(run)
    assert len(leases_seen(run, 1)) == 2
    HEARTBEATS.remove(token)
    ended_with = lease_of(run)
    time.sleep(3 * LEASE)  # nine beats' time
    assert lease_of(run) == ended_with


def test_e3_a_lost_lease_ends_the_renewals_of_that_claim_alone(claim) -> None:
    lost, kept = claim(), claim()
    lost_token, kept_token = HEARTBEATS.add(lost), HEARTBEATS.add(kept)
    try:
        # Another worker took the run over (or an operator cancelled it): a new fence.
        Run.objects.filter(pk=lost.pk).update(fence=F("fence") + 1)
        taken_with = lease_of(lost)
        assert len(leases_seen(kept, 3)) == 4  # the other claim is renewed all along
        assert lease_of(lost) == taken_with  # the lost claim's renewals wrote nothing
        with HEARTBEATS._changed:
            assert (lost_token in HEARTBEATS._claims, kept_token in HEARTBEATS._claims) == (
                False,
                True,
            )
    finally:
        HEARTBEATS.remove(lost_token)
        HEARTBEATS.remove(kept_token)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_a_forked_worker_starts_its_own_heartbeat(claim) -> None:
    run = claim()
    token = HEARTBEATS.add(run)
    try:
        connection.close()  # not shared with the child
        pid = os.fork()
        if pid == 0:  # the child: no claims of its parent's, no thread yet, a lock of its own
            fresh = HEARTBEATS._thread is None and not HEARTBEATS._claims
            os._exit(0 if fresh and HEARTBEATS._changed.acquire(timeout=5) else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        HEARTBEATS.remove(token)
