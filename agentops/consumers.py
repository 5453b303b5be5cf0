"""The live console's websocket: pushes fresh fragments (htmx out-of-band swaps) as events commit.

A page opens a socket for what it shows (the inbox, a run, an approval, a reconciliation). The
socket requires a logged-in user allowed to see the console (the origin is checked in
agentops.asgi). On open, the page sends the last event id it has seen ({"after": N}); the
consumer answers with the fragments that changed since, which is how a reconnecting page
catches up from the event log; an open socket asks the log the same every CATCH_UP_SECONDS,
for the events whose messages the channel layer lost. A push may land while the page's own
action is in flight: the page then keeps that action's region and catches up when it ends
(static/agentops/console.js).

What an event costs does not grow with the sockets that show it. The sockets of pages that show
the same HTML whoever looks (the inbox, per filter) share their renders (`Renders`: one at a
time, each serving every socket waiting for it), and a page renders at most `RENDER_BURST`
times at once and `RENDER_RATE` times a second after that, and rests after a render that had
to wait for a core (`RENDER_REST`). An event alone is pushed at once;
under a stream of events each socket sends at most one frame per render, however fast renders
could be made (an inbox frame is the whole fragment, some 50 KB at 25 rows a queue).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.contrib.auth import get_user

from agentops import live
from agentops.views.common import VIEW
from agentops.views.fragments import Frame, LivePage, change_of, live_page, socket_request
from runtime import store

# A page's renders, and so each of its sockets' frames: a burst of this many at once, then this
# many a second (a token bucket): a few events a second on a quiet page are never held back,
# and in a stream of events one waits 100 ms at most for its render to begin.
RENDER_BURST = 10
RENDER_RATE = 10.0
# And after a render that waited for a core (its time less its thread's CPU time, the database's
# answers included), the page rests this many times that wait before its next: on a busy
# machine a page renders less often and leaves the cores to the requests, where on a quiet one
# a render hardly waits and the pace above binds first.
RENDER_REST = 2.0
# But never longer than this: a render that waited seconds on the database (its failover, a
# pool timeout) says nothing of the cores, and the page's next frame should not wait twice that.
RENDER_REST_MAX = 1.0
# A socket is allowed when it opens; before a frame, at most every
# AGENTOPS_LIVE_LOGIN_CHECK_SECONDS, it checks that its login still holds. A logout, an expired
# session, a changed password, a deactivated user or a withdrawn permission then closes it,
# with this code, instead of pushing to it for as long as it stays open.
LOGIN_GONE = 4403
# A frame that fails (its render or the login check before it: the database away for a moment)
# is tried again after this many seconds, doubling up to RETRY_MAX, for as long as the socket
# stays open. The events it was to show came once: without it, the page would show the state
# before them until the next event, and after a run's last event, for good.
RETRY_FIRST = 0.5
RETRY_MAX = 30.0
# Every this many seconds a socket asks the event log whether an event it was not told of
# touched its page: a message the channel layer lost (a publisher's failed send, a process too
# busy to read 1,000 messages) would otherwise leave the page stale until the next event came.
CATCH_UP_SECONDS = 30.0

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Render:
    # When it began reading the database (time.monotonic, the event loop's clock too).
    began: float
    changes: frozenset[str]
    frame: Frame


class Renders:
    """The renders of one page, one at a time, for the sockets that show it, paced.

    A socket asks for a render of its changes that began reading the database after the oldest
    event it has not sent arrived (the event committed before it was published, so such a
    render shows it): the latest render if it qualifies, or the one in flight or due if it had
    not begun when the event came (one not begun draws the event's regions too), or else a new
    one once the one in flight is done, when the pace allows. However many sockets wait, one
    render serves them all, each sends it as it is made, and none sends more frames than the
    page has renders.
    """

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.sockets = 0
        self.latest: asyncio.Future[Render] | None = None
        self.changes: frozenset[str] = frozenset()  # the latest render's
        # When the latest render began reading; None while it is due or waits for its thread.
        self.began: float | None = None
        # Guards `began` and `changes`, which the render's thread reads and sets as it begins.
        self.lock = threading.Lock()
        self.tokens, self.refilled = float(RENDER_BURST), time.monotonic()
        # No render begins before this (time.monotonic): the rest after the last one.
        self.rested = 0.0

    async def after(
        self, moment: float, changes: frozenset[str], render: Callable[[frozenset[str]], Frame]
    ) -> Render:
        while True:
            latest = self.latest
            if latest is None or latest.cancelled() or (latest.done() and latest.exception()):
                break
            if not latest.done():
                if self.takes(changes, moment):
                    return await asyncio.shield(latest)
                await asyncio.wait({latest})  # not the one: the next, once this one is done
                continue
            done = latest.result()
            if changes <= done.changes and done.began > moment:
                return done
            break
        return await self._start(changes, render)

    def _start(
        self, changes: frozenset[str], render: Callable[[frozenset[str]], Frame]
    ) -> asyncio.Future[Render]:
        with self.lock:
            self.began, self.changes = None, changes
        wait = max(self._spend_token(), self.rested - time.monotonic())

        def begin() -> Render:
            with self.lock:  # what it draws is fixed as it begins reading
                self.began = began = time.monotonic()
                changes = self.changes
            working = time.thread_time()
            try:
                return Render(began, changes, render(changes))
            finally:
                ended = time.monotonic()
                waited = max(0.0, (ended - began) - (time.thread_time() - working))
                self.rested = ended + min(RENDER_REST * waited, RENDER_REST_MAX)

        async def due() -> Render:
            if wait:
                await asyncio.sleep(wait)  # the events that come meanwhile join it (`takes`)
            return await database_sync_to_async(begin)()

        # A task of its own: a socket that closes while waiting leaves it to the others.
        self.latest = asyncio.ensure_future(due())
        return asyncio.shield(self.latest)

    def takes(self, changes: frozenset[str], moment: float) -> bool:
        """Whether the render in flight or due shows `changes` as of `moment`. One that has not
        begun reading takes them in: it shows every event that came before it begins, but
        draws only the regions it was asked for."""
        with self.lock:  # against its thread beginning meanwhile
            if self.began is None:
                self.changes |= changes
                return True
            return changes <= self.changes and self.began > moment

    def _spend_token(self) -> float:
        """Seconds until the next render may begin (0: now), that render's token spent."""
        now = time.monotonic()
        self.tokens = min(RENDER_BURST, self.tokens + (now - self.refilled) * RENDER_RATE)
        self.refilled = now
        self.tokens -= 1
        return max(0.0, -self.tokens / RENDER_RATE)


# This process's shared renders, by LivePage.shared, while a socket shows them (on the loop
# that serves its websockets: a test may run several loops one after another).
_shared: dict[tuple[str, ...], Renders] = {}


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """One open console page. Route kwargs: `page`, and `ident` for a run or interaction."""

    page: LivePage | None = None
    renders: Renders | None = None
    # The newest event the page's regions reflect, as far as this socket knows: the cursor the
    # page last sent ({"after": N}), or that of the last frame sent since.
    shown = 0
    # The socket has been told of, or has looked for, every event up to this id (the events
    # committed through it as it opened, then as of its last catch-up).
    heard = 0
    catch_up_task: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        # The events not sent yet, oldest first: when each arrived, and what it changes.
        self.pending: list[tuple[float, str]] = []
        # The events drawn since the last catch-up looked: those the socket was told of by their
        # messages, and those that catch-up found. Not a cursor: on PostgreSQL an event can
        # commit after a newer one (store.committed_through).
        self.told: set[int] = set()
        self.flush_task: asyncio.Task[None] | None = None
        # When the login was last found to hold (time.monotonic): as the socket opens. Once
        # it no longer holds, the socket is closing and takes no more events.
        self.login_checked = time.monotonic()
        self.login_gone = False
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close()
            return
        self.page = await database_sync_to_async(self._open)(user)
        if self.page is None:
            await self.close()
            return
        shared = self.page.shared
        renders = _shared.get(shared) if shared is not None else None
        if renders is None or renders.loop is not asyncio.get_running_loop():
            renders = Renders()
            if shared is not None:
                _shared[shared] = renders
        self.renders = renders
        renders.sockets += 1
        try:
            for group in self.page.groups:
                await live.listen(group, self)
            live.attach_loop(asyncio.get_running_loop())
            await self.accept()
            self.catch_up_task = asyncio.create_task(self._catch_up())
        except BaseException:
            # Channels calls no disconnect for a connect that raised: undone here, or the
            # group would go on handing events to a socket that is gone.
            await self.disconnect(1011)
            raise

    def _open(self, user: Any) -> LivePage | None:
        if not user.has_perm(VIEW):
            return None
        self.heard = store.committed_through()
        kwargs = self.scope["url_route"]["kwargs"]
        ident = kwargs.get("ident")
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        return live_page(
            kwargs["page"],
            ident if isinstance(ident, uuid.UUID) else None,
            key=query.get("key", [""])[0],
            events=query.get("events", [""])[0],
            user=user.get_username(),
        )

    async def disconnect(self, code: int) -> None:
        for task in (self.flush_task, self.catch_up_task):
            if task is not None:
                task.cancel()
        if self.page is None or self.renders is None:
            return
        for group in self.page.groups:
            await live.unlisten(group, self)
        self.renders.sockets -= 1
        shared = self.page.shared
        if self.renders.sockets == 0 and shared is not None and _shared.get(shared) is self.renders:
            del _shared[shared]
        self.renders = None

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
        self.shown = after
        self._want(await database_sync_to_async(self.page.changes_after)(after))

    def deliver(self, message: dict[str, Any]) -> None:
        """A committed event from agentops.live.publish, through this process's channel of its
        group (agentops.live.listen): pushed now, or with the others that come before the
        page's next render."""
        event = message.get("event")
        if isinstance(event, int):
            if event in self.told:  # drawn already: its message sent again, or late
                return
            if event > self.heard:
                self.told.add(event)
        self._want({change_of(str(message.get("kind", "")))})

    async def _catch_up(self) -> None:
        assert self.page is not None
        while True:
            await asyncio.sleep(CATCH_UP_SECONDS)
            try:
                missed = await database_sync_to_async(self.page.missed_after)(
                    self.heard, frozenset(self.told)
                )
            except Exception:
                log.warning("live catch-up of a page failed", exc_info=True)
                continue
            # Back on the socket's loop, where messages are delivered: one told of while the
            # catch-up looked has drawn its event, and is not drawn twice.
            changes = missed.changes(self.told)
            looked_after, self.heard = self.heard, max(self.heard, missed.through)
            # The events this catch-up found are kept until the next, so that a message that
            # comes after it draws nothing more.
            found = self.told | missed.events.keys()
            self.told = {event for event in found if event > looked_after}
            self._want(changes)

    async def lost(self) -> None:
        await self.close()

    def _want(self, changes: set[str] | frozenset[str]) -> None:
        if self.login_gone:
            return
        arrived = time.monotonic()
        self.pending.extend((arrived, change) for change in sorted(changes))
        if not self.pending:
            return
        if self.flush_task is None or self.flush_task.done():
            self.flush_task = asyncio.create_task(self._flush())
        elif self.renders is not None:
            # A render still due draws these too: one frame, where there would be two.
            self.renders.takes(frozenset(changes), arrived)

    async def _flush(self) -> None:
        # One frame at a time, each from a render newer than the last sent, so a push never
        # overtakes a newer one with older state. What arrives meanwhile goes in the next.
        retry = RETRY_FIRST
        while self.pending and not self.login_gone:
            try:
                await self._send_next()
            except Exception:
                log.warning(
                    "live update of a page failed; trying again in %.1f s", retry, exc_info=True
                )
                await asyncio.sleep(retry)
                retry = min(2 * retry, RETRY_MAX)
            else:
                retry = RETRY_FIRST

    async def _send_next(self) -> None:
        assert self.renders is not None
        changes = frozenset(change for _, change in self.pending)
        done = await self.renders.after(self.pending[0][0], changes, self._render)
        if done.frame.message:
            if not await self._login_holds():
                self.login_gone, self.pending = True, []
                await self.close(code=LOGIN_GONE)
                return
            await self.send(text_data=done.frame.message)
            self.shown = done.frame.cursor
        # Once it is sent: what arrived before the render began and is among the regions it
        # drew is in it; the rest waits for the next frame.
        self.pending = [
            (at, change)
            for at, change in self.pending
            if at >= done.began or change not in done.changes
        ]

    async def _login_holds(self) -> bool:
        if time.monotonic() - self.login_checked < settings.AGENTOPS_LIVE_LOGIN_CHECK_SECONDS:
            return True
        holds = await database_sync_to_async(self._check_login)()
        if holds:
            self.login_checked = time.monotonic()
        return holds

    def _check_login(self) -> bool:
        """Whether the session the socket opened with still logs in its user, as a page
        request's would (its password unchanged, the user active), who may still see the
        console. The session is read afresh: the scope's is the one read at the connect."""
        user = self.scope["user"]
        current = get_user(socket_request(user, self.scope.get("cookies", {})))
        return bool(current.is_authenticated and current.pk == user.pk and current.has_perm(VIEW))

    def _render(self, changes: frozenset[str]) -> Frame:
        assert self.page is not None
        request = socket_request(self.scope["user"], self.scope.get("cookies", {}))
        return self.page.render(request, changes, self.shown)
