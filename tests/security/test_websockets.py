"""Websockets: anonymous, foreign-origin, unauthorized and expired subscriptions are refused;
an API token opens no socket; hostile frames neither crash the socket nor change anything; and
the authorization matrix's approval rules and claims, live: a push offers each subscriber the
controls their page offers them, which are the ones the rule lets them use."""

from __future__ import annotations

import datetime as dt
import json
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group, User
from django.contrib.sessions.models import Session
from django.test import Client
from django.utils import timezone

from agentops import consumers
from agentops.asgi import application
from agentops.views.common import REAUTH_KEY
from runtime import claim, respond
from runtime.models import ApprovalRule, Interaction
from tests.api.conftest import Api, make_account, make_token
from tests.console.conftest import World, without_csrf
from tests.console.test_live import acting, empty_channel_layer, fragments
from tests.security.conftest import PERSONAS, everything
from tests.support.personas import logged_in

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


def opens(
    path: str,
    client: Client | None,
    origin: tuple[bytes, bytes] | None = OURS,
    extra: tuple[tuple[bytes, bytes], ...] = (),
) -> bool:
    """Whether the socket is accepted (`extra`: more headers); it is closed again either way."""

    async def scenario() -> bool:
        ws = WebsocketCommunicator(application, path, [*headers(client, origin), *extra])
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


# Ways a socket's login ends while it is open, each as an admin or the person would end it.
LOGIN_ENDINGS: dict[str, Callable[[Client, User], Any]] = {
    "logout": lambda client, user: client.logout(),
    "session expired": lambda client, user: Session.objects.update(
        expire_date=timezone.now() - dt.timedelta(seconds=1)
    ),
    "password changed": lambda client, user: (user.set_password("a-new-password"), user.save()),
    "deactivated": lambda client, user: User.objects.filter(pk=user.pk).update(is_active=False),
    "permission withdrawn": lambda client, user: user.groups.clear(),
}


@pytest.mark.parametrize("ending", ["none", *LOGIN_ENDINGS])
def test_a_socket_whose_login_ends_is_closed_at_its_next_frame(
    personas, world, committed, settings, ending
):
    """A socket was checked only as it opened: one left open after a logout, or by a user an
    admin deactivated, went on receiving the inbox for as long as it stayed open."""
    settings.AGENTOPS_LIVE_LOGIN_CHECK_SECONDS = 0  # every frame checks
    client = personas("operator")
    client.get("/")

    async def scenario() -> dict[str, Any]:
        ws = WebsocketCommunicator(application, "/ws/inbox/", headers(client))
        assert (await ws.connect(timeout=3))[0]
        if ending != "none":
            user = await database_sync_to_async(User.objects.get)(username="operator")
            await database_sync_to_async(LOGIN_ENDINGS[ending])(client, user)
        await committed(lambda: world.run("waiting"))()
        output: dict[str, Any] = await ws.receive_output(timeout=3)
        await ws.disconnect()
        return output

    output = async_to_sync(scenario)()
    if ending == "none":
        assert output["type"] == "websocket.send"
        assert 'id="inbox"' in output["text"]
    else:
        assert output == {"type": "websocket.close", "code": consumers.LOGIN_GONE}


def test_a_socket_checks_its_login_at_most_once_a_minute(
    personas, world, committed, monkeypatch, settings
):
    checks: list[bool] = []
    check = consumers.LiveConsumer._check_login

    def counted(self: consumers.LiveConsumer) -> bool:
        checks.append(check(self))
        return checks[-1]

    monkeypatch.setattr(consumers.LiveConsumer, "_check_login", counted)
    client = personas("operator")
    client.get("/")

    async def scenario() -> list[str]:
        ws = WebsocketCommunicator(application, "/ws/inbox/", headers(client))
        assert (await ws.connect(timeout=3))[0]
        pushed = []
        for _ in range(3):
            await committed(lambda: world.run("waiting"))()
            pushed.append(await ws.receive_from(timeout=3))
            while not await ws.receive_nothing(timeout=0.3):
                pushed.append(await ws.receive_from())
        await ws.disconnect()
        return pushed

    assert len(async_to_sync(scenario)()) >= 3
    assert checks == []  # opened less than a minute ago: the connect's check holds
    settings.AGENTOPS_LIVE_LOGIN_CHECK_SECONDS = 0
    assert len(async_to_sync(scenario)()) >= 3
    assert checks and all(checks)


