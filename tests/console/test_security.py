"""Agent-controlled text is shown as text, the CSP holds, and CSRF guards every action."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from django.test import Client

from runtime import cancel, respond
from runtime.models import Interaction, InteractionStatus, Run, RunStatus
from tests.console.conftest import HOSTILE, htmx

# Pieces of HOSTILE that would be markup (or htmx attributes) if they were not escaped.
LIVE_MARKUP = [
    "<script>alert(1)</script>",
    "<img src=x onerror",
    '<a href="javascript:',
    '<div hx-get="/admin/"',
]
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


def hostile_pages(world, as_user) -> dict[str, str]:
    waiting = world.run("hostile_waiting", HOSTILE)
    question = world.run("hostile_question", HOSTILE)
    blocked = world.run("hostile_blocked", HOSTILE)
    answered = world.run("hostile_question", HOSTILE)
    respond(world.pending(answered).pk, {"answer": HOSTILE}, actor="bob")
    rejected = world.run("hostile_waiting", HOSTILE)
    respond(world.pending(rejected).pk, {"approved": False, "reason": HOSTILE}, actor="bob")
    cancel(world.run("queued").pk, actor="bob", reason=HOSTILE)
    client = as_user("operator")
    urls = {
        "inbox": "/",
        "runs": "/runs/",
        "search": "/runs/?q=" + "%3Cscript%3E",
        "run waiting": f"/runs/{waiting.pk}/",
        "run blocked": f"/runs/{blocked.pk}/",
        "run answered": f"/runs/{answered.pk}/",
        "approval": f"/interactions/{world.pending(waiting).pk}/",
        "question": f"/interactions/{world.pending(question).pk}/",
        "answered question": f"/interactions/{Interaction.objects.get(run=answered).pk}/",
        "rejected approval": f"/interactions/{Interaction.objects.get(run=rejected).pk}/",
        "reconcile": f"/runs/{blocked.pk}/reconcile/",
        "audit": "/audit/",
    }
    return {name: client.get(url).content.decode() for name, url in urls.items()}


def test_it_shows_agent_controlled_text_as_text_on_every_page(world, as_user):
    for name, html in hostile_pages(world, as_user).items():
        for markup in LIVE_MARKUP:
            assert markup not in html, (name, markup)
        assert ESCAPED in html or "&quot;&lt;script&gt;" in html or name == "search", name


class AgentTextFinder(HTMLParser):
    """Collects each text node holding the hostile script, with whether htmx is off there."""

    VOID = {"meta", "link", "input", "br", "img", "hr", "wbr", "source", "area", "col"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[bool] = []
        self.found: list[bool] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in self.VOID:
            inherited = bool(self.stack and self.stack[-1])
            self.stack.append(inherited or any(name == "hx-disable" for name, _ in attrs))

    def handle_endtag(self, tag: str) -> None:
        if tag not in self.VOID and self.stack:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if "<script>alert(1)</script>" in data:
            self.found.append(bool(self.stack and self.stack[-1]))


def test_it_disables_htmx_wherever_agent_text_is_shown(world, as_user):
    for name, html in hostile_pages(world, as_user).items():
        if name == "search":
            continue
        finder = AgentTextFinder()
        finder.feed(html)
        assert finder.found, name
        assert all(finder.found), name


def test_it_sends_a_strict_content_security_policy(world, as_user):
    world.run("waiting")
    response = as_user("operator").get("/")
    policy = response["Content-Security-Policy"]
    assert "script-src 'self'" in policy
    assert "style-src 'self'" in policy
    assert "connect-src 'self'" in policy
    assert "object-src 'none'" in policy
    assert "frame-ancestors 'none'" in policy
    assert "unsafe-inline" not in policy
    assert "unsafe-eval" not in policy


def test_it_has_no_inline_script_or_style_on_any_page(world, as_user):
    for name, html in hostile_pages(world, as_user).items():
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), name
        assert not re.search(r"<style\b", html), name
        # Attributes of real tags only: in escaped text "<" is "&lt;", so no tag starts there.
        assert not re.search(r"<[a-zA-Z][^<>]*\sstyle=", html), name
        assert not re.search(r"<[a-zA-Z][^<>]*\son[a-z]+=", html), name
        # Nothing loads from another host (no CDN): every src and href stays on this site.
        assert not re.search(r"""\b(?:src|href)=["'](?:[a-z]+:)?//""", html, re.IGNORECASE), name


def test_it_turns_off_htmx_eval_and_indicator_styles(world, as_user):
    html = as_user("operator").get("/").content.decode()
    config = re.search(r'<meta name="htmx-config" content=\'([^\']+)\'>', html).group(1)
    assert '"includeIndicatorStyles": false' in config
    assert '"allowEval": false' in config
    assert '"allowScriptTags": false' in config
    assert "/static/django_htmx/htmx-2.min.js" in html
    assert "/static/django_htmx/ext/hx-ws-2.min.js" in html


def test_it_puts_the_csrf_token_on_every_htmx_request(world, as_user):
    html = as_user("operator").get("/").content.decode()
    assert re.search(r"<body hx-headers='\{\"X-CSRFToken\": \"[A-Za-z0-9]{64}\"\}'>", html)


@pytest.fixture
def strict(users) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(users["operator"])
    return client


def test_it_refuses_an_action_without_the_csrf_token(world, strict):
    run = world.run("waiting")
    interaction = world.pending(run)
    response = strict.post(f"/interactions/{interaction.pk}/respond/", {"decision": "approve"})
    assert response.status_code == 403
    assert b"Form expired" in response.content
    assert strict.post(f"/runs/{run.pk}/cancel/").status_code == 403
    interaction.refresh_from_db()
    assert interaction.status == InteractionStatus.PENDING
    assert Run.objects.get(pk=run.pk).status == RunStatus.WAITING


def test_it_accepts_the_token_of_the_form_and_of_the_htmx_header(world, strict):
    run = world.run("waiting")
    interaction = world.pending(run)
    page = strict.get(f"/interactions/{interaction.pk}/").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    response = strict.post(
        f"/interactions/{interaction.pk}/respond/",
        {"decision": "approve", "csrfmiddlewaretoken": token},
    )
    assert response.status_code == 302
    header = re.search(r'"X-CSRFToken": "([^"]+)"', page).group(1)
    failed = world.run("failed")
    response = strict.post(f"/runs/{failed.pk}/retry/", HTTP_X_CSRFTOKEN=header, **htmx())
    assert response.status_code == 200
