"""Privacy headers on every URL the project routes: found by walking the URL resolver, so a page
added tomorrow is checked without being listed here.

Every response carries `Permissions-Policy` denying the browser features the console never uses,
and `Cache-Control: no-store` (run data must not stay in a cache after the operator leaves).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from agentops.middleware import PrivacyHeadersMiddleware
from tests.api.conftest import make_account, make_token

DENIED = ("camera", "microphone", "geolocation", "payment", "usb", "display-capture", "serial")
PARAMETER = re.compile(r"<(?:(?P<converter>\w+):)?(?P<name>\w+)>")
GROUP = re.compile(r"\(\?P<(?P<name>\w+)>(?P<body>[^()]*)\)")


def walk(patterns: list[Any], prefix: str = "") -> Iterator[str]:
    """Every route, as text: `<converter:name>` for route parameters, `(?P<name>...)` for regex."""
    for entry in patterns:
        route = str(entry.pattern).lstrip("^").rstrip("$").replace("\\Z", "")
        if isinstance(entry, URLResolver):
            yield from walk(entry.url_patterns, prefix + route)
        else:
            assert isinstance(entry, URLPattern)
            yield prefix + route


def concrete(route: str, ids: dict[str, str]) -> str:
    """A URL for `route`: real ids where the scene has them, something plausible elsewhere."""

    def value(name: str, hint: str) -> str:
        if name in ids:
            return ids[name]
        if hint == "uuid" or (name.endswith("_id") and hint != "int"):
            return str(uuid.uuid4())
        if hint == "int" or "id" in name:
            return "1"
        alternatives = hint.split("|")
        return alternatives[0] if len(alternatives) > 1 else "x"

    route = PARAMETER.sub(lambda m: value(m["name"], m["converter"] or "str"), route)
    route = GROUP.sub(lambda m: value(m["name"], m["body"]), route)
    return "/" + route.replace("\\", "")


def every_url(ids: dict[str, str]) -> list[str]:
    return sorted({concrete(route, ids) for route in walk(get_resolver().url_patterns)})


@pytest.fixture
def ids(scene: dict[str, Any]) -> dict[str, str]:
    return {
        "run_id": str(scene["waiting"].pk),
        "interaction_id": str(scene["approval"].pk),
        "agent": "chatty",
        "version": "1",
    }


def assert_private(response: HttpResponse, url: str) -> None:
    policy = response.get("Permissions-Policy", "")
    for feature in DENIED:
        assert f"{feature}=()" in policy, (url, response.status_code, policy)
    assert "no-store" in response.get("Cache-Control", ""), (url, response.status_code)


def test_the_walk_finds_the_console_the_api_and_the_admin(ids):
    urls = every_url(ids)
    for expected in ("/", "/runs/", "/audit/", "/api/v1/runs", "/admin/", "/versions/"):
        assert expected in urls, expected
    assert f"/runs/{ids['run_id']}/" in urls
    assert len(urls) > 60


def test_every_url_sends_the_privacy_headers(ids, scene, personas):
    superuser = User.objects.create(username="root", is_staff=True, is_superuser=True)
    signed_in = Client()
    signed_in.force_login(superuser)
    token = make_token(make_account("headers"))
    clients = {"anonymous": Client(), "signed in": signed_in}
    answered_200 = set()
    for url in every_url(ids):
        for who, client in clients.items():
            for htmx in ({}, {"HTTP_HX_REQUEST": "true"}):
                bearer = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if who == "signed in" else {}
                response = client.get(url, **htmx, **bearer)
                assert response.status_code < 500, (url, who)
                assert_private(response, url)
                if response.status_code == 200:
                    answered_200.add(url)
    # The pages that carry run data answered with it, not only with redirects and refusals.
    for page in ("/", "/runs/", f"/runs/{ids['run_id']}/", "/api/v1/runs", "/audit/"):
        assert page in answered_200, page


def test_actions_and_refusals_send_them_too(personas, scene):
    operator = personas("operator")
    for response in (
        operator.post(f"/runs/{scene['to_cancel'].pk}/cancel/", {"reason": "done"}),
        operator.post(f"/runs/{scene['completed'].pk}/cancel/", {"reason": "late"}),  # 409
        personas("viewer").post(f"/runs/{scene['failed'].pk}/retry/"),  # 403
        operator.get("/runs/%00/"),  # refused at the door
        Client().get("/api/v1/runs"),  # no token
    ):
        assert_private(response, response.request["PATH_INFO"])


def test_static_files_keep_their_caching():
    """Static files carry no run data: the middleware leaves their caching to the server."""

    def static(request: HttpRequest) -> HttpResponse:
        response = HttpResponse(b"body{}", content_type="text/css")
        if request.path.endswith("cached.css"):
            response["Cache-Control"] = "max-age=31536000, public"
        return response

    middleware = PrivacyHeadersMiddleware(static)
    request = HttpRequest()
    request.path = "/static/agentops.css"
    plain = middleware(request)
    assert "Cache-Control" not in plain
    assert "camera=()" in plain["Permissions-Policy"]
    request.path = "/static/cached.css"
    assert middleware(request)["Cache-Control"] == "max-age=31536000, public"
    request.path = "/runs/"
    assert middleware(request)["Cache-Control"] == "no-store"
