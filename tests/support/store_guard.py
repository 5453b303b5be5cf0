"""Nothing outside `runtime.store` writes the runtime's tables.

A wrapper on every database connection of the test run sees each statement sent through
Django; an INSERT, UPDATE or DELETE on one of the runtime's tables is recorded with the product
module that issued it (the innermost frame in runtime, agentops, demo or bench, the models'
methods aside) unless that is
the store or a data migration. Test code that writes fixtures directly is not product code and
is not recorded. The store's hot path sends its statements on the DB-API connection itself, not
through Django, so it passes no wrapper: it is the store.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any

from django.db import connections
from django.db.backends.signals import connection_created

PRODUCT = ("runtime", "agentops", "demo", "bench")
_WRITE = re.compile(r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+\"?(\w+)\"?", re.IGNORECASE)

# (module, table, statement) of every write that did not come from the store.
violations: list[tuple[str, str, str]] = []
_TABLES: frozenset[str] = frozenset()


def runtime_tables() -> frozenset[str]:
    from runtime.models import (
        AgentVersion,
        ApprovalReceipt,
        ApprovalTimer,
        ApprovalVote,
        Event,
        Interaction,
        Operation,
        Run,
        Session,
        WorkItem,
    )

    # Approval rules are not here: they are configuration, written in the admin (and seeds),
    # validated by the model on every save.
    models = (
        Run,
        Operation,
        Interaction,
        Session,
        Event,
        AgentVersion,
        WorkItem,
        ApprovalVote,
        ApprovalTimer,
        ApprovalReceipt,
    )
    return frozenset(model._meta.db_table for model in models)


def writer(module: str) -> bool:
    """Whether product module `module` may write the runtime's tables."""
    return (
        module == "runtime.store"
        or module.startswith("runtime.store.")
        or (".migrations." in module)
    )


def _caller() -> str | None:
    frame = sys._getframe(2)
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        # The models' own methods (Event.save) are the ORM's layer: their caller decides.
        if module.partition(".")[0] in PRODUCT and module != "runtime.models":
            return module
        frame = frame.f_back
    return None


def _record(
    execute: Callable[..., Any], sql: str, params: Any, many: bool, context: dict[str, Any]
) -> Any:
    for table in _WRITE.findall(sql):
        if table in _TABLES:
            module = _caller()
            if module is not None and not writer(module):
                violations.append((module, table, sql[:200]))
            break
    return execute(sql, params, many, context)


def _wrap(sender: Any = None, connection: Any = None, **kwargs: Any) -> None:
    if _record not in connection.execute_wrappers:
        connection.execute_wrappers.append(_record)


def install() -> None:
    """Watch every connection, those open now and those opened later (threads included)."""
    global _TABLES  # noqa: PLW0603 - computed once the models are loaded
    _TABLES = runtime_tables()
    connection_created.connect(_wrap, weak=False)
    for connection in connections.all(initialized_only=True):
        _wrap(connection=connection)
