"""The live console over websockets: pushes equal a fresh GET, catch-up, login and origin."""

from __future__ import annotations

import asyncio
import datetime as dt
import difflib
import itertools
import re
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from channels_redis.core import ChannelLock, RedisChannelLayer
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.test import Client, RequestFactory
from django.utils.timezone import now

from agentops import consumers, live
from agentops.asgi import application
from agentops.consumers import (
    RENDER_BURST,
    RENDER_RATE,
    RENDER_REST,
    LiveConsumer,
    Render,
    Renders,
)
from agentops.views import common
from agentops.views import fragments as fragments_module
from agentops.views.fragments import (
    PROGRESS,
    STATUS,
    Frame,
    LivePage,
    Missed,
    live_page,
    socket_request,
)
from agentops.work import FILTERS
from runtime import cancel, respond, retry, store, work
from runtime.models import Event, EventKind
from tests.conftest import STRICT
from tests.console.conftest import without_csrf
from tests.support.redis_db import flush_redis

ORIGIN = (b"origin", b"http://testserver")


@pytest.fixture(autouse=True)
def _publish(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real hook: committed events go to agentops.live.publish, as in production."""
    settings.AGENTOPS_PUBLISH = "agentops.live.publish"
    empty_channel_layer()
    # The consumer's database calls run in this thread, inside the test's transaction; Channels
    # closes "old" connections around each of them, which on PostgreSQL would close that one.
    monkeypatch.setattr("channels.db.close_old_connections", lambda: None)


def empty_channel_layer() -> None:
    """Start from no groups and no messages, on either layer.

    The Redis layer keeps a connection pool per event loop, and its `flush()` closes every pool
    from the calling loop; the publisher's loop (agentops.live) outlives each test, so its pool
    would be closed from a foreign loop ("attached to a different loop"). The layer's state is
    all in its Redis database (one of the test run's own), so that database is emptied instead,
    and each pool stays with the loop that opened it (a loop's pool is closed when it closes).

    The layer's locks are the exception: a receive cancelled while it waited for the lock on the
    process's channel stays counted (channels_redis 4.3), so that lock outlives its loop, bound
    to it, and the next loop that waits on it fails. Production serves its sockets from one loop;
    each test runs its own, so each starts from fresh locks.
    """
    layer = get_channel_layer()
    if isinstance(layer, RedisChannelLayer):
        for host in layer.hosts:
            flush_redis(host["address"])
        layer.receive_clean_locks = ChannelLock()
    else:
        async_to_sync(layer.flush)()


def redis_layer() -> RedisChannelLayer:
    """The Redis channel layer, which the PostgreSQL pass uses (an error under STRICT if not)."""
    layer = get_channel_layer()
    if not isinstance(layer, RedisChannelLayer):
        message = "REDIS_URL is not set: live updates use the in-memory layer, not Redis"
        if STRICT:
            pytest.fail(message)
        pytest.skip(message)
    return layer


def headers(client: Client, origin: tuple[bytes, bytes] = ORIGIN) -> list[tuple[bytes, bytes]]:
    cookie = "; ".join(f"{name}={morsel.value}" for name, morsel in client.cookies.items())
    return [origin, (b"cookie", cookie.encode())]


def socket(path: str, client: Client | None = None, **kwargs: Any) -> WebsocketCommunicator:
    return WebsocketCommunicator(
        application, path, headers(client, **kwargs) if client else [ORIGIN]
    )


def fragments(message: str) -> dict[str, str]:
    """A pushed message's top-level elements, by DOM id."""
    parts = re.split(r"\n(?=<(?:section|div|span) id=\")", message)
    return {re.match(r'<\w+ id="([^"]+)"', part).group(1): part for part in parts}


def in_sync(scenario: Callable[[], Awaitable[Any]]) -> Any:
    """Run one async scenario; its database calls run in this thread, in the test transaction."""
    return async_to_sync(scenario)()


def progress_of(run: Any, *, pk: int | None = None, told: bool = True) -> Event:
    """A step of `run` (an intent) committed now, and its message sent unless `told` is False
    (the channel layer lost it)."""
    event = Event.objects.create(
        pk=pk,
        run=run,
        kind=EventKind.INTENT,
        actor="runtime",
        operation_key="a:1",
        created_at=now(),
    )
    if told:
        live.publish(event)
    return event


def viewed_run(world: Any, as_user: Any) -> tuple[Any, Client, int]:
    """A waiting run, a viewer who has opened its page, and the newest event as the page
    opened (its cursor, with no event still to commit)."""
    run = world.run("waiting")
    client = as_user("viewer")
    client.get(f"/runs/{run.pk}/")
    return run, client, Event.objects.order_by("-id").values_list("id", flat=True)[0]


async def run_page_socket(client: Client, run: Any, shown: int) -> WebsocketCommunicator:
    """A run page's socket, open, once the page has said what it shows (`shown`, its cursor)
    and been sent nothing for it."""
    ws = socket(f"/ws/runs/{run.pk}/", client)
    assert (await ws.connect())[0]
    await ws.send_json_to({"after": shown})
    assert await ws.receive_nothing(timeout=0.3)
    return ws


def acting(capture: Any, action: Callable[[], Any]) -> Callable[[], Any]:
    """`action` with its after-commit hooks run, as a real commit would run them."""

    def run() -> Any:
        with capture(execute=True):
            return action()

    return database_sync_to_async(run)


def test_it_pushes_the_run_fragments_a_fresh_get_renders(
    world, as_user, django_capture_on_commit_callbacks
):
    run = world.run("waiting")
    interaction = world.pending(run)
    client = as_user("operator")
    client.get(f"/runs/{run.pk}/")  # the page the socket belongs to (and its CSRF cookie)

    async def scenario() -> str:
        ws = socket(f"/ws/runs/{run.pk}/", client)
        assert (await ws.connect())[0]
        await acting(
            django_capture_on_commit_callbacks,
            lambda: respond(interaction.pk, {"approved": True}, actor="bob"),
        )()
        message = await ws.receive_from(timeout=3)
        await ws.disconnect()
        return message

    pushed = fragments(in_sync(scenario))
    page = without_csrf(client.get(f"/runs/{run.pk}/").content.decode())
    assert set(pushed) == {
        "live-cursor",
        "run-header",
        "run-surgery",
        "run-transcript",
        "run-operations",
        "run-timeline",
    }
    for dom_id, html in pushed.items():
        if dom_id != "live-cursor":
            assert without_csrf(html) in page, dom_id
    assert "Approved" in pushed["run-timeline"]
    assert 'status-queued">queued' in pushed["run-header"]
    last = Event.objects.order_by("-id").first()
    assert pushed["live-cursor"] == f'<span id="live-cursor" data-event="{last.pk}" hidden></span>'


def pushed_approval(
    world: Any, client: Client, capture: Any, *, opened_for: float = 0.0
) -> tuple[dict[str, str], Any]:
    """The inbox push of a new approval, to a socket open `opened_for` seconds before the run
    was made: the push's fragments, and the approval. With no `capture`, the run's after-commit
    hooks do not run: its messages are never sent, as when the channel layer loses them."""
    made: list[Any] = []

    def make() -> None:
        made.append(world.run("waiting"))

    async def scenario() -> str:
        ws = socket("/ws/inbox/", client)
        assert (await ws.connect())[0]
        await asyncio.sleep(opened_for)
        await (acting(capture, make) if capture else database_sync_to_async(make))()
        message = await ws.receive_from(timeout=3)
        await ws.disconnect()
        return message

    pushed = fragments(in_sync(scenario))
    return pushed, world.pending(made[0])


def test_it_pushes_a_new_approval_to_the_inbox(world, as_user, django_capture_on_commit_callbacks):
    client = as_user("viewer")
    client.get("/")
    pushed, interaction = pushed_approval(world, client, django_capture_on_commit_callbacks)
    assert f"/interactions/{interaction.pk}/" in pushed["inbox"]
    assert without_csrf(pushed["inbox"]) in without_csrf(client.get("/").content.decode())


def test_a_burst_of_events_is_pushed_in_fewer_renders_the_last_equal_to_a_fresh_get(
    world, as_user, django_capture_on_commit_callbacks
):
    client = as_user("viewer")
    client.get("/")

    async def scenario() -> list[str]:
        ws = socket("/ws/inbox/", client)
        assert (await ws.connect())[0]
        # submit, claim, intents, outcomes, approval requested: the first event is rendered at
        # once, the rest of the burst (committed meanwhile) together after it.
        await acting(django_capture_on_commit_callbacks, lambda: world.run("waiting"))()
        pushed = [await ws.receive_from(timeout=3)]
        while not await ws.receive_nothing(timeout=0.5):
            pushed.append(await ws.receive_from())
        await ws.disconnect()
        return pushed

    pushed = in_sync(scenario)
    # How many renders a burst costs depends on when its events arrive during one (counted
    # exactly by the next test); never more than one per event the inbox listens to.
    assert 1 <= len(pushed) <= Event.objects.exclude(kind__in=live.PROGRESS_KINDS).count()
    inbox = fragments(pushed[-1])["inbox"]
    assert without_csrf(inbox) in without_csrf(client.get("/").content.decode())


def test_it_shows_the_second_operator_the_answer_live(
    world, as_user, django_capture_on_commit_callbacks
):
    run = world.run("waiting")
    interaction = world.pending(run)
    client = as_user("approver")
    page = client.get(f"/interactions/{interaction.pk}/").content.decode()
    assert 'ws-connect="/ws/interactions/' in page

    async def scenario() -> str:
        ws = socket(f"/ws/interactions/{interaction.pk}/", client)
        assert (await ws.connect())[0]
        await acting(
            django_capture_on_commit_callbacks,
            lambda: respond(interaction.pk, {"approved": False, "reason": "no"}, actor="bob"),
        )()
        message = await ws.receive_from(timeout=3)
        await ws.disconnect()
        return message

    pushed = fragments(in_sync(scenario))
    html = pushed[f"interaction-{interaction.pk}"]
    assert 'by <strong class="actor">bob</strong>' in html
    assert "Reason: no" in html
    assert "<form" not in html
    fresh = without_csrf(client.get(f"/interactions/{interaction.pk}/").content.decode())
    assert without_csrf(html) in fresh


def test_it_pushes_the_reconcile_page_when_someone_else_settles_it(
    world, as_user, django_capture_on_commit_callbacks
):
    run = world.run("blocked")
    client = as_user("reconciler")
    page = client.get(f"/runs/{run.pk}/reconcile/").content.decode()
    key = run.blocked_operation
    assert f'ws-connect="/ws/runs/{run.pk}/reconcile/?key=step-1%2Ftool%2Ftoolu_01_0"' in page

    async def scenario() -> str:
        ws = socket(f"/ws/runs/{run.pk}/reconcile/?key=step-1%2Ftool%2Ftoolu_01_0", client)
        assert (await ws.connect())[0]
        await acting(django_capture_on_commit_callbacks, lambda: cancel(run.pk, actor="bob"))()
        message = await ws.receive_from(timeout=3)
        await ws.disconnect()
        return message

    pushed = fragments(in_sync(scenario))
    assert "it is cancelled" in pushed["reconcile"]
    fresh = client.get(f"/runs/{run.pk}/reconcile/?key={key}").content.decode()
    assert without_csrf(pushed["reconcile"]) in without_csrf(fresh)


def _cursor(html: str) -> int:
    found = re.search(r'<span id="live-cursor" data-event="(\d+)"', html)
    assert found is not None, "the page has no cursor"
    return int(found.group(1))


def as_rendered(response: Any) -> str:
    """A page less what differs at every render: its CSRF tokens and the server's clock."""
    html = without_csrf(response.content.decode())
    html = re.sub(r'"X-CSRFToken": "\w+"', '"X-CSRFToken": "…"', html)
    return re.sub(r'<meta name="server-time" content="[^"]+">', "", html)


@pytest.mark.parametrize("shown", ["run", "interaction", "reconcile", "inbox"])
def test_a_page_shows_every_event_up_to_its_cursor_though_one_commits_as_it_renders(
    world, as_user, monkeypatch, shown
):
    """A live page's socket asks for what committed after the page's cursor, so the page must
    show every event up to it: an event that commits while the page renders is in the page, or
    after its cursor. Read after the page's data, the cursor passed over such an event, and the
    page never heard of it: a run that finished while its page rendered stayed `running` there.
    Here the event commits at the last moment it can, as the cursor is read."""
    blocked = shown == "reconcile"
    run = world.run("blocked" if blocked else "waiting")
    interaction = None if blocked else world.pending(run)
    path = {
        "run": f"/runs/{run.pk}/",
        "interaction": f"/interactions/{interaction.pk}/" if interaction else "",
        "reconcile": f"/runs/{run.pk}/reconcile/",
        "inbox": "/",
    }[shown]
    client = as_user("operator")
    before = as_rendered(client.get(path))
    read_cursor = store.committed_through
    changes: list[Any] = []

    def change_then_read() -> int:
        if not changes:  # the page's read of its cursor: bob's decision commits just before it
            if blocked:
                changes.append(cancel(run.pk, actor="bob"))
            else:
                changes.append(respond(interaction.pk, {"approved": True}, actor="bob"))
        return read_cursor()

    monkeypatch.setattr(store, "committed_through", change_then_read)
    page = as_rendered(client.get(path))
    monkeypatch.setattr(store, "committed_through", read_cursor)
    fresh = as_rendered(client.get(path))

    assert changes, "the change did not happen as the page read its cursor"
    assert fresh != before  # the change shows on the page
    assert _cursor(page) == _cursor(fresh)  # the page's cursor is past the change...
    difference = difflib.unified_diff(fresh.splitlines(), page.splitlines(), "fresh", "page")
    assert page == fresh, "\n".join(difference)  # ...so the page shows it


def test_a_page_that_shows_live_without_reading_its_cursor_first_is_refused(db):
    """The rule is kept by the decorator, so a new live page cannot forget it."""
    with pytest.raises(ImproperlyConfigured, match="a live page's view is a @live_view"):
        common.live(RequestFactory().get("/somewhere/"), "/ws/inbox/")
    answer = common.live(RequestFactory().post("/somewhere/"), "/ws/inbox/")  # an action's
    assert answer == {"live_url": "/ws/inbox/", "cursor": store.committed_through()}


def test_it_catches_up_from_the_event_log_on_reconnect(world, as_user):
    run = world.run("failed")
    client = as_user("operator")
    page = client.get(f"/runs/{run.pk}/").content.decode()
    seen = int(re.search(r'data-event="(\d+)"', page).group(1))
    retry(run.pk, actor="bob")  # happens while the page's socket is down: nothing pushed

    async def scenario() -> tuple[str, bool]:
        ws = socket(f"/ws/runs/{run.pk}/", client)
        assert (await ws.connect())[0]
        await ws.send_json_to({"after": seen})
        caught_up = await ws.receive_from(timeout=3)
        latest = await database_sync_to_async(lambda: Event.objects.order_by("-id")[0].pk)()
        await ws.send_json_to({"after": latest})
        quiet = await ws.receive_nothing(timeout=0.5)
        await ws.disconnect()
        return caught_up, quiet

    caught_up, quiet = in_sync(scenario)
    pushed = fragments(caught_up)
    assert "Retried" in pushed["run-timeline"]
    assert 'status-queued">queued' in pushed["run-header"]
    assert quiet  # nothing new after the latest event: nothing sent


def test_it_ignores_a_malformed_catch_up_message(world, as_user):
    client = as_user("viewer")
    client.get("/")

    async def scenario() -> bool:
        ws = socket("/ws/inbox/", client)
        assert (await ws.connect())[0]
        for message in ({"after": "0"}, {"after": -1}, {"after": True}, ["x"]):
            await ws.send_json_to(message)
        quiet = await ws.receive_nothing(timeout=0.3)
        await ws.disconnect()
        return quiet

    assert in_sync(scenario)


@pytest.mark.parametrize(
    "who, origin",
    [
        ("anonymous", ORIGIN),
        ("outsider", ORIGIN),
        ("operator", (b"origin", b"http://evil.example")),
        ("operator", None),
    ],
    ids=["anonymous", "outsider", "foreign-origin", "no-origin"],
)
def test_it_refuses_a_socket_without_login_permission_or_the_right_origin(
    world, as_user, who, origin
):
    client = Client() if who == "anonymous" else as_user(who)
    client.get("/")
    cookie_headers = headers(client, origin or ORIGIN)
    if origin is None:
        cookie_headers = cookie_headers[1:]

    async def scenario() -> bool:
        ws = WebsocketCommunicator(application, "/ws/inbox/", cookie_headers)
        connected, _ = await ws.connect()
        await ws.disconnect()
        return connected

    assert in_sync(scenario) is False


def test_it_refuses_a_socket_for_an_unknown_run(db, as_user):
    client = as_user("operator")

    async def scenario() -> bool:
        ws = socket("/ws/runs/00000000-0000-0000-0000-000000000000/", client)
        connected, _ = await ws.connect()
        await ws.disconnect()
        return connected

    assert in_sync(scenario) is False


def test_a_process_joins_a_group_once_however_many_of_its_sockets_show_it(
    world, as_user, django_capture_on_commit_callbacks, monkeypatch
):
    """Fifty inbox sockets in a process were fifty members of the group: every event was fifty
    messages through the layer (Redis: fifty pushes, pops and decodes) to one process."""
    layer = get_channel_layer()
    joined: list[str] = []
    left: list[str] = []
    add, discard = layer.group_add, layer.group_discard

    async def group_add(group: str, channel: str) -> None:
        joined.append(group)
        await add(group, channel)

    async def group_discard(group: str, channel: str) -> None:
        left.append(group)
        await discard(group, channel)

    monkeypatch.setattr(layer, "group_add", group_add)
    monkeypatch.setattr(layer, "group_discard", group_discard)
    clients = [as_user(persona) for persona in ("viewer", "approver", "operator")]
    made: list[Any] = []

    async def scenario() -> list[str]:
        sockets = [socket("/ws/inbox/", client) for client in clients]
        for ws in sockets:
            assert (await ws.connect())[0]
        await acting(
            django_capture_on_commit_callbacks, lambda: made.append(world.run("waiting"))
        )()
        pushed = [await ws.receive_from(timeout=3) for ws in sockets]
        for ws in sockets:
            await ws.disconnect()
        return pushed

    pushed = in_sync(scenario)
    assert joined == ["inbox"]
    assert left == ["inbox"]
    interaction = world.pending(made[0])
    assert all(f"/interactions/{interaction.pk}/" in message for message in pushed)


def test_a_page_open_past_the_layers_group_expiry_still_hears_its_group(
    world, as_user, django_capture_on_commit_callbacks, monkeypatch
):
    """Both layers drop a group membership `group_expiry` seconds after it was added (24 hours
    by default), however busy the group. A process adds its channel once for all its sockets,
    so an inbox kept open for a day stopped hearing events, its socket still open, and every
    page opened after it in that process shared the dropped channel. Here the expiry is 2 s."""
    layer = get_channel_layer()
    monkeypatch.setattr(layer, "group_expiry", 2)
    client = as_user("viewer")
    client.get("/")
    # Opened past the expiry (both layers compare whole seconds) before the approval comes.
    pushed, interaction = pushed_approval(
        world, client, django_capture_on_commit_callbacks, opened_for=3.5
    )
    assert f"/interactions/{interaction.pk}/" in pushed["inbox"]


class FailingLayer:
    """A channel layer as Channels specifies one (new_channel, group_add, group_discard,
    receive), whose receive fails as a lost Redis connection makes it fail."""

    def __init__(self) -> None:
        self.members: dict[str, set[str]] = {}
        self.messages: asyncio.Queue[dict[str, Any] | Exception] = asyncio.Queue()

    async def new_channel(self, prefix: str = "specific.") -> str:
        return f"{prefix}{len(self.members)}!"

    async def group_add(self, group: str, channel: str) -> None:
        self.members.setdefault(group, set()).add(channel)

    async def group_discard(self, group: str, channel: str) -> None:
        self.members.get(group, set()).discard(channel)

    async def receive(self, channel: str) -> dict[str, Any]:
        message = await self.messages.get()
        if isinstance(message, Exception):
            raise message
        return message


class Page:
    def __init__(self) -> None:
        self.delivered: list[dict[str, Any]] = []
        self.closed = False

    def deliver(self, message: dict[str, Any]) -> None:
        self.delivered.append(message)

    async def lost(self) -> None:
        self.closed = True


def test_a_socket_whose_connect_fails_leaves_no_listener_behind(world, as_user, monkeypatch):
    client = as_user("viewer")

    async def refused(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("Connection refused")

    monkeypatch.setattr(LiveConsumer, "accept", refused)

    async def scenario() -> None:
        ws = socket("/ws/inbox/", client)
        with pytest.raises(ConnectionError):
            await ws.connect()

    in_sync(scenario)
    assert live._groups == {}
    assert consumers._shared == {}


def test_when_the_channel_layer_fails_the_groups_pages_close_to_reconnect_and_catch_up(
    monkeypatch,
):
    async def scenario() -> None:
        layer = FailingLayer()
        monkeypatch.setattr(live, "get_channel_layer", lambda: layer)
        first, second = Page(), Page()
        await live.listen("inbox", first)
        await live.listen("inbox", second)
        assert len(layer.members["inbox"]) == 1
        layer.messages.put_nowait({"type": live.MESSAGE_TYPE, "kind": "waiting"})
        layer.messages.put_nowait(ConnectionError("Connection closed by server."))
        while not (first.closed and second.closed):
            await asyncio.sleep(0.001)
        assert (
            first.delivered == second.delivered == [{"type": live.MESSAGE_TYPE, "kind": "waiting"}]
        )
        # The page that reconnects joins again, on a channel of its own: it is not left to the
        # group that stopped.
        again = Page()
        await live.listen("inbox", again)
        layer.messages.put_nowait({"type": live.MESSAGE_TYPE, "kind": "completed"})
        while not again.delivered:
            await asyncio.sleep(0.001)
        assert len(layer.members["inbox"]) == 1  # the stopped group's channel left it
        for page in (first, second, again):
            await live.unlisten("inbox", page)
        assert live._groups == {}

    async_to_sync(scenario)()


def test_a_renewal_the_layer_refuses_is_logged_and_the_next_one_renews(monkeypatch, caplog):
    added: list[str] = []

    class Flaky(FailingLayer):
        group_expiry = 1  # renewed every quarter of a second

        async def group_add(self, group: str, channel: str) -> None:
            added.append(group)
            if len(added) == 2:  # the first renewal
                raise ConnectionError("Connection closed by server.")
            await super().group_add(group, channel)

    async def scenario() -> None:
        layer = Flaky()
        monkeypatch.setattr(live, "get_channel_layer", lambda: layer)
        page = Page()
        await live.listen("inbox", page)
        for _ in range(300):  # the join and two renewals, each due within a quarter second
            if len(added) >= 3:
                break
            await asyncio.sleep(0.01)
        assert added == ["inbox"] * 3
        layer.messages.put_nowait({"type": live.MESSAGE_TYPE, "kind": "waiting"})
        while not page.delivered:
            await asyncio.sleep(0.001)
        await live.unlisten("inbox", page)
        renewals = len(added)
        await asyncio.sleep(0.6)
        assert len(added) == renewals  # a group that left renews no more
        assert not page.closed

    with caplog.at_level("WARNING", logger=live.log.name):
        async_to_sync(scenario)()
    assert [r.getMessage() for r in caplog.records] == [
        "live updates of inbox: renewing the group failed: Connection closed by server."
    ]


def test_it_sends_the_inbox_only_events_that_may_change_a_status(world):
    run = world.run("waiting")
    kinds = {event.kind: live.groups_for(event) for event in Event.objects.filter(run=run)}
    assert kinds["intent"] == [f"run-{run.pk}"]
    assert kinds["outcome"] == [f"run-{run.pk}"]
    assert kinds["tool_approval_requested"] == [f"run-{run.pk}", "inbox"]
    registration = Event.objects.filter(run__isnull=True).first()
    assert live.groups_for(registration) == []


def test_it_publishes_ids_only_through_a_networked_layer_from_any_thread(world, monkeypatch):
    sent: list[tuple[str, dict[str, Any]]] = []
    done = threading.Event()

    class NetworkedLayer:
        async def group_send(self, group: str, message: dict[str, Any]) -> None:
            await asyncio.sleep(0)
            sent.append((group, message))
            if len(sent) == 2:
                done.set()

    monkeypatch.setattr(live, "get_channel_layer", NetworkedLayer)
    run = world.run("waiting")
    event = Event.objects.get(run=run, kind=EventKind.TOOL_APPROVAL_REQUESTED)
    live.publish(event)
    assert done.wait(3)
    message = {
        "type": "live.event",
        "event": event.pk,
        "run": str(run.pk),
        "kind": "tool_approval_requested",
    }
    assert sent == [(f"run-{run.pk}", message), ("inbox", message)]


def burst(count: int, *, busy: float = 0.0) -> list[int]:
    """A worker's burst: `count` events of as many runs published from another thread, as a
    bulk action commits them, to this process listening to the inbox, whose loop is busy for
    `busy` seconds as they come. The event ids the inbox heard."""
    inbox = Page()

    async def scenario() -> None:
        await live.listen(live.INBOX_GROUP, inbox)
        live.attach_loop(asyncio.get_running_loop())
        events = [Event(id=n, run_id=uuid.uuid4(), kind=EventKind.CANCELLED) for n in range(count)]
        worker = threading.Thread(target=lambda: [live.publish(event) for event in events])
        worker.start()
        time.sleep(busy)  # the loop does nothing else meanwhile
        while worker.is_alive():
            await asyncio.sleep(0.01)
        for _ in range(1000):  # what was sent arrives within 10 s
            if len(inbox.delivered) >= count:
                break
            await asyncio.sleep(0.01)
        await live.unlisten(live.INBOX_GROUP, inbox)

    in_sync(scenario)
    return [message["event"] for message in inbox.delivered]


def test_a_burst_of_events_reaches_the_page_whole():
    """600 events at once: each sent at once, they emptied the Redis layer's connection pool
    and overran the channels, and the inbox heard 50 of them (the in-memory layer: 100)."""
    assert sorted(burst(600)) == list(range(600))


def test_a_burst_while_the_pages_process_is_busy_reaches_it_whole():
    """The layers hold what a busy process has not read yet up to their capacity: at 100 (the
    layers' default), a second's burst was cut there."""
    assert sorted(burst(300, busy=1.0)) == list(range(300))


def test_a_slow_send_to_the_runs_pages_does_not_hold_up_the_inbox(world, monkeypatch):
    inbox_told = threading.Event()
    release = threading.Event()

    class NetworkedLayer:
        async def group_send(self, group: str, message: dict[str, Any]) -> None:
            if group == "inbox":
                inbox_told.set()
            else:  # the run's group: in flight until released
                await asyncio.to_thread(release.wait)

    monkeypatch.setattr(live, "get_channel_layer", NetworkedLayer)
    run = world.run("waiting")
    try:
        live.publish(Event.objects.get(run=run, kind=EventKind.TOOL_APPROVAL_REQUESTED))
        assert inbox_told.wait(3)
    finally:
        release.set()


def test_it_publishes_nothing_when_no_socket_listens_in_this_process(world, monkeypatch, settings):
    """The in-memory layer (the embedded setup) reaches this process only; with no socket here,
    nobody could hear. (The Redis layer reaches every process, so it always publishes.)"""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    scheduled: list[Any] = []
    monkeypatch.setattr(live, "_consumer_loop", None)
    monkeypatch.setattr(asyncio, "run_coroutine_threadsafe", lambda *args: scheduled.append(args))
    run = world.run("waiting")
    live.publish(Event.objects.filter(run=run).last())
    assert scheduled == []


def bare_consumer(
    renders: Renders, render: Callable[[frozenset[str]], Frame]
) -> tuple[LiveConsumer, list[str]]:
    """A consumer as `connect` leaves it, its renders made by `render`, its frames kept."""
    consumer = LiveConsumer()
    consumer.pending, consumer.flush_task = [], None
    consumer.login_checked, consumer.login_gone = time.monotonic(), False  # as connect sets them
    consumer.renders = renders
    consumer._render = render  # type: ignore[method-assign]
    sent: list[str] = []

    async def send(text_data: str) -> None:
        sent.append(text_data)

    consumer.send = send  # type: ignore[method-assign]
    return consumer, sent


async def began(rendered: list[Any]) -> None:
    """Until the first render has begun (it runs in another thread)."""
    while not rendered:
        await asyncio.sleep(0.001)


WAITING = {"kind": EventKind.WAITING}


def test_an_event_alone_is_pushed_at_once_and_those_during_its_render_in_one_frame_after():
    gate = threading.Event()
    rendered: list[frozenset[str]] = []

    def render(changes: frozenset[str]) -> Frame:
        rendered.append(changes)
        if len(rendered) == 1:
            gate.wait(timeout=10)  # the first render is still in flight
        return Frame(len(rendered), f"frame {len(rendered)}")

    async def scenario() -> list[str]:
        consumer, sent = bare_consumer(Renders(), render)
        consumer.deliver({"kind": EventKind.SUBMITTED})
        await asyncio.wait_for(began(rendered), timeout=10)  # no gathering time before it
        for kind in (EventKind.CLAIMED, EventKind.INTENT, EventKind.OUTCOME, EventKind.WAITING):
            consumer.deliver({"kind": kind})
        gate.set()
        assert consumer.flush_task is not None
        await consumer.flush_task
        assert consumer.pending == []
        assert consumer.shown == 2  # the cursor of the last frame sent
        return sent

    # Five events, two renders: the first alone, the four that came during it together.
    assert async_to_sync(scenario)() == ["frame 1", "frame 2"]
    assert rendered == [frozenset({"status"}), frozenset({"status", "progress"})]


def test_fifty_sockets_that_show_a_page_alike_share_its_render_of_an_event():
    rendered: list[frozenset[str]] = []

    def render(changes: frozenset[str]) -> Frame:
        rendered.append(changes)
        time.sleep(0.01)
        return Frame(len(rendered), f"frame {len(rendered)}")

    async def scenario() -> list[tuple[LiveConsumer, list[str]]]:
        renders = Renders()
        sockets = [bare_consumer(renders, render) for _ in range(50)]
        for consumer, _ in sockets:
            consumer.deliver(WAITING)
        await asyncio.gather(*(consumer.flush_task for consumer, _ in sockets))
        return sockets

    sockets = async_to_sync(scenario)()
    # One render (two if the first began before the event reached every socket), not fifty.
    assert 1 <= len(rendered) <= 2
    assert [len(sent) for _, sent in sockets] == [1] * 50
    assert all(consumer.pending == [] for consumer, _ in sockets)


def test_a_stream_of_events_is_rendered_at_the_pages_pace_and_the_last_frame_shows_all():
    """The bound the load benchmark once lacked: shared renders, made and sent as fast as the
    process could, flooded 50 sockets with 12,558 frames in a minute (docs/performance.md)."""
    rendered: list[float] = []

    def render(changes: frozenset[str]) -> Frame:
        rendered.append(time.monotonic())
        time.sleep(0.002)
        return Frame(len(rendered), f"frame {len(rendered)}")

    async def scenario() -> tuple[list[tuple[LiveConsumer, list[str]]], float]:
        renders = Renders()
        sockets = [bare_consumer(renders, render) for _ in range(20)]
        started = time.monotonic()
        for _ in range(150):  # an event every few milliseconds, to every socket
            for consumer, _ in sockets:
                consumer.deliver(WAITING)
            await asyncio.sleep(0.005)
        await asyncio.gather(*(consumer.flush_task for consumer, _ in sockets))
        return sockets, time.monotonic() - started

    sockets, elapsed = async_to_sync(scenario)()
    budget = RENDER_BURST + RENDER_RATE * elapsed + 1
    # Twenty sockets, one page: its renders are paced, and a socket sends each once at most.
    assert len(rendered) <= budget, (len(rendered), elapsed)
    assert max(len(sent) for _, sent in sockets) <= len(rendered)
    # Nothing lost: every socket's last frame is from a render begun after its last event.
    assert all(consumer.pending == [] for consumer, _ in sockets)
    assert all(sent[-1] == sockets[0][1][-1] for _, sent in sockets)


def test_after_a_render_that_waited_the_page_rests_before_its_next():
    """A render that spent its time waiting (for a core, for the database), not working: the
    machine is busy, and the page leaves it to the requests for RENDER_REST times that wait."""
    rendered: list[float] = []

    def render(changes: frozenset[str]) -> Frame:
        rendered.append(time.monotonic())
        time.sleep(0.03)  # waits: no CPU of its thread
        return Frame(len(rendered), f"frame {len(rendered)}")

    async def scenario() -> list[str]:
        consumer, sent = bare_consumer(Renders(), render)
        consumer.deliver(WAITING)
        await asyncio.wait_for(began(rendered), timeout=10)
        await asyncio.sleep(0.04)  # the first render is done; the next event comes
        consumer.deliver(WAITING)
        assert consumer.flush_task is not None
        await consumer.flush_task
        return sent

    assert async_to_sync(scenario)() == ["frame 1", "frame 2"]
    # The burst had tokens for both: only the rest held the second back.
    assert rendered[1] - rendered[0] >= 0.03 * (1 + RENDER_REST) - 0.01


def test_a_page_rests_at_most_a_second_after_a_render_that_waited_long(monkeypatch):
    """A render held up for seconds by the database (a failover, the pool's timeout) rested
    twice that before the next: after a 10 s outage, every page of the process stayed 20 s
    behind the events. Here the render waits 0.3 s and the cap is 0.1 s."""
    monkeypatch.setattr(consumers, "RENDER_REST_MAX", 0.1)
    began: list[float] = []

    def render(changes: frozenset[str]) -> Frame:
        began.append(time.monotonic())
        time.sleep(0.3)  # waits: no CPU of its thread
        return Frame(1, "frame 1")

    async def scenario() -> tuple[list[str], float, float]:
        renders = Renders()
        consumer, sent = bare_consumer(renders, render)
        consumer.deliver(WAITING)
        assert consumer.flush_task is not None
        await consumer.flush_task
        return sent, renders.rested, time.monotonic()

    sent, rested, after = async_to_sync(scenario)()
    assert sent == ["frame 1"]
    # It rests from the render's end (at least 0.3 s after it began) for the cap, not for
    # RENDER_REST times the wait (0.6 s).
    assert began[0] + 0.3 < rested <= after + 0.1


def test_an_event_that_comes_while_a_render_is_due_is_in_that_render_or_the_next():
    """A run's progress, then its new status while the render of the progress waits for its
    turn: the status is rendered too. It once was not: its event came before that render
    began reading, so the frame was taken to show it, but the render drew only the progress
    regions, and the page kept "running" with the run completed."""
    rendered: list[frozenset[str]] = []

    def render(changes: frozenset[str]) -> Frame:
        rendered.append(changes)
        return Frame(len(rendered), f"frame {len(rendered)}")

    async def scenario() -> list[str]:
        renders = Renders()
        renders.rested = time.monotonic() + 0.05  # the page rests after a render that waited
        consumer, sent = bare_consumer(renders, render)
        consumer.deliver({"kind": EventKind.OUTCOME})
        await asyncio.sleep(0.01)  # its render is due, not begun
        assert rendered == []
        consumer.deliver({"kind": EventKind.COMPLETED})
        assert consumer.flush_task is not None
        await consumer.flush_task
        assert consumer.pending == []
        return sent

    # One frame: the render that was due took in the change that came while it waited.
    assert async_to_sync(scenario)() == ["frame 1"]
    assert rendered == [frozenset({"progress", "status"})]


def test_a_frame_shows_an_event_only_if_its_render_drew_the_events_regions():
    """The edge of the one above: the render's thread began, fixing what it draws, in the
    instant between an event's arrival and its joining. The event came before the render
    began reading, but its regions are not in the frame: it waits for the next."""
    asked: list[frozenset[str]] = []

    class Drawn:
        """Renders, answering with one that drew only the progress regions, then all."""

        def takes(self, changes: frozenset[str], moment: float) -> bool:
            return False

        async def after(self, moment: float, changes: frozenset[str], render: Any) -> Render:
            asked.append(changes)
            drawn = frozenset({"progress"}) if len(asked) == 1 else changes
            return Render(time.monotonic() + 60, drawn, Frame(len(asked), f"frame {len(asked)}"))

    async def scenario() -> list[str]:
        consumer, sent = bare_consumer(Drawn(), lambda changes: Frame(0, ""))  # type: ignore[arg-type]
        consumer.deliver({"kind": EventKind.OUTCOME})
        consumer.deliver({"kind": EventKind.COMPLETED})
        assert consumer.flush_task is not None
        await consumer.flush_task
        assert consumer.pending == []
        return sent

    assert async_to_sync(scenario)() == ["frame 1", "frame 2"]
    assert asked == [frozenset({"progress", "status"}), frozenset({"status"})]


def test_a_frame_of_progress_draws_a_status_change_its_cursor_covers(world, users):
    """The cursor a frame sets promises that the page reflects every event up to it. A run's
    status changes (here a cancel) and a frame of progress is rendered before that event's
    push reaches the socket: the frame draws the status regions too, or a page that
    reconnected from its cursor would keep the old status."""
    run = world.run("waiting")
    page = live_page("run", run.pk, user="viewer")
    assert page is not None
    request = socket_request(users["viewer"], {})
    shown = page.render(request, {STATUS, PROGRESS}).cursor
    assert page.render(request, {PROGRESS}, shown).message.count('id="run-header"') == 0

    cancel(run.pk, actor="operator")
    cancelled = Event.objects.get(run=run, kind=EventKind.CANCELLED).pk
    frame = page.render(request, {PROGRESS}, shown)
    assert frame.cursor >= cancelled
    header = re.search(r'<section id="run-header".*?</section>', frame.message, re.S)
    assert header is not None and "status-cancelled" in header.group(0)


def failing(times: int, calls: list[int]) -> Callable[[frozenset[str]], Frame]:
    """A render that fails its first `times` calls, as with the database away, then draws."""

    def render(changes: frozenset[str]) -> Frame:
        calls.append(1)
        if len(calls) <= times:
            raise RuntimeError("the database went away")
        return Frame(1, "frame")

    return render


def retries_logged(caplog: pytest.LogCaptureFixture) -> list[Any]:
    return [r.args[0] for r in caplog.records if r.name == consumers.log.name]  # type: ignore[index]


def test_a_failed_render_is_tried_again_with_no_new_event_backing_off(monkeypatch, caplog):
    """The events a failed render was to show came once: after a run's last event, no other
    comes to make the page render again. The render is tried again, each wait twice the last
    up to the cap, and a failed render is never the one reused."""
    monkeypatch.setattr(consumers, "RETRY_FIRST", 0.01)
    monkeypatch.setattr(consumers, "RETRY_MAX", 0.03)
    calls: list[int] = []

    async def scenario() -> list[str]:
        consumer, sent = bare_consumer(Renders(), failing(4, calls))
        consumer.deliver(WAITING)
        assert consumer.flush_task is not None
        await asyncio.wait_for(consumer.flush_task, 5)
        assert consumer.pending == []
        assert consumer.shown == 1
        return sent

    with caplog.at_level("WARNING", logger=consumers.log.name):
        assert async_to_sync(scenario)() == ["frame"]
    assert len(calls) == 5
    assert retries_logged(caplog) == [0.01, 0.02, 0.03, 0.03]
    assert all("went away" in r.exc_text for r in caplog.records if r.exc_text)


def test_a_failed_login_check_is_tried_again_and_the_frame_still_goes(
    settings, monkeypatch, caplog
):
    """The login check before a frame reads the session: the database failing it says nothing
    of the login, so it neither closes the socket nor drops the frame."""
    settings.AGENTOPS_LIVE_LOGIN_CHECK_SECONDS = 0
    monkeypatch.setattr(consumers, "RETRY_FIRST", 0.01)
    checks: list[int] = []

    def check_login() -> bool:
        checks.append(1)
        if len(checks) == 1:
            raise RuntimeError("the database went away")
        return True

    async def scenario() -> tuple[list[str], LiveConsumer]:
        consumer, sent = bare_consumer(Renders(), failing(0, []))
        consumer._check_login = check_login  # type: ignore[method-assign]
        consumer.deliver(WAITING)
        assert consumer.flush_task is not None
        await asyncio.wait_for(consumer.flush_task, 5)
        return sent, consumer

    with caplog.at_level("WARNING", logger=consumers.log.name):
        sent, consumer = async_to_sync(scenario)()
    assert sent == ["frame"]
    assert (consumer.login_gone, consumer.pending, len(checks)) == (False, [], 2)
    assert retries_logged(caplog) == [0.01]


def test_a_socket_that_closes_stops_trying_its_failed_render(monkeypatch):
    monkeypatch.setattr(consumers, "RETRY_FIRST", 0.01)
    monkeypatch.setattr(consumers, "RETRY_MAX", 0.01)
    calls: list[int] = []

    async def scenario() -> None:
        consumer, sent = bare_consumer(Renders(), failing(10**9, calls))
        consumer.deliver(WAITING)

        async def tried(times: int) -> None:
            while len(calls) < times:
                await asyncio.sleep(0.005)

        await asyncio.wait_for(tried(3), 5)
        await consumer.disconnect(1000)  # as Channels calls it when the socket closes
        assert consumer.flush_task is not None
        await asyncio.wait({consumer.flush_task})
        assert consumer.flush_task.cancelled()
        attempts = len(calls)
        await asyncio.sleep(0.1)
        assert (len(calls), sent) == (attempts, [])

    async_to_sync(scenario)()


def test_a_socket_that_closes_while_a_render_is_in_flight_leaves_it_to_the_others():
    gate = threading.Event()
    rendered: list[int] = []

    def render(changes: frozenset[str]) -> Frame:
        rendered.append(1)
        gate.wait(timeout=10)
        return Frame(1, "frame")

    async def scenario() -> tuple[list[str], list[str]]:
        renders = Renders()
        (first, first_sent), (second, second_sent) = (
            bare_consumer(renders, render),
            bare_consumer(renders, render),
        )
        first.deliver(WAITING)
        second.deliver(WAITING)
        await asyncio.wait_for(began(rendered), timeout=10)
        assert first.flush_task is not None and second.flush_task is not None
        first.flush_task.cancel()
        await asyncio.sleep(0)
        gate.set()
        await second.flush_task
        return first_sent, second_sent

    assert async_to_sync(scenario)() == ([], ["frame"])
    assert rendered == [1]


def test_inbox_pages_with_one_share_key_render_alike_for_any_user(world, users):
    """Sockets share an inbox render by LivePage.shared: what differs between users must be
    in the key. "mine" keeps a user's own items, and no other filter shows the user at all."""
    assigned, claimed = world.pending(world.run("waiting")), world.pending(world.run("waiting"))
    work.assign(assigned.pk, "approver", actor="operator")
    work.claim(claimed.pk, actor="operator")

    def inbox(show: str, persona: str) -> tuple[tuple[str, ...] | None, str]:
        page = live_page("inbox", None, key=show, user=users[persona].get_username())
        assert page is not None
        return page.shared, page.render(socket_request(users[persona], {}), {STATUS}).message

    for show in [*FILTERS, "no-such-filter"]:
        for one, other in itertools.combinations(("viewer", "approver", "operator"), 2):
            (key_a, html_a), (key_b, html_b) = inbox(show, one), inbox(show, other)
            assert (key_a == key_b) == (html_a == html_b), (show, one, other)
            assert (key_a == key_b) == (show != "mine"), (show, one, other)
    assert f"/interactions/{assigned.pk}/" in inbox("mine", "approver")[1]
    assert f"/interactions/{assigned.pk}/" not in inbox("mine", "operator")[1]


@pytest.mark.postgres  # the pass whose live updates go through the Redis channel layer
def test_a_consumer_waits_for_its_next_message_longer_than_the_redis_layers_blocking_pop():
    """A quiet page's socket stays open: redis-py 8 cut every read at 5 s by default, as long
    as the pop that waits for the consumer's next message, and the consumer died with it."""
    layer = redis_layer()

    async def scenario() -> None:
        channel = await layer.new_channel()
        with pytest.raises(asyncio.TimeoutError):  # nothing came: still waiting, no error
            await asyncio.wait_for(layer.receive(channel), timeout=layer.brpop_timeout + 1)

    in_sync(scenario)


@pytest.mark.postgres  # the pass whose live updates go through the Redis channel layer
def test_a_socket_closed_while_its_group_waits_to_receive_leaves_the_next_event_loop_working(
    world, as_user, django_capture_on_commit_callbacks, monkeypatch
):
    """Each test runs its own event loop on the process's one channel layer: a lock a cancelled
    receive left behind failed the next loop's second receive ("bound to a different event
    loop") and closed its sockets (empty_channel_layer says why, and starts every test afresh)."""
    layer = redis_layer()
    client = as_user("viewer")
    client.get("/")
    clean = layer._clean_receive_backup

    async def slow_clean(*args: Any) -> None:
        await asyncio.sleep(0.5)
        await clean(*args)

    async def closed_while_waiting() -> None:
        ws = socket("/ws/inbox/", client)
        assert (await ws.connect())[0]
        await acting(django_capture_on_commit_callbacks, lambda: world.run("waiting"))()
        await ws.receive_from(timeout=3)
        await asyncio.sleep(0.1)  # the group's next receive waits while the message is cleared
        await ws.disconnect()

    async def two_events_later() -> list[str]:
        ws = socket("/ws/inbox/", client)
        assert (await ws.connect())[0]
        pushed = []
        for _ in range(2):
            await acting(django_capture_on_commit_callbacks, lambda: world.run("waiting"))()
            pushed.append(await ws.receive_from(timeout=3))
            while not await ws.receive_nothing(timeout=0.5):
                pushed.append(await ws.receive_from())
        await ws.disconnect()
        return pushed

    monkeypatch.setattr(layer, "_clean_receive_backup", slow_clean)
    in_sync(closed_while_waiting)
    monkeypatch.setattr(layer, "_clean_receive_backup", clean)
    empty_channel_layer()
    pushed = in_sync(two_events_later)
    assert len(pushed) >= 2
    assert without_csrf(fragments(pushed[-1])["inbox"]) in without_csrf(
        client.get("/").content.decode()
    )


# --- the catch-up of an open socket --------------------------------------------------------------
# An event committed here without `acting` runs no after-commit hook: its message is never sent,
# as when the channel layer loses it.


def test_an_approval_whose_message_was_lost_reaches_the_inbox_at_its_catch_up(
    world, as_user, monkeypatch
):
    monkeypatch.setattr(consumers, "CATCH_UP_SECONDS", 0.2)
    client = as_user("viewer")
    client.get("/")
    pushed, interaction = pushed_approval(world, client, None)
    assert f"/interactions/{interaction.pk}/" in pushed["inbox"]
    assert without_csrf(pushed["inbox"]) in without_csrf(client.get("/").content.decode())


def test_progress_whose_message_was_lost_reaches_its_run_page_and_not_the_inbox(
    world, as_user, monkeypatch
):
    """A run's progress (an intent) changes its page; the inbox shows none of it, and its
    catch-up sends nothing for it, however many times it looks."""
    monkeypatch.setattr(consumers, "CATCH_UP_SECONDS", 0.1)
    run = world.run("waiting")
    client = as_user("viewer")
    client.get(f"/runs/{run.pk}/")

    shown = Event.objects.order_by("-id").values_list("id", flat=True)[0]

    async def scenario() -> tuple[str, bool]:
        inbox = socket("/ws/inbox/", client)
        assert (await inbox.connect())[0]
        page = await run_page_socket(client, run, shown)
        await database_sync_to_async(progress_of)(run, told=False)
        message = await page.receive_from(timeout=3)
        quiet = await inbox.receive_nothing(timeout=1)  # ten catch-ups
        await inbox.disconnect()
        await page.disconnect()
        return message, quiet

    message, inbox_quiet = in_sync(scenario)
    pushed = fragments(message)
    assert "run-timeline" in pushed and "run-header" not in pushed  # progress, not status
    assert inbox_quiet


@pytest.mark.parametrize("message", ["while the catch-up looks", "after the catch-up drew it"])
def test_an_event_that_its_message_and_a_catch_up_both_find_is_drawn_once(
    world, as_user, monkeypatch, message
):
    """A catch-up reads the ids its socket was told of as it begins: a message that arrives
    while it looks has drawn its event by the time it ends (here every catch-up looks as if it
    began before the message came). And a catch-up can find an event before its message
    arrives (the channel layer is slow): the late message draws nothing more."""
    late = message == "after the catch-up drew it"
    if late:
        monkeypatch.setattr(consumers, "CATCH_UP_SECONDS", 0.1)
    else:
        monkeypatch.setattr(consumers, "CATCH_UP_SECONDS", 0.5)
        missed_after = LivePage.missed_after

        def begun_before_the_message(page: LivePage, heard: int, told: frozenset[int]) -> Missed:
            return missed_after(page, heard, frozenset())

        monkeypatch.setattr(LivePage, "missed_after", begun_before_the_message)
    run, client, shown = viewed_run(world, as_user)

    async def scenario() -> tuple[str, bool]:
        ws = await run_page_socket(client, run, shown)
        event = await database_sync_to_async(progress_of)(run, told=not late)
        drawn = await ws.receive_from(timeout=3)
        if late:
            await database_sync_to_async(live.publish)(event)
        quiet = await ws.receive_nothing(timeout=1.2)  # and two catch-ups, or more
        await ws.disconnect()
        return drawn, quiet

    drawn, quiet = in_sync(scenario)
    assert "run-timeline" in fragments(drawn)
    assert quiet


def test_a_socket_told_of_every_event_sends_no_frame_at_its_catch_up(
    world, as_user, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(consumers, "CATCH_UP_SECONDS", 0.1)
    client = as_user("viewer")
    client.get("/")

    async def scenario() -> bool:
        ws = socket("/ws/inbox/", client)
        assert (await ws.connect())[0]
        await acting(django_capture_on_commit_callbacks, lambda: world.run("waiting"))()
        while not await ws.receive_nothing(timeout=0.5):  # the event's frames
            await ws.receive_from()
        quiet = await ws.receive_nothing(timeout=1)  # ten catch-ups
        await ws.disconnect()
        return quiet

    assert in_sync(scenario)


def test_a_failed_catch_up_is_logged_and_the_next_one_looks_again(
    world, as_user, monkeypatch, caplog
):
    monkeypatch.setattr(consumers, "CATCH_UP_SECONDS", 0.1)
    looked: list[int] = []
    missed_after = LivePage.missed_after

    def failing_once(page: LivePage, heard: int, told: frozenset[int]) -> Missed:
        looked.append(heard)
        if len(looked) == 1:
            raise RuntimeError("the database went away")
        return missed_after(page, heard, told)

    monkeypatch.setattr(LivePage, "missed_after", failing_once)
    client = as_user("viewer")
    client.get("/")
    with caplog.at_level("WARNING", logger=consumers.log.name):
        pushed, interaction = pushed_approval(world, client, None)
    assert f"/interactions/{interaction.pk}/" in pushed["inbox"]
    assert len(looked) >= 2
    assert [r.getMessage() for r in caplog.records if r.name == consumers.log.name] == [
        "live catch-up of a page failed"
    ]


# --- events that commit out of id order ------------------------------------------------------
# On PostgreSQL an event can commit after a newer one: its transaction drew its id first
# (store.committed_through; on SQLite ids commit in order). Here the newer id is written first
# and the one below it after, as the slower transaction commits; the late event's message is
# lost, as it is when it reaches the process before the page's socket listens, or when the
# layer drops it.


def late_status_event(run: Any, pk: int) -> None:
    """A status change of `run` (its cancellation) whose event commits with id `pk`, below a
    newer one already committed; its message is never sent."""
    cancel(run.pk, actor="bob", reason="not needed")
    drawn = Event.objects.get(run=run, kind=EventKind.CANCELLED).pk
    if drawn != pk:  # the sequence drew `pk` itself, unless an insert rolled back before
        with connection.cursor() as cursor:  # (events are append-only: only this test moves one)
            cursor.execute(f"UPDATE {Event._meta.db_table} SET id = %s WHERE id = %s", [pk, drawn])
    assert Event.objects.get(pk=pk).kind == EventKind.CANCELLED


@pytest.mark.postgres
def test_an_event_that_commits_below_a_newer_one_reaches_a_page_rendered_in_between(world, as_user):
    run, other = world.run("waiting"), world.run("waiting")
    newest = Event.objects.order_by("-id").values_list("id", flat=True)[0]
    Event.objects.create(
        pk=newest + 2, run=other, kind=EventKind.RETRIED, actor="bob", created_at=now()
    )
    client = as_user("viewer")
    page = client.get(f"/runs/{run.pk}/").content.decode()
    cursor = int(re.search(r'data-event="(\d+)"', page).group(1))
    assert cursor == newest  # not newest + 2: the event with id newest + 1 may still commit
    late_status_event(run, newest + 1)

    async def scenario() -> str:
        ws = socket(f"/ws/runs/{run.pk}/", client)
        assert (await ws.connect())[0]
        await ws.send_json_to({"after": cursor})
        message = await ws.receive_from(timeout=3)
        await ws.disconnect()
        return message

    assert 'status-cancelled">cancelled' in fragments(in_sync(scenario))["run-header"]


@pytest.mark.postgres
def test_an_event_that_commits_below_one_its_socket_was_told_of_comes_at_its_catch_up(
    world, as_user, monkeypatch
):
    monkeypatch.setattr(consumers, "CATCH_UP_SECONDS", 0.1)
    run, client, newest = viewed_run(world, as_user)

    async def scenario() -> tuple[str, bool, str]:
        ws = await run_page_socket(client, run, newest)
        await database_sync_to_async(progress_of)(run, pk=newest + 2)
        told = await ws.receive_from(timeout=3)
        quiet = await ws.receive_nothing(timeout=0.5)  # five catch-ups: nothing it was not told
        await database_sync_to_async(late_status_event)(run, newest + 1)
        caught_up = await ws.receive_from(timeout=3)
        await ws.disconnect()
        return told, quiet, caught_up

    told, quiet, caught_up = in_sync(scenario)
    assert "run-timeline" in fragments(told) and "run-header" not in fragments(told)
    assert quiet
    assert 'status-cancelled">cancelled' in fragments(caught_up)["run-header"]


@pytest.mark.postgres
def test_an_event_that_commits_after_its_hole_was_taken_for_a_rollback_is_drawn_by_its_message(
    world, as_user, settings
):
    """Past AGENTOPS_OUTBOX_GAP_SECONDS a hole is taken for a rollback and the cursor passes it;
    an event that commits there after all (its transaction held that long) is drawn when its
    message comes, though the socket's cursor has passed it."""
    settings.AGENTOPS_OUTBOX_GAP_SECONDS = 0.5
    run = world.run("waiting")
    client = as_user("viewer")
    newest = Event.objects.order_by("-id").values_list("id", flat=True)[0]
    Event.objects.create(
        pk=newest + 2,
        run=run,
        kind=EventKind.INTENT,
        actor="runtime",
        operation_key="lookup:9",
        created_at=now() - dt.timedelta(seconds=5),
    )
    page = client.get(f"/runs/{run.pk}/").content.decode()
    cursor = int(re.search(r'data-event="(\d+)"', page).group(1))
    assert cursor == newest + 2  # the hole at newest + 1 taken for a rollback

    def late_status_told() -> None:
        late_status_event(run, newest + 1)
        live.publish(Event.objects.get(pk=newest + 1))

    async def scenario() -> str:
        ws = await run_page_socket(client, run, cursor)
        await database_sync_to_async(late_status_told)()
        message = await ws.receive_from(timeout=3)
        await ws.disconnect()
        return message

    assert 'status-cancelled">cancelled' in fragments(in_sync(scenario))["run-header"]


def test_a_catch_up_that_finds_more_events_than_it_sorts_out_redraws_the_page(
    world, as_user, monkeypatch
):
    """Past MISSED_ROWS events since its last look, the catch-up does not sort out which it was
    told of: the page redraws, and the events past the rows it read are not passed over. All
    three events come within one catch-up period (the first catch-up two seconds after the open)."""
    monkeypatch.setattr(consumers, "CATCH_UP_SECONDS", 2.0)
    monkeypatch.setattr(fragments_module, "MISSED_ROWS", 2)
    run, client, newest = viewed_run(world, as_user)

    async def scenario() -> tuple[int, str]:
        ws = await run_page_socket(client, run, newest)
        frames = 0
        for _ in range(2):
            await database_sync_to_async(progress_of)(run)
            await ws.receive_from(timeout=3)
            frames += 1
        await database_sync_to_async(progress_of)(run, told=False)
        assert await ws.receive_nothing(timeout=0.1)
        caught_up = await ws.receive_from(timeout=5)
        await ws.disconnect()
        return frames, caught_up

    frames, caught_up = in_sync(scenario)
    assert frames == 2
    assert "run-timeline" in fragments(caught_up)
