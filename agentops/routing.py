"""Websocket routes: one per live page, named like the page's own URL under /ws/."""

from __future__ import annotations

from django.urls import path

from agentops.consumers import LiveConsumer

websocket_urlpatterns = [
    path("ws/inbox/", LiveConsumer.as_asgi(), {"page": "inbox"}),
    path("ws/runs/<uuid:ident>/", LiveConsumer.as_asgi(), {"page": "run"}),
    path("ws/runs/<uuid:ident>/reconcile/", LiveConsumer.as_asgi(), {"page": "reconcile"}),
    path("ws/interactions/<uuid:ident>/", LiveConsumer.as_asgi(), {"page": "interaction"}),
]
