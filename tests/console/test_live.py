"""The live console over websockets: pushes equal a fresh GET, catch-up, login and origin."""

from __future__ import annotations

import asyncio
import os
import re
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from channels_redis.core import RedisChannelLayer
from django.contrib.auth.models import Group, User
from django.test import Client

from agentops import live
from agentops.asgi import application
from agentops.consumers import LiveConsumer, SharedRender
from agentops.views import fragments as fragments_module
from agentops.views.fragments import LivePage, change_of, live_page
from runtime import cancel, respond, retry
from runtime.models import Event, EventKind, Permission
from tests.console.conftest import without_csrf
from tests.support.personas import logged_in
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
    """
    layer = get_channel_layer()
    if isinstance(layer, RedisChannelLayer):
        for host in layer.hosts:
            flush_redis(host["address"])
    else:
        async_to_sync(layer.flush)()


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


def test_it_pushes_a_new_approval_to_the_inbox(world, as_user, django_capture_on_commit_callbacks):
    client = as_user("viewer")
    client.get("/")
    made: list[Any] = []

    async def scenario() -> str:
        ws = socket("/ws/inbox/", client)
        assert (await ws.connect())[0]
        await acting(
            django_capture_on_commit_callbacks, lambda: made.append(world.run("waiting"))
        )()
        message = await ws.receive_from(timeout=3)
        await ws.disconnect()
        return message

    pushed = fragments(in_sync(scenario))
    interaction = world.pending(made[0])
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


def test_it_sends_the_events_that_arrive_while_a_push_renders():
    consumer = LiveConsumer()
    consumer.pending = {"status"}
    consumer.rendering = asyncio.Lock()
    pushes: list[frozenset[str]] = []

    async def push(changes: frozenset[str]) -> None:
        pushes.append(changes)
        if len(pushes) == 1:
            consumer.pending.add("progress")  # committed while the first push rendered

    consumer._push = push  # type: ignore[method-assign]
    async_to_sync(consumer._flush)()
    assert pushes == [frozenset({"status"}), frozenset({"progress"})]


def test_it_renders_the_first_event_at_once_and_a_burst_during_its_render_once():
    consumer = LiveConsumer()
    consumer.pending = set()
    consumer.flush_task = None
    consumer.rendering = asyncio.Lock()
    renders: list[frozenset[str]] = []

    async def scenario() -> None:
        first_render_open = asyncio.Event()

        async def push(changes: frozenset[str]) -> None:
            renders.append(changes)
            if len(renders) == 1:
                await first_render_open.wait()  # the first render is still in flight

        consumer._push = push  # type: ignore[method-assign]
        await consumer.live_event({"kind": EventKind.SUBMITTED})
        await asyncio.sleep(0)  # one turn of the loop: no gathering time before the render
        assert renders == [frozenset({"status"})]
        for kind in (EventKind.CLAIMED, EventKind.INTENT, EventKind.OUTCOME, EventKind.WAITING):
            await consumer.live_event({"kind": kind})
        first_render_open.set()
        assert consumer.flush_task is not None
        await consumer.flush_task

    async_to_sync(scenario)()
    # Five events, two renders: the first alone, the four that came during it together.
    assert len(renders) == 2
    assert renders[1] == frozenset(
        change_of(kind)
        for kind in (EventKind.CLAIMED, EventKind.INTENT, EventKind.OUTCOME, EventKind.WAITING)
    )


@pytest.mark.postgres  # the pass whose live updates go through the Redis channel layer
def test_a_consumer_waits_for_its_next_message_longer_than_the_redis_layers_blocking_pop():
    """A quiet page's socket stays open: redis-py 8 cut every read at 5 s by default, as long
    as the pop that waits for the consumer's next message, and the consumer died with it."""
    layer = get_channel_layer()
    if not isinstance(layer, RedisChannelLayer):
        message = "REDIS_URL is not set: live updates use the in-memory layer, not Redis"
        if os.environ.get("AGENTOPS_STRICT") == "1":
            pytest.fail(message)
        pytest.skip(message)

    async def scenario() -> None:
        channel = await layer.new_channel()
        with pytest.raises(asyncio.TimeoutError):  # nothing came: still waiting, no error
            await asyncio.wait_for(layer.receive(channel), timeout=layer.brpop_timeout + 1)

    in_sync(scenario)


# --- one render of the inbox for every socket that shows it alike -------------------------------