# Where a client might put an API token to open a socket: (query string, headers).
TOKEN_PLACES = {
    "authorization header": lambda token: ("", ((b"authorization", f"Bearer {token}".encode()),)),
    "query string": lambda token: (f"token={token}&access_token={token}", ()),
    "session cookie": lambda token: ("", ((b"cookie", f"sessionid={token}".encode()),)),
}


@pytest.mark.parametrize("place", TOKEN_PLACES)
def test_an_api_token_opens_no_socket_wherever_it_is_put(scene, place):
    """Tokens are for the API only: a service account never gets a console session."""
    token = make_token(make_account("ci"))  # an operator's groups, every scope
    assert Api(token).get("/runs").status_code == 200  # the token itself is good
    query, extra = TOKEN_PLACES[place](token)
    for page, path in sockets(scene).items():
        joined = f"{path}{'&' if '?' in path else '?'}{query}" if query else path
        assert opens(joined, None, extra=extra) is False, page


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


# --- Approval rules and claims, live ------------------------------------------------------------

# A ruled approval (the approvers group decides, four-eyes, a quorum of two) of a run that
# alice, an approver, started: what each subscriber may decide under the rule. (The outsider
# cannot subscribe at all: above.)
MAY_DECIDE: dict[str, set[str]] = {
    "approver": {"approve", "reject"},
    "requester": {"reject"},  # alice: four-eyes keeps her from approving her own run's call
    "operator": set(),  # answers approvals in general, but is not in the rule's group
    "reconciler": set(),
    "viewer": set(),
    "agent_admin": set(),
}
# Who holds the permission to answer, and so may say "I am on it" (a claim is not a decision).
ANSWERS = {"approver", "requester", "operator"}
DECISIONS = {"approve", "reject", "edit"}
CLAIMS = {"claim", "release"}


def controls(html: str) -> set[str]:
    """The actions `html` offers: each form's verb, and a decision form's buttons by value."""
    verbs = set(re.findall(r'\saction="[^"]*/(\w+)/(?:\?[^"]*)?"', html)) - {"respond"}
    return verbs | set(re.findall(r'name="decision" value="(\w+)"', html))


def pending_under_rule(world: World, **rule: Any) -> Interaction:
    """A pending refund approval under a rule of two approvers (`rule`: its other settings);
    alice (World submits every run as her) and bob are approvers."""
    approvers = Group.objects.get(name="approvers")
    for name in ("alice", "bob"):
        User.objects.create(username=name).groups.add(approvers)
    ApprovalRule.objects.create(
        name="two approvers",
        agent="approvals",
        tool="refund",
        approver_group=approvers,
        quorum=2,
        **rule,
    )
    return world.pending(world.run("waiting"))


@pytest.fixture
def ruled(world: World) -> Interaction:
    """A pending approval under the rule of MAY_DECIDE; bob, an approver, is the other person."""
    return pending_under_rule(world, four_eyes=True)


Action = Callable[[], Any]


@pytest.fixture
def committed(
    settings: Any, django_capture_on_commit_callbacks: Any
) -> Callable[[Action], Callable[[], Awaitable[Any]]]:
    """committed(action) -> `action` to await, as a commit runs it: its events pushed through
    the real hook, from an empty channel layer."""
    settings.AGENTOPS_PUBLISH = "agentops.live.publish"
    empty_channel_layer()
    return lambda action: acting(django_capture_on_commit_callbacks, action)


def subscriber(personas: Any, persona: str) -> Client:
    if persona == "requester":
        return logged_in(User.objects.get(username="alice"))
    client: Client = personas(persona)
    return client


