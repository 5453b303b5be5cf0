"""The runtime's threads give their database connections back to the pool when they end.

A pooled connection returns to its pool only when it is closed. A process starts threads for its
own work, and its heartbeat renews the lease of every run it advances: were a thread to end, or
the heartbeat to go on, holding its connection, the pool would be dry after max_size of them,
and every request of the process would then wait out the pool's timeout.
"""

from __future__ import annotations

from typing import cast

import pytest
from django.conf import settings as django_settings
from django.db import connection
from psycopg_pool import ConnectionPool

from agentops.postgres.base import DatabaseWrapper
from runtime import submit, threads
from runtime.heartbeat import HEARTBEATS
from runtime.models import Run
from runtime.registry import code_defines, register
from tests.conftest import make_agent, say

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def pool() -> ConnectionPool:
    """This process's pool of connections (PostgreSQL, the pool on)."""
    found = cast(DatabaseWrapper, connection).pool
    assert found is not None
    return found


def lifetimes() -> int:
    """Three pools' worth of thread lifetimes: a leak of one connection each would show."""
    return 3 * django_settings.DB_POOL["max_size"]


def in_use() -> int:
    """Connections of the pool held now (by this process's other threads, if any: in a long
    test session an earlier test's thread may keep one)."""
    stats = pool().get_stats()
    return int(stats["pool_size"]) - int(stats["pool_available"])


def assert_the_pool_is_whole(held_before: int) -> None:
    # This thread can still have a connection (PoolTimeout otherwise), and none more is held.
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    connection.close()
    assert in_use() == held_before


def test_threads_that_queried_and_ended_leave_the_pool_whole() -> None:
    connection.close()
    held_before = in_use()
    for i in range(lifetimes()):

        def query() -> None:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")

        thread = threads.thread(query, name=f"query-{i}")
        thread.start()
        thread.join()

    assert_the_pool_is_whole(held_before)


def test_heartbeats_that_beat_leave_the_pool_whole(settings) -> None:
    settings.AGENTOPS_LEASE_SECONDS = 0.003  # a beat every millisecond
    agent = make_agent([say("hi")])
    with code_defines(agent):
        register([agent], actor="admin")
        # Not claimed: each claim's first beat finds the lease not held and ends its renewals.
        run = Run.objects.get(pk=submit(agent.name, "hi", actor="alice").pk)
    connection.close()
    held_before = in_use()

    for _ in range(lifetimes()):
        token = HEARTBEATS.add(run)
        with HEARTBEATS._changed:
            ended = HEARTBEATS._changed.wait_for(lambda t=token: t not in HEARTBEATS._claims, 60)
        assert ended, "the heartbeat never beat"
        HEARTBEATS.remove(token)

    assert_the_pool_is_whole(held_before)