def counting_renders(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The users whose request rendered a live page, one entry per render."""
    renders: list[str] = []
    real = LivePage.render

    def render(self: LivePage, request: Any, changes: Any) -> str:
        renders.append(request.user.get_username())
        return real(self, request, changes)

    monkeypatch.setattr(LivePage, "render", render)
    return renders


def colleague(name: str, group: str) -> Client:
    user = User.objects.create(username=name)
    user.groups.add(Group.objects.get(name=group))
    return logged_in(user)


def cancelling(capture: Any, run_id: Any) -> Callable[[], Any]:
    """One event for the inbox: a waiting run cancelled."""
    return acting(capture, lambda: cancel(run_id, actor="bob"))


def test_one_event_is_rendered_once_for_every_socket_on_the_inbox(
    world, as_user, monkeypatch, django_capture_on_commit_callbacks
):
    run = world.run("waiting")
    waiting = world.pending(run)
    clients = [as_user("operator"), *(colleague(f"op{n}", "operators") for n in range(4))]
    for client in clients:
        client.get("/")
    renders = counting_renders(monkeypatch)
    seen = Event.objects.order_by("-id")[0].pk

    async def scenario() -> list[str]:
        sockets = [socket("/ws/inbox/", client) for client in clients]
        for ws in sockets:
            assert (await ws.connect())[0]
        await cancelling(django_capture_on_commit_callbacks, run.pk)()
        pushed = [await ws.receive_from(timeout=3) for ws in sockets]
        for ws in sockets:
            assert await ws.receive_nothing(timeout=0.2)
            await ws.disconnect()
        return pushed

    pushed = in_sync(scenario)
    assert Event.objects.filter(pk__gt=seen).exclude(kind__in=live.PROGRESS_KINDS).count() == 1
    assert len(renders) == 1  # five sockets, one event: one render
    assert len(set(pushed)) == 1
    inbox = fragments(pushed[0])["inbox"]
    assert f"/interactions/{waiting.pk}/" not in inbox  # read after the commit
    for client in clients:
        assert without_csrf(inbox) in without_csrf(client.get("/").content.decode())


def test_users_who_see_different_html_never_share_a_render(
    world, as_user, monkeypatch, django_capture_on_commit_callbacks
):
    """A viewer may not decide, an operator may: marked in each render by its permission, as a
    fragment showing decide buttons would be, each socket gets its own user's render."""
    run = world.run("waiting")
    world.run("waiting")
    viewer, operator = as_user("viewer"), as_user("operator")
    other_viewer = colleague("vera", "viewers")
    for client in (viewer, operator, other_viewer):
        client.get("/")
    renders = counting_renders(monkeypatch)
    real = fragments_module._render

    def render(names: Any, context: Any, request: Any) -> list[str]:
        decides = request.user.has_perm(Permission.RESPOND)
        return [f"{html}<!-- decides: {decides} -->" for html in real(names, context, request)]

    monkeypatch.setattr(fragments_module, "_render", render)

    async def scenario() -> list[str]:
        sockets = [socket("/ws/inbox/", client) for client in (viewer, operator, other_viewer)]
        for ws in sockets:
            assert (await ws.connect())[0]
        await cancelling(django_capture_on_commit_callbacks, run.pk)()
        pushed = [await ws.receive_from(timeout=3) for ws in sockets]
        for ws in sockets:
            await ws.disconnect()
        return pushed

    to_viewer, to_operator, to_other_viewer = in_sync(scenario)
    assert sorted(renders) in (["operator", "viewer"], ["operator", "vera"])
    assert to_viewer.endswith("<!-- decides: False -->")
    assert to_other_viewer == to_viewer  # the same permissions: the same render
    assert to_operator.endswith("<!-- decides: True -->")
    for client, pushed in ((viewer, to_viewer), (operator, to_operator)):
        inbox = fragments(pushed)["inbox"].rsplit("<!--", 1)[0]
        assert without_csrf(inbox) in without_csrf(client.get("/").content.decode())


def test_the_inbox_of_their_own_items_is_keyed_by_the_user():
    mine, everyone = live_page("inbox", None, "mine"), live_page("inbox", None, "")
    assert mine is not None and everyone is not None
    assert mine.shared_by is not None and everyone.shared_by is not None

    class Operator:
        def __init__(self, name: str) -> None:
            self.name = name

        def get_username(self) -> str:
            return self.name

        def get_all_permissions(self) -> set[str]:
            return {Permission.VIEW, Permission.RESPOND}

    ann, bob = Operator("ann"), Operator("bob")
    assert mine.shared_by(ann) != mine.shared_by(bob)
    assert everyone.shared_by(ann) == everyone.shared_by(bob)
    assert mine.shared_by(ann) != everyone.shared_by(ann)


def test_a_socket_takes_the_first_render_started_after_its_event():
    shared = SharedRender()
    log: list[str] = []
    status = frozenset({"status"})

    def render(changes: frozenset[str]) -> str:
        log.append(f"render {shared.started}")
        return f"state {shared.started}"

    async def scenario() -> list[tuple[int, str]]:
        e1 = shared.need(1)  # event 1 arrives at a first socket: nothing started yet
        first = asyncio.ensure_future(shared.render(e1, status, render))
        await asyncio.sleep(0.05)  # render 1 starts
        e2 = shared.need(2)  # event 2 arrives after render 1 started: it may not show it
        assert (e1, e2) == (0, 1)
        assert shared.need(1) == 0  # event 1 arriving at a second socket: noted already
        return [
            await first,
            await shared.render(shared.need(1), status, render),
            await shared.render(shared.need(2), status, render),
        ]

    results = async_to_sync(scenario)()
    # Event 1 at both sockets: render 1, once; event 2 (after render 1 had started): render 2.
    assert results == [(1, "state 1"), (1, "state 1"), (2, "state 2")]
    assert log == ["render 1", "render 2"]


def test_a_socket_sends_no_render_older_than_the_last_it_sent():
    consumer = LiveConsumer()
    consumer.page = LivePage(("inbox",), None, lambda request, changes: [])
    consumer.rendering = asyncio.Lock()
    consumer.shared = SharedRender()
    sent: list[str] = []
    rendered = iter([(2, "newer"), (1, "older")])

    async def send(text_data: str) -> None:
        sent.append(text_data)

    async def render(after: int, changes: frozenset[str], _: Any) -> tuple[int, str]:
        return next(rendered)

    consumer.send = send  # type: ignore[method-assign]
    consumer.shared.render = render  # type: ignore[method-assign]
    status, both = frozenset({"status"}), frozenset({"status", "progress"})
    # A catch-up's render (2) is sent; then events noted before render 1 come in.
    async_to_sync(consumer._push)(status, 1)
    async_to_sync(consumer._push)(status, 0)  # render 2 showed it: not even asked for
    async_to_sync(consumer._push)(both, 0)  # asked for, and given render 1: older, not sent
    assert sent == ["newer"]