@pytest.mark.parametrize("page", ["interaction", "run"])
@pytest.mark.parametrize("persona", MAY_DECIDE)
def test_a_push_offers_a_subscriber_only_the_decisions_the_rule_lets_them_make(
    personas, ruled, committed, persona, page
):
    client = subscriber(personas, persona)
    url = f"/interactions/{ruled.pk}/" if page == "interaction" else f"/runs/{ruled.run_id}/"
    client.get(url)  # the page the socket belongs to (and its CSRF cookie)

    async def scenario() -> str:
        ws = WebsocketCommunicator(application, f"/ws{url}", headers(client))
        assert (await ws.connect(timeout=3))[0]
        # One approval of two: the call stays pending, its page is pushed again.
        await committed(lambda: respond(ruled.pk, {"approved": True}, actor="bob"))()
        message = await ws.receive_from(timeout=3)
        await ws.disconnect()
        return message

    pushed = fragments(async_to_sync(scenario)())
    fresh = without_csrf(client.get(url).content.decode())
    for dom_id, html in pushed.items():
        if dom_id != "live-cursor":
            assert without_csrf(html) in fresh, dom_id
    expected = MAY_DECIDE[persona] if page == "interaction" else set()  # a run page links to it
    assert controls("".join(pushed.values())) & DECISIONS == expected
    assert controls(fresh) & DECISIONS == expected


@pytest.mark.parametrize("persona", MAY_DECIDE)
def test_a_claim_is_pushed_as_the_claimers_with_no_claim_control_for_anyone_else(
    personas, ruled, committed, persona
):
    client = subscriber(personas, persona)
    url = f"/interactions/{ruled.pk}/"
    before = controls(client.get(url).content.decode())
    assert before & CLAIMS == ({"claim"} if persona in ANSWERS else set())

    async def scenario() -> tuple[str, str]:
        page = WebsocketCommunicator(application, f"/ws{url}", headers(client))
        inbox = WebsocketCommunicator(application, "/ws/inbox/", headers(client))
        for ws in (page, inbox):
            assert (await ws.connect(timeout=3))[0]
        await committed(lambda: claim(ruled.pk, actor="bob"))()
        got = (await page.receive_from(timeout=3), await inbox.receive_from(timeout=3))
        for ws in (page, inbox):
            await ws.disconnect()
        return got

    on_page, in_inbox = async_to_sync(scenario)()
    pushed = fragments(on_page)[f"interaction-{ruled.pk}"]
    assert '<strong class="actor">bob</strong> is on it' in pushed
    assert controls(pushed) & CLAIMS == set()
    assert controls(pushed) & DECISIONS == MAY_DECIDE[persona]  # a claim decides nothing
    assert without_csrf(pushed) in without_csrf(client.get(url).content.decode())
    assert "bob is on it" in fragments(in_inbox)["inbox"]


@pytest.fixture
def risky(world: World) -> Interaction:
    """A pending approval that a high-risk rule guards."""
    return pending_under_rule(world, high_risk=True)


@pytest.mark.parametrize("fresh", [True, False], ids=["password-entered", "no-password"])
def test_a_push_asks_for_the_password_only_when_the_page_would(personas, risky, committed, fresh):
    client = personas("approver")
    url = f"/interactions/{risky.pk}/"
    client.get(url)
    if fresh:
        # Entered after the socket would have opened: the push reads the session as it is now.
        session = client.session
        session[REAUTH_KEY] = time.time()
        session.save()

    async def scenario() -> str:
        ws = WebsocketCommunicator(application, f"/ws{url}", headers(client))
        assert (await ws.connect(timeout=3))[0]
        vote = {"approved": True}
        await committed(lambda: respond(risky.pk, vote, actor="bob", reauthenticated=True))()
        message = await ws.receive_from(timeout=3)
        await ws.disconnect()
        return message

    pushed = fragments(async_to_sync(scenario)())[f"interaction-{risky.pk}"]
    page = without_csrf(client.get(url).content.decode())
    assert without_csrf(pushed) in page
    assert ('name="password"' in pushed) is not fresh
