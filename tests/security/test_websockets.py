"""Websockets: anonymous, foreign-origin, unauthorized and expired subscriptions are refused;
hostile frames neither crash the socket nor change anything."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.contrib.sessions.models import Session
from django.test import Client
from django.utils import timezone

from agentops.asgi import application
from tests.security.conftest import PERSONAS, everything

OURS = (b"origin", b"http://testserver")


@pytest.fixture(autouse=True)
def _same_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    # The consumer's database calls run in this thread, inside the test's transaction; Channels
    # closes "old" connections around each of them, which on PostgreSQL would close that one.
    monkeypatch.setattr("channels.db.close_old_connections", lambda: None)


def headers(client: Client | None, origin: tuple[bytes, bytes] | None = OURS) -> list[Any]:
    found = [origin] if origin else []
    if client is not None:
        cookie = "; ".join(f"{name}={morsel.value}" for name, morsel in client.cookies.items())
        found.append((b"cookie", cookie.encode()))
    return found


def opens(path: str, client: Client | None, origin: tuple[bytes, bytes] | None = OURS) -> bool:
    """Whether the socket is accepted; it is closed again either way."""

    async def scenario() -> bool:
        ws = WebsocketCommunicator(application, path, headers(client, origin))
        try:
            connected, _ = await ws.connect(timeout=3)
        except ValueError as exc:  # Channels' router: no route, the connection is dropped
            assert "No route found" in str(exc)
            return False
        await ws.disconnect()
        return connected

    return async_to_sync(scenario)()


def sockets(scene: dict[str, Any]) -> dict[str, str]:
    return {
        "inbox": "/ws/inbox/",
        "run": f"/ws/runs/{scene['waiting'].pk}/",
        "reconcile": f"/ws/runs/{scene['blocked'].pk}/reconcile/?key=step-1",
        "interaction": f"/ws/interactions/{scene['approval'].pk}/",
    }


@pytest.mark.parametrize("persona", [*PERSONAS, "anonymous"])
def test_only_people_who_may_see_the_console_can_subscribe(personas, scene, persona):
    client = personas(persona)
    allowed = persona not in ("outsider", "anonymous")
    for page, path in sockets(scene).items():
        assert opens(path, client if persona != "anonymous" else None) is allowed, page


@pytest.mark.parametrize(
    "origin",
    [(b"origin", b"https://evil.example"), (b"origin", b"http://testserver.evil.example"), None],
    ids=["foreign", "look-alike", "missing"],
)
def test_a_foreign_or_missing_origin_is_refused_even_with_a_login(personas, scene, origin):
    client = personas("operator")
    for path in sockets(scene).values():
        assert opens(path, client) is True
        assert opens(path, client, origin) is False


def test_unknown_and_swapped_ids_are_refused(personas, scene):
    client = personas("operator")
    made_up = uuid.uuid4()
    for path in (
        f"/ws/runs/{made_up}/",
        f"/ws/interactions/{made_up}/",
        f"/ws/interactions/{scene['waiting'].pk}/",  # a run id on the interaction route
        f"/ws/runs/{scene['approval'].pk}/reconcile/",  # an interaction id on a run route
        "/ws/runs/not-a-uuid/",
        "/ws/admin/",
    ):
        assert opens(path, client) is False, path


def test_an_expired_session_cannot_subscribe(personas, scene):
    client = personas("operator")
    path = sockets(scene)["inbox"]
    assert opens(path, client) is True
    Session.objects.update(expire_date=timezone.now() - dt.timedelta(seconds=1))
    assert opens(path, client) is False


# Frames Python's JSON decoder refuses: the known gap below.
UNDECODABLE = [
    "not json",
    "",
    "{",
    "\x00",
    '{"after": ' + "9" * 5000 + "}",
    "[" * 3000 + "]" * 3000,
]
FRAMES = [
    '{"after": NaN}',
    '{"after": Infinity}',
    '{"after": 1e999}',
    '{"after": -1}',
    '{"after": "12"}',
    '{"after": true}',
    '{"after": 1, "after": 2}',
    '{"after": 0, "subscribe": "run-00000000-0000-0000-0000-000000000000"}',
    '"\\ud800"',
    json.dumps({"after": 0, "x": "y" * 100_000}),
]


@pytest.mark.parametrize(
    "frame", UNDECODABLE, ids=["text", "empty", "cut", "nul", "digits", "deep"]
)
def test_a_frame_that_is_not_json_is_ignored(personas, scene, frame):
    client = personas("operator")

    async def scenario() -> bool:
        ws = WebsocketCommunicator(application, "/ws/inbox/", headers(client))
        assert (await ws.connect(timeout=3))[0]
        # The raw ASGI message: the communicator itself refuses to send an empty frame.
        await ws.send_input({"type": "websocket.receive", "text": frame})
        quiet = await ws.receive_nothing(timeout=0.3)
        await ws.disconnect()
        return quiet

    assert async_to_sync(scenario)()


@pytest.mark.parametrize("frame", FRAMES)
def test_hostile_json_frames_change_nothing_and_leak_nothing(personas, scene, frame):
    client = personas("viewer")
    before = everything()

    async def scenario() -> list[str]:
        ws = WebsocketCommunicator(application, sockets(scene)["inbox"], headers(client))
        assert (await ws.connect(timeout=3))[0]
        await ws.send_to(text_data=frame)
        got = []
        while not await ws.receive_nothing(timeout=0.3):
            got.append(await ws.receive_from())
        # The socket still works: a well-formed catch-up is answered.
        await ws.send_json_to({"after": 0})
        got.append(await ws.receive_from(timeout=3))
        await ws.disconnect()
        return got

    received = async_to_sync(scenario)()
    assert everything() == before
    assert "live-cursor" in received[-1]
    # An inbox socket renders the inbox only: no other page's fragments, whatever was asked.
    assert all('id="run-header"' not in message for message in received)
