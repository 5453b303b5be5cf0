"""Committed events -> the browsers that show them, through Channels groups.

`publish` is the runtime's AGENTOPS_PUBLISH hook: it runs after the event's transaction
commits, in whichever process committed it (a web process or a worker). It sends only ids; the
websocket consumer renders the fragments from the database, so a pushed fragment equals what a
fresh page shows. Nothing is lost if a push fails: the event log is the outbox, and a page
catches up from it when its socket reconnects, and every half minute while it stays open
(agentops.consumers.CATCH_UP_SECONDS).

A web process joins each group once, whatever the number of its sockets in it (`listen`): an
event is one message to each process, which hands it to its sockets, not one per socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import uuid
import weakref
from concurrent.futures import Future
from typing import Any, Protocol

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


# The sends a process has in flight at once, on each loop. A bulk action commits hundreds of
# events in a moment: a send each, all at once, emptied the Redis layer's connection pool ("Too
# many connections") and overran the channels' capacity (settings.CHANNEL_LAYERS), and most of
# those updates were lost. The rest wait their turn, oldest first.
SENDS_IN_FLIGHT = 8
_in_flight: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


async def _send(layer: BaseChannelLayer, groups: list[str], message: dict[str, Any]) -> None:
    loop = asyncio.get_running_loop()
    turn = _in_flight.get(loop)
    if turn is None:
        turn = _in_flight[loop] = asyncio.Semaphore(SENDS_IN_FLIGHT)
    async with turn:
        await _send_now(layer, groups, message)


async def _send_now(layer: BaseChannelLayer, groups: list[str], message: dict[str, Any]) -> None:
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
        # Not raised: the pages catch up from the event log (agentops.consumers._catch_up).
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


# --- this process's listeners -------------------------------------------------------------------


class Listener(Protocol):
    def deliver(self, message: dict[str, Any]) -> None:
        """A message of a group it listens to (called on the loop, must not block)."""

    async def lost(self) -> None:
        """The group's messages stopped (the channel layer failed): close, so the page
        reconnects and catches up from the event log."""


class _Group:
    """One group's listeners in this process, and the one channel that receives for them."""

    def __init__(self, layer: BaseChannelLayer, name: str) -> None:
        self.layer, self.name = layer, name
        self.loop = asyncio.get_running_loop()
        self.listeners: set[Listener] = set()
        self.channel = ""
        self.joined = asyncio.ensure_future(self._join())
        self.receiving: asyncio.Task[None] | None = None
        self.renewing: asyncio.Task[None] | None = None

    async def _join(self) -> None:
        self.channel = await self.layer.new_channel()
        await self.layer.group_add(self.name, self.channel)
        self.receiving = asyncio.ensure_future(self._receive())
        self.renewing = asyncio.ensure_future(self._renew())

    async def _renew(self) -> None:
        """Add the channel to the group again, four times per `group_expiry`.

        Both layers drop a membership `group_expiry` seconds after it was added (24 hours by
        default; channels_redis at each group_send), however busy the group. Every socket of
        this process that shows the group shares this channel, so while one of them stays
        open the channel is never added anew: a day after it joined, the pages would stop
        hearing the group, their sockets still open and answering pings.
        """
        period = max(float(getattr(self.layer, "group_expiry", 86400)), 1.0) / 4
        while True:
            await asyncio.sleep(period)
            try:
                await self.layer.group_add(self.name, self.channel)
            except Exception as exc:  # the layer is down: the next renewal tries again
                log.warning("live updates of %s: renewing the group failed: %s", self.name, exc)

    async def _receive(self) -> None:
        try:
            while True:
                message = await self.layer.receive(self.channel)
                for listener in list(self.listeners):
                    listener.deliver(message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("live updates of %s stopped: %s", self.name, exc)
            if self.renewing is not None:
                self.renewing.cancel()
            if _groups.get(self.name) is self:
                del _groups[self.name]
            for listener in list(self.listeners):
                await listener.lost()
            # Its channel out of the group, if the layer answers: messages would pile up there.
            with contextlib.suppress(Exception):
                await self.layer.group_discard(self.name, self.channel)

    def failed(self) -> bool:
        joined = self.joined
        return joined.done() and (joined.cancelled() or joined.exception() is not None)

    async def leave(self) -> None:
        self.joined.cancel()
        for task in (self.receiving, self.renewing):
            if task is not None:
                task.cancel()
        if self.channel:
            await self.layer.group_discard(self.name, self.channel)


# By group name, while a listener of this process listens (on the loop that serves the
# websockets: a test may run several loops one after another).
_groups: dict[str, _Group] = {}


async def listen(name: str, listener: Listener) -> None:
    """Have `listener` receive the messages of group `name`, through this process's channel."""
    layer = get_channel_layer()
    assert layer is not None
    group = _groups.get(name)
    if group is None or group.loop is not asyncio.get_running_loop() or group.failed():
        group = _groups[name] = _Group(layer, name)
    group.listeners.add(listener)
    try:
        await asyncio.shield(group.joined)
    except Exception:
        group.listeners.discard(listener)
        raise


async def unlisten(name: str, listener: Listener) -> None:
    group = _groups.get(name)
    if group is None or listener not in group.listeners:
        return
    group.listeners.discard(listener)
    if not group.listeners:
        del _groups[name]
        await group.leave()
