"""The live console's websocket: pushes fresh fragments (htmx out-of-band swaps) as events commit.

A page opens a socket for what it shows (the inbox, a run, an approval, a reconciliation). The
socket requires a logged-in user allowed to see the console (the origin is checked in
agentops.asgi). On open, the page sends the last event id it has seen ({"after": N}); the
consumer answers with the fragments that changed since, which is how a reconnecting page
catches up from the event log. An event is rendered at once; the events that arrive while a
render is in flight are rendered together after it, so a burst costs one render more, not one
per event. A push may land while the page's own action is in flight: the page then keeps that
action's region and catches up when it ends (static/agentops/console.js).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from agentops import live
from agentops.views.common import VIEW
from agentops.views.fragments import LivePage, change_of, live_page, socket_request


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """One open console page. Route kwargs: `page`, and `ident` for a run or interaction."""

    page: LivePage | None = None

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
        self.page = await database_sync_to_async(self._open)(user)
        if self.page is None:
            await self.close()
            return
        for group in self.page.groups:
            await self.channel_layer.group_add(group, self.channel_name)
        live.attach_loop(asyncio.get_running_loop())
        await self.accept()

    def _open(self, user: Any) -> LivePage | None:
        if not user.has_perm(VIEW):
            return None
        kwargs = self.scope["url_route"]["kwargs"]
        ident = kwargs.get("ident")
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        key = query.get("key", [""])[0]
        events = query.get("events", [""])[0]
        return live_page(
            kwargs["page"], ident if isinstance(ident, uuid.UUID) else None, key, events
        )

    async def disconnect(self, code: int) -> None:
        if self.flush_task is not None:
            self.flush_task.cancel()
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
            await self._push(changes)

    async def live_event(self, message: dict[str, Any]) -> None:
        """A committed event from agentops.live.publish: rendered now, or with the others that
        arrive while a render is in flight."""
        self.pending.add(change_of(str(message.get("kind", ""))))
        if self.flush_task is None or self.flush_task.done():
            self.flush_task = asyncio.create_task(self._flush())

    async def _flush(self) -> None:
        # No waiting for more: the first event is pushed as soon as it is rendered. Whatever
        # arrives during a render is gathered in `pending` and sent by the next round, in one.
        while self.pending:
            changes, self.pending = frozenset(self.pending), set()
            await self._push(changes)

    async def _push(self, changes: frozenset[str]) -> None:
        assert self.page is not None
        async with self.rendering:
            html = await database_sync_to_async(self._render)(changes)
            if html:
                await self.send(text_data=html)

    def _render(self, changes: frozenset[str]) -> str:
        assert self.page is not None
        request = socket_request(self.scope["user"], self.scope.get("cookies", {}))
        return self.page.render(request, changes)
