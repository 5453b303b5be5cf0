"""Django's ASGI handler with the console's middleware and views run as one synchronous stack.

Every middleware the console uses is synchronous or, like Django's own `MiddlewareMixin` ones,
both; the views are synchronous. Django's ASGI handler builds the stack in async mode, so each
request crossed between the event loop and its thread at every boundary: into the first
middleware, back to the loop below ours, into a thread for every hook of every mixin middleware
(sessions, CSRF, authentication, messages, CSP…), and once more for the view. Django's docs
put such a switch at about a millisecond. Here the stack is built in sync mode and entered once
per request, on the request's own thread (as Django runs a synchronous view under ASGI), so a
page costs one switch. Websockets are unaffected: Channels serves them (agentops.asgi).
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest, HttpResponseBase


class SyncStackASGIHandler(ASGIHandler):
    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        # thread_sensitive: the request's own thread (ASGIHandler gives each request a
        # ThreadSensitiveContext), where Django also closes the response and its connections.
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)
