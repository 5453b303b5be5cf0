"""Every page: who may see it, what it shows, and unknown ids."""

from __future__ import annotations

import dataclasses
import uuid

import pytest
from django.test import Client

from runtime import submit
from runtime.models import RunStatus
from runtime.testing import run_until_idle
from tests.console.conftest import World, agents


def pages(world: World) -> dict[str, str]:
    waiting = world.run("waiting")
    blocked = world.run("blocked")
    return {
        "inbox": "/",
        "runs": "/runs/",
        "run": f"/runs/{waiting.pk}/",
        "interaction": f"/interactions/{world.pending(waiting).pk}/",
        "reconcile": f"/runs/{blocked.pk}/reconcile/",
        "audit": "/audit/",
    }


def test_it_sends_anonymous_visitors_to_the_login_page(world):
    for url in pages(world).values():
        response = Client().get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/?next=")


@pytest.mark.parametrize("persona", ["viewer", "approver", "reconciler", "operator"])
def test_it_shows_every_page_to_every_console_group(world, as_user, persona):
    client = as_user(persona)
    for url in pages(world).values():
        assert client.get(url).status_code == 200, url


def test_it_refuses_every_page_to_a_user_outside_the_console_groups(world, as_user):
    client = as_user("outsider")
    for url in pages(world).values():
        response = client.get(url)
        assert response.status_code == 403
        assert b"Not allowed" in response.content


@pytest.mark.parametrize(
    "url",
    [
        "/runs/{}/",
        "/runs/{}/reconcile/",
        "/interactions/{}/",
    ],
)
def test_it_answers_an_unknown_id_with_a_clear_404(db, as_user, url):
    response = as_user("operator").get(url.format(uuid.uuid4()))
    assert response.status_code == 404
    assert b"does not exist" in response.content


def test_it_answers_a_malformed_id_with_a_404(db, as_user):
    assert as_user("operator").get("/runs/not-a-run/").status_code == 404


def test_it_refuses_a_post_to_a_page(world, as_user):
    assert as_user("operator").post("/runs/").status_code == 405


def test_it_links_the_nav_to_every_part_of_the_console(db, as_user, users):
    users["operator"].is_staff = True
    users["operator"].save()
    html = as_user("operator").get("/").content.decode()
    for href in ('href="/"', 'href="/runs/"', 'href="/audit/"', 'href="/admin/"'):
        assert href in html


def test_it_shows_the_admin_link_to_staff_only(db, as_user):
    assert 'href="/admin/"' not in as_user("operator").get("/").content.decode()


def test_it_shows_a_run_in_every_state_with_what_fits_it(world, as_user):
    client = as_user("operator")
    expectations = {
        "waiting": "Review the call",
        "question": "Answer the question",
        "blocked": "Reconcile",
        "retry_wait": "Retry now",
        "failed": "provider exploded",
        "completed": "Hello! How can I help?",
        "cancelled": "Cancelled",
        "queued": "Queued: a worker will pick it up.",
    }
    for state, text in expectations.items():
        run = world.run(state)
        html = client.get(f"/runs/{run.pk}/").content.decode()
        assert text in html, state


def test_it_shows_the_run_timeline_transcript_and_operations(world, as_user):
    run = world.run("blocked")
    html = as_user("viewer").get(f"/runs/{run.pk}/").content.decode()
    assert 'id="run-header"' in html
    assert 'id="run-timeline"' in html
    assert 'id="run-transcript"' in html
    assert 'id="run-operations"' in html
    assert "Submitted" in html  # the timeline's first event
    assert '<span class="actor">alice</span>' in html  # ...with its actor
    assert "step-1/tool/toolu_01_0" in html  # the operation key
    assert f"{run.pk}:step-1/tool/toolu_01_0" in html  # and its operation id
    assert "please refund order A1" in html  # the transcript


def test_it_says_why_a_retry_is_unavailable(world, as_user):
    first = world.run("failed")
    # A later message in the same session makes the failed run impossible to retry.
    submit("broken", "and another thing", actor="alice", session=first.session_id)
    html = as_user("operator").get(f"/runs/{first.pk}/").content.decode()
    assert "Retry is unavailable: a later run" in html
    assert f'action="/runs/{first.pk}/retry/"' not in html


def test_it_shows_a_version_blocked_run_with_the_difference(world, as_user, define):
    run = world.run("queued")
    changed = [
        agent if agent.name != "chatty" else _with_instructions(agent, "Be terse.")
        for agent in agents()
    ]
    define(*changed, register_them=False)
    run = run_until_idle(run.pk)
    assert run.status == RunStatus.NEEDS_ATTENTION
    html = as_user("operator").get(f"/runs/{run.pk}/").content.decode()
    assert "Agent code changed under the same version" in html
    assert "What differs" in html
    assert "Be terse." in html
    assert "Retry is unavailable: still blocked" in html


def _with_instructions(agent, instructions):
    return dataclasses.replace(agent, instructions=instructions)


def test_it_shows_the_approval_with_the_agents_last_words_and_context(world, as_user):
    run = world.run("waiting")
    interaction = world.pending(run)
    html = as_user("viewer").get(f"/interactions/{interaction.pk}/").content.decode()
    # A viewer cannot approve: the heading does not offer it.
    assert "Approval of <code>refund</code>" in html
    assert "Approve or reject" not in html
    assert "&quot;amount_cents&quot;: 500" in html  # pretty, escaped JSON arguments
    assert "please refund order A1" in html  # the run's context
    assert "Refund an order; needs an approver." in html  # what the tool does


def test_it_shows_the_question(world, as_user):
    run = world.run("question")
    html = as_user("viewer").get(f"/interactions/{world.pending(run).pk}/").content.decode()
    assert "Which order do you mean?" in html
    assert "The agent asks a question" in html


def test_it_hides_the_forms_from_a_viewer(world, as_user):
    waiting = world.run("waiting")
    blocked = world.run("blocked")
    failed = world.run("failed")
    client = as_user("viewer")
    interaction = world.pending(waiting)
    assert (
        '<form method="post" action="/interactions/'
        not in client.get(f"/interactions/{interaction.pk}/").content.decode()
    )
    assert (
        f'action="/runs/{blocked.pk}/resolve/"'
        not in client.get(f"/runs/{blocked.pk}/reconcile/").content.decode()
    )
    html = client.get(f"/runs/{failed.pk}/").content.decode()
    assert f'action="/runs/{failed.pk}/retry/"' not in html
    assert f'action="/runs/{failed.pk}/cancel/"' not in html


def test_it_shows_each_persona_exactly_its_forms(world, as_user):
    waiting = world.run("waiting")
    blocked = world.run("blocked")
    failed = world.run("failed")
    interaction = world.pending(waiting)
    expected = {
        "approver": {"respond"},
        "reconciler": {"resolve"},
        "operator": {"respond", "resolve", "retry"},
    }
    for persona, forms in expected.items():
        client = as_user(persona)
        shown = set()
        if (
            f'action="/interactions/{interaction.pk}/respond/"'
            in client.get(f"/interactions/{interaction.pk}/").content.decode()
        ):
            shown.add("respond")
        if (
            f'action="/runs/{blocked.pk}/resolve/"'
            in client.get(f"/runs/{blocked.pk}/reconcile/").content.decode()
        ):
            shown.add("resolve")
        if (
            f'action="/runs/{failed.pk}/retry/"'
            in client.get(f"/runs/{failed.pk}/").content.decode()
        ):
            shown.add("retry")
        assert shown == forms, persona
