"""Agent text shown safely, the folded timeline, one time format, notices, search, settings."""

from __future__ import annotations

import datetime as dt
import json
import re
from html import unescape

import pytest
from django.template.defaultfilters import truncatechars
from django.test import Client
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentops.models import OperatorProfile
from agentops.templatetags.console import clipped, countdown, reveal, when
from runtime import respond, submit
from runtime.llm.scripted import call, say
from runtime.models import Event
from runtime.testing import run_until_idle
from tests.conftest import make_agent
from tests.console.conftest import htmx

RLO = "\u202e"
# What the customer sees as "invoice_exe.png" once the override reorders it.
DISGUISED = f"invoice_{RLO}gnp.exe"
INVISIBLE = ("\u202e", "\u200b", "\u2066", "\ufeff")


def text(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


def test_it_shows_each_invisible_character_by_its_code_point():
    shown = reveal(f"a{RLO}b\u200bc<script>")
    assert RLO not in shown and "\u200b" not in shown
    assert "U+202E" in shown and "U+200B" in shown
    assert "&lt;script&gt;" in shown  # and everything else is escaped


@pytest.fixture
def disguised(world, define):
    """A run whose tool arguments, model text and customer message hide characters."""
    agent = make_agent(
        [
            call(
                ("refund", {"order_id": DISGUISED, "amount_cents": 100}),
                text=f"Refunding {DISGUISED}\u200b now",
                step=1,
            ),
            say(f"done {DISGUISED}"),
        ],
        name="disguised",
    )
    define(agent)
    return run_until_idle(submit("disguised", f"refund {DISGUISED}", actor="alice").pk)


def test_it_never_sends_an_invisible_character_to_a_page(world, disguised, as_user, users):
    interaction = world.pending(disguised)
    respond(interaction.pk, {"approved": False, "reason": f"no {DISGUISED}"}, actor="approver")
    users["operator"].is_staff = True
    users["operator"].is_superuser = True
    users["operator"].save()
    client = as_user("operator")
    pages = [
        f"/interactions/{interaction.pk}/",
        f"/runs/{disguised.pk}/",
        f"/runs/{disguised.pk}/?events=all",
        "/runs/?q=invoice",
        "/audit/",
        f"/admin/agentops/interaction/{interaction.pk}/change/",
        f"/admin/agentops/run/{disguised.pk}/change/",
        f"/admin/agentops/event/{Event.objects.filter(run=disguised).last().pk}/change/",
        "/admin/agentops/session/",
    ]
    for path in pages:
        response = client.get(path)
        assert response.status_code == 200, path
        html = response.content.decode()
        assert not any(char in html for char in INVISIBLE), path
        assert "U+202E" in html, path


@settings(max_examples=500, deadline=None)
@given(text=st.text(), length=st.integers(-2, 90))
@example(text="e\u0301" * 50, length=40)  # combining accents: not counted
@example(text="x" * 80, length=80)  # fits exactly
@example(text="x" * 81, length=80)
@example(text="\u212b" * 3, length=2)  # normalized (NFC) before it is counted
@example(text="abc", length=1)
def test_a_text_is_cut_exactly_as_truncatechars_cuts_it(text, length):
    assert clipped(text, length) == truncatechars(text, length)


def test_it_folds_intent_and_outcome_into_one_row_named_by_the_tool(world, as_user):
    run = world.run("waiting")
    interaction = world.pending(run)
    respond(interaction.pk, {"approved": True, "reason": ""}, actor="approver")
    run_until_idle(run.pk)
    client = as_user("viewer")

    default = client.get(f"/runs/{run.pk}/").content.decode()
    rows = re.findall(r'<li class="event ([^"]+)"', default)
    assert sum("operation" in row for row in rows) == 1  # the refund; model requests hidden
    shown = text(default)
    assert "Intent written" not in shown and "Outcome written" not in shown
    assert "Claimed by a worker" not in shown
    assert re.search(r"refund completed \d+\.\d\d s", shown)  # named by tool, with its duration
    assert "Approved refund approver" in shown
    assert "refund: {" in shown  # what was approved (no presentation: the arguments)

    every = text(client.get(f"/runs/{run.pk}/?events=all").content.decode())
    assert "Claimed by a worker" in every
    assert every.count("Model request, step") == 2
    assert "Intent written" not in every  # still folded: one row per operation


def test_it_says_in_the_audit_log_what_an_approval_decided(world, as_user):
    interaction = world.pending(world.run("waiting"))
    respond(interaction.pk, {"approved": True, "reason": ""}, actor="approver")
    shown = text(as_user("viewer").get("/audit/").content.decode())
    assert 'refund: {"amount_cents": 500, "order_id": "A1"}' in shown


def test_it_shows_every_time_in_one_format(world, as_user):
    run = world.run("retry_wait")
    html = as_user("viewer").get(f"/runs/{run.pk}/").content.decode()
    times = re.findall(r"<time [^>]+>", html)
    assert times and all("data-when" in t or "data-countdown" in t for t in times)
    assert 'class="countdown-at"' in html  # the exact due time beside the countdown


def test_a_moment_is_its_utc_time_to_the_millisecond_and_as_text():
    berlin = dt.timezone(dt.timedelta(hours=1))
    moment = dt.datetime(2025, 1, 2, 16, 1, 5, 123456, tzinfo=berlin)
    assert when(moment) == (
        '<time datetime="2025-01-02T15:01:05.123+00:00" data-when>2025-01-02 15:01:05 UTC</time>'
    )
    assert countdown(moment).startswith(
        '<time datetime="2025-01-02T15:01:05.123+00:00" data-countdown>2025-01-02 15:01:05 UTC'
    )
    assert when(None) == "—"


def test_it_sends_an_actions_notice_for_the_area_a_live_push_leaves_alone(world, as_user):
    interaction = world.pending(world.run("waiting"))
    response = as_user("approver").post(
        f"/interactions/{interaction.pk}/respond/", {"decision": "approve"}, **htmx()
    )
    assert "Approved refund: the run continues." in response.content.decode()
    assert json.loads(response["HX-Trigger-After-Settle"]) == {
        "agentops:notice": "Approved refund: the run continues."
    }


def test_it_finds_a_run_by_text_in_its_tool_arguments(world, as_user):
    run = world.run("blocked", message="please help")  # charge {"order_id": "A1", …}
    other = world.run("completed", message="please help")
    html = as_user("viewer").get("/runs/", {"q": "a1"}).content.decode()
    assert f"run-row-{run.pk}" in html
    assert f"run-row-{other.pk}" not in html


def test_it_finds_a_receipt_id_in_a_tool_result(world, as_user, effects):
    run = world.run("waiting")
    respond(world.pending(run).pk, {"approved": True, "reason": ""}, actor="approver")
    run_until_idle(run.pk)
    receipt = next(iter(effects.receipts.values()))
    html = as_user("viewer").get("/runs/", {"q": receipt}).content.decode()
    assert f"run-row-{run.pk}" in html


def test_it_takes_like_wildcards_in_a_search_literally(world, as_user):
    run = world.run("completed")
    html = as_user("viewer").get("/runs/", {"q": "%_%"}).content.decode()
    assert f"run-row-{run.pk}" not in html


@pytest.mark.postgres  # the trigram indexes exist on PostgreSQL only
def test_it_indexes_the_search_on_postgres(world):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE indexname LIKE '%%_trgm'")
        names = {row[0] for row in cursor.fetchall()}
    assert names == {
        "run_search_trgm",
        "session_title_trgm",
        "tool_call_text_trgm",
        "interaction_payload_trgm",
    }


def test_it_keeps_the_operators_time_zone_and_refuses_an_unknown_one(as_user, users):
    client = as_user("viewer")
    assert 'name="time-zone" content=""' in client.get("/profile/").content.decode()
    response = client.post("/profile/", {"time_zone": "Mars/Olympus_Mons"})
    assert response.status_code == 400
    assert "not one of the available choices" in response.content.decode()
    assert not OperatorProfile.objects.exists()

    assert client.post("/profile/", {"time_zone": "Europe/Paris"}).status_code == 302
    assert OperatorProfile.objects.get(user=users["viewer"]).time_zone == "Europe/Paris"
    assert 'name="time-zone" content="Europe/Paris"' in client.get("/").content.decode()
    # A new login (another browser) reads it from the profile.
    fresh = Client()
    users["viewer"].set_password("pw")
    users["viewer"].save()
    assert (
        fresh.post("/accounts/login/", {"username": "viewer", "password": "pw"}).status_code == 302
    )
    assert 'name="time-zone" content="Europe/Paris"' in fresh.get("/").content.decode()


def test_it_offers_a_person_without_access_a_way_out_not_a_dead_link(as_user):
    response = as_user("outsider").get("/")
    assert response.status_code == 403
    html = response.content.decode()
    assert 'href="/">Back to the inbox' not in html
    assert 'action="/accounts/logout/"' in html


def test_it_says_how_long_a_login_lockout_lasts(db, settings):
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT + 1):
        response = client.post("/accounts/login/", {"username": "mallory", "password": "x"})
    assert response.status_code == 429
    shown = text(response.content.decode())
    assert "refused for 15 minutes" in shown
    assert 'rel="stylesheet"' in response.content.decode()
