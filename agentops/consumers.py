"""The live console's websocket: pushes fresh fragments (htmx out-of-band swaps) as events commit.

A page opens a socket for what it shows (the inbox, a run, an approval, a reconciliation). The
socket requires a logged-in user allowed to see the console (the origin is checked in
agentops.asgi). On open, the page sends the last event id it has seen ({"after": N}); the
consumer answers with the fragments that changed since, which is how a reconnecting page
catches up from the event log. An event is rendered at once; the events that arrive while a
render is in flight are rendered together after it, so a burst costs one render more, not one
per event. A push may land while the page's own action is in flight: the page then keeps that
action's region and catches up when it ends (static/agentops/console.js).

The sockets of this process that show a page alike (the inbox, for users with the same filter and
permissions: LivePage.shared_by) share its renders: an event is rendered once for all of them
(SharedRender), not once per socket.
"""

from __future__ import annotations

import asyncio
import json
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from agentops import live
from agentops.views.common import VIEW
from agentops.views.fragments import LivePage, change_of, live_page, socket_request


@dataclass
class _Upcoming:
    """A render not started yet: what it will render, and for whom it is awaited."""

    render: Callable[[frozenset[str]], str]
    changes: set[str]
    done: asyncio.Future[tuple[int, str]]


@dataclass
class SharedRender:
    """The renders of one live page for every socket of this process that shows it alike.

    Renders start one at a time, each after the previous one ended, and are numbered in that
    order. The first socket to receive an event notes how many had started then (`need`): every
    render started later read the database after the event committed, so each socket that
    receives the same event takes the first of those (`render`), rendered once for all of them.
    A socket sends a render only if it is newer than the last one it sent, so a push never
    overtakes a newer one with older state; one that is older already showed what it was for.
    """

    # Renders kept for the sockets that receive an event after it was rendered; one that lags
    # further behind waits for the next render.
    KEPT = 8
    # Events noted (their ids: a few bytes each); an event forgotten waits for the next render.
    NOTED = 4096

    started: int = 0
    renders: dict[int, tuple[frozenset[str], asyncio.Future[tuple[int, str]]]] = field(
        default_factory=dict
    )
    upcoming: _Upcoming | None = None
    noted: OrderedDict[int, int] = field(default_factory=OrderedDict)
    turn: asyncio.Lock = field(default_factory=asyncio.Lock)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    sockets: int = 0

    def need(self, event: object = None) -> int:
        """The number of renders started when `event` (an id) first arrived here, or now: the
        renders numbered above it show the event."""
        if not isinstance(event, int):
            return self.started
        if event not in self.noted:
            self.noted[event] = self.started
            if len(self.noted) > self.NOTED:
                self.noted.popitem(last=False)
        return self.noted[event]

    async def render(
        self, after: int, changes: frozenset[str], render: Callable[[frozenset[str]], str]
    ) -> tuple[int, str]:
        """The first render numbered above `after` that covers `changes`: its number and HTML.

        One already started is taken; else the next one, which `render` renders (in a database
        thread) once the one in flight has ended."""
        for number in range(max(after, self.started - self.KEPT) + 1, self.started + 1):
            kept = self.renders.get(number)
            if kept is not None and changes <= kept[0]:
                # Shielded: a socket that closes while waiting must not cancel it for the rest.
                return await asyncio.shield(kept[1])
        if self.upcoming is None:
            done = asyncio.get_running_loop().create_future()
            self.upcoming = _Upcoming(render, set(), done)
            task = asyncio.create_task(self._start(self.upcoming))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        self.upcoming.changes |= changes
        return await asyncio.shield(self.upcoming.done)

    async def _start(self, upcoming: _Upcoming) -> None:
        async with self.turn:
            # From here on, what arrives waits for the next render.
            self.upcoming = None
            self.started += 1
            number, changes = self.started, frozenset(upcoming.changes)
            self.renders[number] = (changes, upcoming.done)
            self.renders.pop(number - self.KEPT, None)
            try:
                html = await database_sync_to_async(upcoming.render)(changes)
            except Exception as exc:  # every socket waiting for it gets the error, as its own
                upcoming.done.set_exception(exc)
                # Retrieved here, so that a render nobody waits for any longer logs nothing.
                upcoming.done.exception()
            else:
                upcoming.done.set_result((number, html))
            finally:
                if not upcoming.done.done():  # cancelled: so are the waits for it
                    upcoming.done.cancel()


# The shared renders of each event loop (one serves a process's websockets), by page and key.
_shared: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Hashable, SharedRender]] = (
    weakref.WeakKeyDictionary()
)


def _join(key: Hashable) -> SharedRender:
    renders = _shared.setdefault(asyncio.get_running_loop(), {})
    shared = renders.setdefault(key, SharedRender())
    shared.sockets += 1
    return shared


