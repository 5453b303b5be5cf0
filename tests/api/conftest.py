"""API fixtures: service accounts and tokens, a client that sends them, and runs in every state.

Accounts are made as the admin makes them (a linked user in the console's groups); runs are
made by the runtime's verbs, through the console tests' World.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.test import Client

from agentops.api.models import ApiToken, Scope, ServiceAccount
from runtime import Agent
from tests.console.conftest import World, agents
from tests.support.personas import ensure_groups

ALL_SCOPES = [scope.value for scope in Scope]


@pytest.fixture
def world(define: Callable[..., Agent], effects: Any) -> World:
    define(*agents())
    return World()


def make_account(
    name: str, groups: tuple[str, ...] = ("operators", "submitters")
) -> ServiceAccount:
    ensure_groups()  # a transactional test's flush emptied them
    user = User(username=f"api:{name}")
    user.set_unusable_password()
    user.save()
    user.groups.add(*Group.objects.filter(name__in=groups))
    return ServiceAccount.objects.create(name=name, user=user)


def make_token(account: ServiceAccount, scopes: list[str] | None = None) -> str:
    token = ApiToken(account=account, scopes=ALL_SCOPES if scopes is None else scopes)
    secret = token.issue()
    token.save()
    return secret


class Api:
    """A test client speaking JSON with a bearer token."""

    def __init__(self, token: str | None) -> None:
        self.client = Client()
        self.token = token

    def _headers(self, headers: dict[str, str] | None) -> dict[str, str]:
        sent = dict(headers or {})
        if self.token is not None:
            sent.setdefault("Authorization", f"Bearer {self.token}")
        return sent

    def get(self, path: str, params: dict[str, Any] | None = None, **headers: str) -> Any:
        return self.client.get(f"/api/v1{path}", params or {}, headers=self._headers(headers))

    def post(self, path: str, body: Any = None, **headers: str) -> Any:
        return self.client.post(
            f"/api/v1{path}",
            json.dumps({} if body is None else body),
            content_type="application/json",
            headers=self._headers(headers),
        )


@pytest.fixture
def ci(db: None) -> ServiceAccount:
    """The CI system's account: an operator that may also submit."""
    return make_account("ci")


@pytest.fixture
def api(ci: ServiceAccount) -> Api:
    """A client with every scope on an operator account."""
    return Api(make_token(ci))


def error_of(response: Any) -> str:
    payload = response.json()
    assert set(payload) == {"error"}, payload
    assert set(payload["error"]) == {"code", "message", "details"}, payload
    return str(payload["error"]["code"])


@pytest.fixture
def keep_connections() -> Iterator[None]:
    """Requests served outside Django's test client keep their database connection.

    A WSGI app closes it after each request (request_finished): in-process that ends the
    test's transaction, and in a live server's thread it can run after the test released
    the database. Django's test client switches it off the same way.
    """
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)
