"""A canary API key, used for real against a fake Messages API that fails in every way, never
appears in the logs, the error pages, the task payloads, the database or the prompts."""

from __future__ import annotations

import json
import logging
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.apps import apps
from django.test import RequestFactory, override_settings
from django.views.debug import ExceptionReporter

from agentops import tasks
from runtime import Agent, ask_operator, submit
from runtime.models import Run, RunStatus
from runtime.testing import run_until_idle
from tests.conftest import TOOLS
from tests.fakes.anthropic_server import FakeAnthropicServer, text_block, tool_use_block

MODEL = "claude-test-model"
# Where the SDK puts the key: x-api-key, or a bearer token in newer versions.
AUTH_HEADERS = {"x-api-key", "authorization"}


@pytest.fixture
def canary(monkeypatch: pytest.MonkeyPatch) -> str:
    """A unique key in the environment, where the adapter's SDK client reads it."""
    key = f"sk-ant-canary-{uuid.uuid4().hex}"
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    for name in ("ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE", "ANTHROPIC_CONFIG_DIR"):
        monkeypatch.delenv(name, raising=False)
    return key


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        yield fake


@pytest.fixture
def dispatched(settings: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every Celery message the runs produce, serialized as the broker would carry it."""
    from kombu.serialization import dumps

    settings.AGENTOPS_DISPATCH = "agentops.tasks.enqueue"
    sent: list[str] = []

    def apply_async(args: Any = None, kwargs: Any = None, **options: Any) -> None:
        sent.append(dumps({"args": args, "kwargs": kwargs, "options": options}, "json")[2])

    monkeypatch.setattr(tasks.advance_run, "apply_async", apply_async)
    return sent


def scripted_failures(server: FakeAnthropicServer, key: str) -> None:
    """One reply per run: each way the provider, a proxy or the network can fail, most of
    them echoing the key back (as a misbehaving proxy might), then one that works."""
    server.reply(401, {"type": "error", "error": {"type": "authentication_error",
                 "message": f"invalid x-api-key: {key}"}})  # fmt: skip
    server.reply(500, f"<html><body>upstream rejected key={key}</body></html>".encode())
    server.reply(529, {"type": "error", "error": {"type": "overloaded_error",
                 "message": f"Overloaded (request from {key[:12]}...)"}})  # fmt: skip
    server.reply(200, b"{not json " + key.encode())
    server.reply(400, {"type": "error", "error": {"type": "invalid_request_error",
                 "message": f"headers: {{'x-api-key': '{key}'}}"}})  # fmt: skip
    server.reply_message(
        [text_block("Let me look."), tool_use_block("toolu_1", "get_order", {"order_id": "A1"})]
    )
    server.reply_message([text_block("done")])


def everything_stored() -> str:
    """Every row of every table, as text."""
    rows = []
    for model in apps.get_models():
        rows.extend(str(row) for row in model._default_manager.values())
    return "\n".join(rows)


@override_settings(AGENTOPS_MODEL_RETRIES=0)  # one scripted reply per run, none spent on retries
def test_the_api_key_never_leaves_the_request_header(  # noqa: PLR0917
    define, effects, canary, server, dispatched, caplog, django_capture_on_commit_callbacks, as_user
):
    caplog.set_level(logging.DEBUG)  # everything, the SDK's and httpx's debug logs included
    tools = [*TOOLS.values(), ask_operator]
    agent = define(Agent(name="canary", version="1", model=MODEL, instructions="Hi", tools=tools))
    scripted_failures(server, canary)
    runs = []
    for n in range(6):
        with django_capture_on_commit_callbacks(execute=True):
            run = submit(agent.name, f"request {n}", actor="alice")
        runs.append(run_until_idle(run.pk))
    statuses = [run.status for run in runs]
    assert statuses == [RunStatus.FAILED] * 5 + [RunStatus.COMPLETED]

    # The key was really used (so the test could see a leak), and only in its auth header.
    assert len(server.requests) == 7
    for request in server.requests:
        auth = {name: value for name, value in request.headers.items() if name in AUTH_HEADERS}
        others = {name: value for name, value in request.headers.items() if name not in auth}
        assert canary in "".join(auth.values())
        assert canary not in json.dumps(others)
        assert canary not in json.dumps(request.body)  # the prompts, the tool specs
    # The provider's echoes are scrubbed from what the runs record and show.
    assert "[redacted]" in runs[0].error
    assert canary not in everything_stored()
    assert dispatched  # each run was handed to Celery, by id only
    assert all(canary not in message for message in dispatched)
    for record in caplog.records:
        text = logging.Formatter("%(message)s %(exc_info)s").format(record)
        assert canary not in text, record.name
    operator = as_user("operator")
    for run in Run.objects.all():
        for url in (f"/runs/{run.pk}/", "/", f"/runs/?q={run.pk}", "/audit/"):
            assert canary not in operator.get(url).content.decode()


def test_a_debug_error_page_hides_the_key(canary, settings):
    """Django's technical 500 page (DEBUG) shows request.META, which under runserver carries
    the process environment: the key must be masked there."""
    settings.DEBUG = True
    request = RequestFactory().get("/runs/", ANTHROPIC_API_KEY=canary, HTTP_X_API_KEY=canary)
    html = error_page(request)
    assert "ANTHROPIC_API_KEY" in html  # the variable is listed...
    assert canary not in html  # ...with its value masked


def error_page(request: Any) -> str:
    """The technical 500 page of an error in a view that holds no secret of its own."""
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        return ExceptionReporter(request, *sys.exc_info()).get_traceback_html()
