"""The console's HTTP side under ASGI (agentops.handlers): the middleware and the view run as one
synchronous stack, entered once per request, and a request through it is served as before."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref import sync
from channels.testing import HttpCommunicator
from django.contrib.auth.models import User
from django.core.handlers.asgi import ASGIHandler

from agentops.asgi import django_asgi_app
from agentops.handlers import SyncStackASGIHandler
from tests.support.personas import console_user, ensure_groups, logged_in

HOST = (b"host", b"testserver")


def serve(
    handler: Any, path: str, *, cookie: bytes = b"", method: str = "GET", body: bytes = b""
) -> dict[str, Any]:
    headers = [HOST, (b"cookie", cookie)] if cookie else [HOST]
    if body:
        headers.append((b"content-type", b"application/x-www-form-urlencoded"))
    communicator = HttpCommunicator(handler, method, path, body=body, headers=headers)
    return asyncio.run(communicator.get_response(timeout=30))


def header(response: dict[str, Any], name: bytes) -> str:
    return next((v.decode() for k, v in response["headers"] if k.lower() == name), "")


@pytest.fixture(autouse=True)
def _groups(transactional_db: None) -> None:
    # The requests run on threads of their own, which see only committed rows.
    ensure_groups()


def session_cookie(user: User) -> bytes:
    return f"sessionid={logged_in(user).cookies['sessionid'].value}".encode()


@pytest.fixture
def switches(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every move from the event loop into a thread (asgiref's sync_to_async), by callable."""
    seen: list[str] = []
    original = sync.SyncToAsync.__call__

    async def counted(self: sync.SyncToAsync, *args: Any, **kwargs: Any) -> Any:
        seen.append(getattr(self.func, "__qualname__", repr(self.func)))
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(sync.SyncToAsync, "__call__", counted)
    yield seen


def test_it_is_the_application_the_console_serves() -> None:
    assert isinstance(django_asgi_app, SyncStackASGIHandler)


def test_it_enters_the_stack_once_per_request(switches: list[str]) -> None:
    cookie = session_cookie(console_user("operator"))

    response = serve(SyncStackASGIHandler(), "/", cookie=cookie)

    assert response["status"] == 200
    # The request_started signal, the whole stack with its view, and the response's close.
    assert switches.count("BaseHandler.get_response") == 1
    assert len(switches) == 3, switches


def test_djangos_handler_switches_at_every_middleware_hook(switches: list[str]) -> None:
    """The baseline of the test above, on the same request: what the console's handler saves."""
    cookie = session_cookie(console_user("operator"))

    response = serve(ASGIHandler(), "/", cookie=cookie)

    assert response["status"] == 200
    # 17 on Django 5.2: into the stack, back to the loop below the console's own middleware,
    # then a thread for every hook of every mixin middleware and one for the view.
    assert len(switches) > 10, switches


def test_a_page_has_its_headers_and_its_session() -> None:
    cookie = session_cookie(console_user("operator"))

    response = serve(django_asgi_app, "/", cookie=cookie)

    assert response["status"] == 200
    assert b'id="inbox"' in response["body"]
    assert header(response, b"cache-control") == "no-store"
    assert "camera=()" in header(response, b"permissions-policy")
    assert "default-src" in header(response, b"content-security-policy")
    assert header(response, b"x-frame-options") == "DENY"


def test_an_anonymous_visitor_is_sent_to_the_login_page() -> None:
    response = serve(django_asgi_app, "/runs/")

    assert response["status"] == 302
    assert header(response, b"location").startswith("/accounts/login/")


def test_a_post_without_its_csrf_token_is_refused_and_changes_nothing() -> None:
    operator = console_user("operator")
    cookie = session_cookie(operator)
    before = User.objects.get(pk=operator.pk).last_login

    response = serve(
        django_asgi_app, "/accounts/logout/", cookie=cookie, method="POST", body=b"x=1"
    )

    assert response["status"] == 403
    # Still logged in: the same session serves a page.
    assert serve(django_asgi_app, "/", cookie=cookie)["status"] == 200
    assert User.objects.get(pk=operator.pk).last_login == before


def test_a_nul_in_the_address_is_refused_by_the_stack() -> None:
    cookie = session_cookie(console_user("operator"))

    response = serve(django_asgi_app, "/runs/?q=a%00b", cookie=cookie)

    assert response["status"] == 400
    assert b"NUL character" in response["body"]
