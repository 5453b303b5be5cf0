"""Django's PostgreSQL backend, its connection pool checking connections as below.

psycopg_pool's own check meets the dead connections of a pool one at a time, pausing between
them twice as long each time (0, 1, 2, 4 s, …). The faults that kill one idle connection kill
its idle neighbours with it (pg_terminate_backend, a server restart, a failover, a cut network):
with nine of ten dead, a request spent AGENTOPS_DB_POOL_TIMEOUT on the pauses alone and failed
with PoolTimeout, the server long back. So the first dead connection has every idle one checked
at once and the pool replaces the dead; the request then takes a live one, or the first new one,
without a pause.
"""

from __future__ import annotations

from typing import Any

from django.db.backends.postgresql import base
from psycopg_pool import ConnectionPool


def check(conn: Any) -> None:
    """The pool's check of an idle connection before it hands it out."""
    try:
        ConnectionPool.check_connection(conn)
    except Exception:
        # psycopg_pool marks the connection it is handing out with its pool.
        conn._pool.check()
        raise


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self) -> ConnectionPool | None:
        pool = super().pool
        if pool is not None:
            # Django passes the pool a check of its own (CONN_HEALTH_CHECKS) and refuses
            # another in OPTIONS["pool"]; psycopg_pool keeps it here.
            pool._check = check
        return pool
