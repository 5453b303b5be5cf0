"""The web process holds at most the pool's connections, however many requests it serves.

Daphne runs each synchronous view on a thread of its own (Django's ASGI handler gives every
request its own thread-sensitive context); each thread used to open a connection of its own.
The requests here go through the console's ASGI handler (agentops.handlers), all at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, cast

import pytest
from channels.testing import HttpCommunicator
from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from psycopg_pool import ConnectionPool

from agentops import selectors
from agentops.handlers import SyncStackASGIHandler
from agentops.postgres.base import DatabaseWrapper

REPO = Path(__file__).resolve().parents[2]


def pool() -> ConnectionPool:
    """This process's pool of connections (PostgreSQL, the pool on)."""
    found = cast(DatabaseWrapper, connection).pool
    assert found is not None
    return found


def connections_to_this_database() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_share_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    bound = settings.DB_POOL["max_size"]
    assert bound > 1
    assert pool().max_size == bound

    operator = User.objects.create_user("pooled", password="x")
    operator.user_permissions.add(*Permission.objects.filter(content_type__app_label="agentops"))
    client = Client()
    client.force_login(operator)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    # The test's own connection goes back to the pool: the requests may take every slot.
    connection.close()
    # And the requests get a pool of their own: a connection that a thread of an earlier test
    # still holds (a thread's connection goes back only when the thread closes it) would leave
    # the barrier below a slot short, and every request would time out.
    stats = pool().get_stats()
    held_elsewhere = stats["pool_size"] - stats["pool_available"]  # open, and counted below
    connection.close_pool()

    # Each request, while it holds its connection, counts the connections to the database and
    # waits until a whole pool's worth of requests is inside: the pool is then full.
    seen: list[int] = []
    full_pool = threading.Barrier(bound)
    inbox = selectors.inbox

    def counting_inbox(*args: Any, **kwargs: Any) -> Any:
        result = inbox(*args, **kwargs)
        seen.append(connections_to_this_database())
        full_pool.wait(timeout=60)
        return result

    monkeypatch.setattr(selectors, "inbox", counting_inbox)
    requests = 3 * bound

    async def serve_all() -> list[int]:
        handler = SyncStackASGIHandler()
        communicators = [
            HttpCommunicator(
                handler, "GET", "/", headers=[(b"host", b"testserver"), (b"cookie", cookie)]
            )
            for _ in range(requests)
        ]
        responses = await asyncio.gather(*(c.get_response(timeout=120) for c in communicators))
        return [response["status"] for response in responses]

    statuses = asyncio.run(serve_all())

    assert statuses == [200] * requests, f"{held_elsewhere} held by other threads before"
    assert len(seen) == requests
    # Every slot was in use at once, and never one more.
    assert max(seen) == bound + held_elsewhere


def settings_of(**env: str) -> dict[str, Any]:
    """DATABASES["default"] as a process with this environment builds it (a server's
    DATABASE_URL unless `env` names one)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AGENTOPS_DB_POOL")}
    environ.update({"DATABASE_URL": "postgres://app@db.example:5432/agentops", **env})
    program = (
        "import json, django; from django.conf import settings; django.setup();"
        "print(json.dumps(settings.DATABASES['default'], default=str))"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        check=False,
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
    )
    if done.returncode:
        return {"error": done.stderr.strip().splitlines()[-1]}
    return dict(json.loads(done.stdout))


def test_the_pool_is_a_setting() -> None:
    default = settings_of()
    assert default["OPTIONS"]["pool"] == {"min_size": 1, "max_size": 10, "timeout": 10.0}
    assert default["CONN_MAX_AGE"] == 0

    sized = settings_of(AGENTOPS_DB_POOL_MIN_SIZE="2", AGENTOPS_DB_POOL_MAX_SIZE="4")
    assert sized["OPTIONS"]["pool"]["min_size"] == 2
    assert sized["OPTIONS"]["pool"]["max_size"] == 4

    off = settings_of(AGENTOPS_DB_POOL_MAX_SIZE="0")
    assert "pool" not in off["OPTIONS"]
    assert off["CONN_MAX_AGE"] == 60

    wrong = settings_of(AGENTOPS_DB_POOL_MIN_SIZE="5", AGENTOPS_DB_POOL_MAX_SIZE="4")
    assert wrong == {
        "error": "django.core.exceptions.ImproperlyConfigured: "
        "AGENTOPS_DB_POOL_MIN_SIZE must be between 0 and the max size"
    }


def fill_the_pool() -> int:
    """Every free slot of the pool opened at once, then given back: the pool holds all the
    idle connections it can, as after a burst of requests. How many that is (max_size, less
    any an earlier test's thread still holds in a long test session)."""
    stats = pool().get_stats()
    free = settings.DB_POOL["max_size"] - (stats["pool_size"] - stats["pool_available"])
    assert free > settings.DB_POOL["max_size"] // 2  # enough dead ones to outlast the timeout
    everyone_in = threading.Barrier(free)

    def hold() -> None:
        try:
            connection.ensure_connection()
            everyone_in.wait(timeout=60)
        finally:
            connection.close()

    threads = [threading.Thread(target=hold) for _ in range(free)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return free


def drop_every_connection() -> int:
    """What an operator's pg_terminate_backend does: every other connection to the database
    cut (the one that cuts them is one of the pool's, and survives)."""
    with pool().connection() as outside, outside.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        row = cursor.fetchone()
        assert row is not None
        return int(row[0])


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_request_is_served_after_every_idle_connection_was_cut() -> None:
    operator = User.objects.create_user("after-the-cut", password="x")
    operator.user_permissions.add(*Permission.objects.filter(content_type__app_label="agentops"))
    client = Client()
    client.force_login(operator)
    connection.close()
    idle = fill_the_pool()
    assert pool().get_stats()["pool_available"] == idle

    assert drop_every_connection() >= idle - 1

    assert client.get("/").status_code == 200
