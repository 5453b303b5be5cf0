"""Committed events -> the browsers that show them, through Channels groups.

`publish` is the runtime's AGENTOPS_PUBLISH hook: it runs after the event's transaction
commits, in whichever process committed it (a web process or a worker). It sends only ids; the
websocket consumer renders the fragments from the database, so a pushed fragment equals what a
fresh page shows. Nothing is lost if a push fails: the event log is the outbox, and a page that
reconnects catches up from it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import uuid
from concurrent.futures import Future
from typing import Any

from channels.layers import BaseChannelLayer, InMemoryChannelLayer, get_channel_layer

from runtime import threads
from runtime.models import Event, EventKind

log = logging.getLogger(__name__)

INBOX_GROUP = "inbox"
# Events that record progress inside a run and never change its status: the inbox ignores them.
PROGRESS_KINDS = frozenset({EventKind.INTENT, EventKind.OUTCOME})
MESSAGE_TYPE = "live.event"


def run_group(run_id: uuid.UUID | str) -> str:
    return f"run-{run_id}"


def groups_for(event: Event) -> list[str]:
    """The groups that show `event`: its run's pages, and the inbox if it may change a status."""
    if event.run_id is None:
        return []
    groups = [run_group(event.run_id)]
    if event.kind not in PROGRESS_KINDS:
        groups.append(INBOX_GROUP)
    return groups


def publish(event: Event) -> None:
    """Tell the live pages that `event` committed (its id, run and kind; never its data)."""
    groups = groups_for(event)
    layer = get_channel_layer()
    if not groups or layer is None:
        return
    message = {
        "type": MESSAGE_TYPE,
        "event": event.pk,
        "run": str(event.run_id),
        "kind": event.kind,
    }
    loop = _loop_for(layer)
    if loop is None:
        return
    future = asyncio.run_coroutine_threadsafe(_send(layer, groups, message), loop)
    future.add_done_callback(_log_failure)


async def _send(layer: BaseChannelLayer, groups: list[str], message: dict[str, Any]) -> None:
    if isinstance(layer, InMemoryChannelLayer):
        # Local queues, no round trip: nothing would be gained by sending side by side.
        for group in groups:
            await layer.group_send(group, message)
        return
    # Side by side: the Redis layer's group_send is four round trips, and the inbox need not
    # wait for the run's pages (nor be held up by a failed send to them).
    await asyncio.gather(*(layer.group_send(group, message) for group in groups))


def _log_failure(future: Future[None]) -> None:
    exc = future.exception()
    if exc is not None:
        # Not raised: the browser catches up from the event log when it reconnects.
        log.warning("live update not delivered: %s", exc)


# --- event loops ---------------------------------------------------------------------------------
# The in-memory layer (embedded setup) keeps asyncio queues that only the loop serving the
# websockets may touch, so its sends run on that loop. A networked layer (Redis) is fed from one
# background loop per process, which keeps its connection open between events.

_consumer_loop: asyncio.AbstractEventLoop | None = None
_publisher: tuple[int, asyncio.AbstractEventLoop] | None = None
_publisher_lock = threading.Lock()


def attach_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Called by a consumer as it connects: the loop that serves this process's websockets."""
    global _consumer_loop  # noqa: PLW0603 - one loop serves a process's websockets
    _consumer_loop = loop


def _loop_for(layer: BaseChannelLayer) -> asyncio.AbstractEventLoop | None:
    if isinstance(layer, InMemoryChannelLayer):
        loop = _consumer_loop
        # No websocket was ever served by this process: nobody here can listen.
        return loop if loop is not None and loop.is_running() else None
    return _publisher_loop()


def _publisher_loop() -> asyncio.AbstractEventLoop:
    global _publisher  # noqa: PLW0603
    with _publisher_lock:
        # A forked worker inherits the variable but not the thread: start its own.
        if _publisher is None or _publisher[0] != os.getpid():
            loop = asyncio.new_event_loop()
            threads.thread(loop.run_forever, name="agentops-live-publisher").start()
            _publisher = (os.getpid(), loop)
        return _publisher[1]