def _leave(key: Hashable, shared: SharedRender) -> None:
    shared.sockets -= 1
    renders = _shared.get(asyncio.get_running_loop(), {})
    if shared.sockets <= 0 and renders.get(key) is shared:
        del renders[key]


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """One open console page. Route kwargs: `page`, and `ident` for a run or interaction."""

    page: LivePage | None = None
    # The renders this socket shares with the others that show its page alike (None: its own),
    # the number of the last one it sent and what it covered, and the number a render must be
    # above to show every event received so far.
    shared: SharedRender | None = None
    shared_key: Hashable = None
    sent: tuple[int, frozenset[str]] = (0, frozenset())
    after = 0

    async def connect(self) -> None:
        self.pending: set[str] = set()
        self.flush_task: asyncio.Task[None] | None = None
        # One render at a time, each reading the database after the previous one was sent, so
        # a push never overtakes a newer one with older state.
        self.rendering = asyncio.Lock()
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close()
            return
        self.page, key = await database_sync_to_async(self._open)(user)
        if self.page is None:
            await self.close()
            return
        if key is not None:
            self.shared_key, self.shared = key, _join(key)
        for group in self.page.groups:
            await self.channel_layer.group_add(group, self.channel_name)
        live.attach_loop(asyncio.get_running_loop())
        await self.accept()

    def _open(self, user: Any) -> tuple[LivePage | None, Hashable]:
        """The page, and the key of the renders it shares (None: none)."""
        if not user.has_perm(VIEW):
            return None, None
        kwargs = self.scope["url_route"]["kwargs"]
        ident = kwargs.get("ident")
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        key = query.get("key", [""])[0]
        events = query.get("events", [""])[0]
        page = live_page(
            kwargs["page"], ident if isinstance(ident, uuid.UUID) else None, key, events
        )
        if page is None or page.shared_by is None:
            return page, None
        return page, (page.groups, page.shared_by(user))

    async def disconnect(self, code: int) -> None:
        if self.flush_task is not None:
            self.flush_task.cancel()
        if self.shared is not None:
            _leave(self.shared_key, self.shared)
            self.shared = None
        if self.page is not None:
            for group in self.page.groups:
                await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        # Empty and binary frames carry nothing a page asks for: ignored, not an error.
        if text_data:
            await super().receive(text_data=text_data, **kwargs)

    @classmethod
    async def decode_json(cls, text_data: str) -> Any:
        """A frame that is not JSON (or too deep or too large a number) is ignored, not fatal."""
        try:
            return json.loads(text_data)
        except (ValueError, RecursionError):
            return None

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """{"after": N}: the page has seen events up to N; send what changed since."""
        if self.page is None or not isinstance(content, dict):
            return
        after = content.get("after")
        if not isinstance(after, int) or isinstance(after, bool) or after < 0:
            return
        changes = await database_sync_to_async(self.page.changes_after)(after)
        if changes:
            # Shared: a render that starts from now on, after those events were read.
            await self._push(changes, self.shared.need() if self.shared is not None else None)

    async def live_event(self, message: dict[str, Any]) -> None:
        """A committed event from agentops.live.publish: rendered now, or with the others that
        arrive while a render is in flight."""
        self.pending.add(change_of(str(message.get("kind", ""))))
        if self.shared is not None:
            # Noted as it arrives: the renders that start after this show the event.
            self.after = max(self.after, self.shared.need(message.get("event")))
        if self.flush_task is None or self.flush_task.done():
            self.flush_task = asyncio.create_task(self._flush())

    async def _flush(self) -> None:
        # No waiting for more: the first event is pushed as soon as it is rendered. Whatever
        # arrives during a render is gathered in `pending` and sent by the next round, in one.
        while self.pending:
            changes, self.pending = frozenset(self.pending), set()
            await self._push(changes)

    async def _push(self, changes: frozenset[str], after: int | None = None) -> None:
        assert self.page is not None
        async with self.rendering:
            if self.shared is None:
                html = await database_sync_to_async(self._render)(changes)
            else:
                after = self.after if after is None else after
                sent, covered = self.sent
                if after < sent and changes <= covered:
                    return  # the render sent last started after these events: it showed them
                number, html = await self.shared.render(after, changes, self._render)
                if number <= sent:
                    return  # older than the one sent last, which showed what this was for
                if html:
                    self.sent = (number, changes)
            if html:
                await self.send(text_data=html)

    def _render(self, changes: frozenset[str]) -> str:
        assert self.page is not None
        request = socket_request(self.scope["user"], self.scope.get("cookies", {}))
        return self.page.render(request, changes)
