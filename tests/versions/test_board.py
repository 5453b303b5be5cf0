"""The version board: blocked runs grouped by version, what differs, and the group retry."""

from __future__ import annotations

import re

from django.db import connection
from django.test.utils import CaptureQueriesContext

from agentops.views.versions import group_dom_id
from runtime.models import AgentVersion, Event, EventKind, Operation, Run, RunStatus
from runtime.registry import code_defines
from tests.versions.conftest import (
    CHANGELIST,
    act,
    approval_script,
    approve_and_resume,
    make_agent,
    waiting_runs,
)

BOARD = "/versions/"
HTMX = {"HTTP_HX_REQUEST": "true"}


def retry_url(agent: str, version: str) -> str:
    return f"/versions/{agent}/{version}/retry/"


def blocked_by_a_code_change(define, count: int, *, instructions: str = "Refund everything."):
    """`count` runs of clerk 1 that resumed after v1's code changed under the same label."""
    define(make_agent(approval_script()))
    runs = waiting_runs("clerk", count)
    with code_defines(make_agent(approval_script(), instructions=instructions)):
        runs = [approve_and_resume(run) for run in runs]
    assert {run.attention_reason for run in runs} == {"fingerprint_mismatch"}
    return runs


def statuses(runs) -> list[str]:
    return [Run.objects.get(pk=run.pk).status for run in runs]


def test_it_groups_the_version_blocked_runs_by_agent_and_version(define, effects, operator):
    clerks = blocked_by_a_code_change(define, 2)
    define(make_agent(approval_script(), name="greeter"))
    [greeter] = waiting_runs("greeter", 1)
    AgentVersion.objects.filter(agent="greeter").update(unregistered_at=greeter.created_at)
    greeter = approve_and_resume(greeter)
    assert greeter.attention_reason == "version_unregistered"
    page = operator.get(BOARD).content.decode()
    assert page.count('class="card version-group"') == 2
    assert f'id="{group_dom_id("clerk", "1")}"' in page
    assert f'id="{group_dom_id("greeter", "1")}"' in page
    for run in [*clerks, greeter]:
        assert str(run.pk) in page
    assert "<dt>Blocked runs</dt><dd><strong>2</strong>" in page
    assert "Agent code changed under the same version" in page
    assert "Agent version not registered" in page


def test_it_leaves_out_runs_blocked_for_other_reasons(define, effects, operator):
    define(make_agent(approval_script()))
    [waiting, uncertain] = waiting_runs("clerk", 2)
    Run.objects.filter(pk=uncertain.pk).update(
        status=RunStatus.NEEDS_ATTENTION,
        attention_reason="uncertain_operation",
        blocked_operation="step-2/tool/toolu_02_0",
    )
    page = operator.get(BOARD).content.decode()
    assert "No run is blocked by an agent version." in page
    assert str(waiting.pk) not in page
    assert str(uncertain.pk) not in page


def test_it_shows_what_differs_in_the_code(define, effects, operator):
    blocked_by_a_code_change(define, 1)
    with code_defines(make_agent(approval_script(), instructions="Refund everything.")):
        page = operator.get(BOARD).content.decode()
    assert "<code>instructions</code>" in page
    assert '<del class="error-text">-Help the customer.</del>' in page
    assert "<ins>+Refund everything.</ins>" in page
    assert "Now:</strong> the code of clerk version 1 changed since the run started" in page
    assert '<span class="badge status-retry-wait">changed</span>' in page


def test_it_shows_the_recorded_difference_once_the_code_is_restored(define, effects, operator):
    blocked_by_a_code_change(define, 2)
    page = operator.get(BOARD).content.decode()
    assert "As recorded when the runs were blocked:" in page
    assert "in 2 runs ·</span>" in page
    assert "<ins>+Refund everything.</ins>" in page
    assert "registered and its code matches again" in page


def test_it_shows_a_saved_input_that_differs_from_the_rebuilt_one(define, effects, operator):
    define(make_agent(approval_script()))
    [run] = waiting_runs("clerk", 1)
    Operation.objects.filter(run=run, key="step-1/tool/toolu_01_0").update(input_hash="0" * 64)
    run = approve_and_resume(run)
    assert run.attention_reason == "input_mismatch"
    page = operator.get(BOARD).content.decode()
    assert "<code>step-1/tool/toolu_01_0</code>" in page
    assert "saved input" in page
    assert "built by the code now" in page
    assert "Saved operation input differs from the code" in page


def test_agent_text_in_differences_is_escaped(define, effects, operator):
    hostile = '<script>alert(1)</script><a hx-get="/evil" href="javascript:x">go</a>'
    blocked_by_a_code_change(define, 1, instructions=hostile)
    page = operator.get(BOARD).content.decode()
    assert "<script>alert(1)</script>" not in page
    assert 'hx-get="/evil"' not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_the_preview_says_none_can_be_retried_while_the_code_differs(define, effects, operator):
    runs = blocked_by_a_code_change(define, 2)
    with code_defines(make_agent(approval_script(), instructions="Refund everything.")):
        page = operator.get(BOARD).content.decode()
    assert "None of the 2 runs can be retried yet." in page
    assert "disabled>Nothing to retry yet</button>" in page
    assert page.count(">cannot be retried</span>") == 2
    assert statuses(runs) == [RunStatus.NEEDS_ATTENTION] * 2


def test_the_preview_counts_what_will_be_retried_and_says_why_not_the_rest(
    define, effects, operator
):
    runs = blocked_by_a_code_change(define, 3)
    # One run started on other code under the same label: its fingerprint matches nothing.
    Run.objects.filter(pk=runs[2].pk).update(fingerprint="f" * 64)
    page = operator.get(BOARD).content.decode()
    assert "2 of 3 runs will be retried; 1 cannot be." in page
    assert ">Retry 2 runs</button>" in page
    assert "still blocked: the code of clerk version 1 changed since the run started" in page


def test_retrying_a_group_over_htmx_returns_its_fragment_with_the_results(
    define, effects, operator
):
    runs = blocked_by_a_code_change(define, 3)
    Run.objects.filter(pk=runs[2].pk).update(fingerprint="f" * 64)
    response = operator.post(retry_url("clerk", "1"), **HTMX)
    assert response.status_code == 200
    fragment = response.content.decode()
    assert fragment.lstrip().startswith(
        f'<section class="card version-group" id="{group_dom_id("clerk", "1")}"'
    )
    assert "Retried 2 of 3 runs." in fragment
    assert f"<code>{runs[2].pk}</code>: run {runs[2].pk} cannot be retried" in fragment
    assert statuses(runs) == [RunStatus.QUEUED, RunStatus.QUEUED, RunStatus.NEEDS_ATTENTION]
    assert Event.objects.filter(kind=EventKind.RETRIED, actor="olga").count() == 2


def _tokens(html: str) -> list[str]:
    """The markup as words, with the per-render CSRF token masked."""
    return re.sub(r'name="csrfmiddlewaretoken" value="[^"]+"', "csrf", html).split()


def test_the_fragment_equals_the_group_on_a_fresh_page(define, effects, operator):
    blocked_by_a_code_change(define, 1)
    with code_defines(make_agent(approval_script(), instructions="Refund everything.")):
        fragment = operator.post(retry_url("clerk", "1"), **HTMX).content.decode()
        page = operator.get(BOARD).content.decode()
    start = page.index(f'<section class="card version-group" id="{group_dom_id("clerk", "1")}"')
    section = page[start : page.index("</section>", start) + len("</section>")]
    # Nothing could be retried: the fragment is the page's group plus the result note.
    note_start = fragment.index('<div class="notice version-group-result"')
    note_end = fragment.index("</div>", note_start) + len("</div>")
    assert "Retried 0 of 1 run." in fragment[note_start:note_end]
    assert _tokens(fragment[:note_start] + fragment[note_end:]) == _tokens(section)


def test_retrying_a_group_without_javascript_redirects_to_the_board(define, effects, operator):
    runs = blocked_by_a_code_change(define, 2)
    response = operator.post(retry_url("clerk", "1"))
    assert response.status_code == 302
    assert response["Location"] == f"/versions/#{group_dom_id('clerk', '1')}"
    page = operator.get(response["Location"]).content.decode()
    assert "clerk 1: retried 2 of 2 run(s)." in page
    assert statuses(runs) == [RunStatus.QUEUED] * 2


def test_a_user_without_control_run_sees_no_retry_form_and_cannot_retry(define, effects, viewer):
    runs = blocked_by_a_code_change(define, 1)
    page = viewer.get(BOARD).content.decode()
    assert "/versions/clerk/1/retry/" not in page
    assert "You cannot retry runs" in page
    assert viewer.post(retry_url("clerk", "1")).status_code == 403
    assert statuses(runs) == [RunStatus.NEEDS_ATTENTION]
    assert not Event.objects.filter(kind=EventKind.RETRIED).exists()


def test_the_board_needs_a_login(define, client):
    response = client.get(BOARD)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
    assert client.post(retry_url("clerk", "1")).status_code == 302


def test_retry_is_a_post(define, operator):
    assert operator.get(retry_url("clerk", "1")).status_code == 405


def test_the_register_link_is_shown_only_to_agent_admins(define, effects, operator, agent_admin):
    define(make_agent(approval_script()))
    [run] = waiting_runs("clerk", 1)
    AgentVersion.objects.filter(agent="clerk").update(unregistered_at=run.created_at)
    approve_and_resume(run)
    register = "/admin/agentops/agentversion/version/clerk/1/#register"
    assert register in agent_admin.get(BOARD).content.decode()
    page = operator.get(BOARD).content.decode()
    assert register not in page
    assert "ask an agent admin" in page


def test_registering_from_the_admin_leaves_the_group_blocked_until_retried(
    define, effects, operator, agent_admin
):
    define(make_agent(approval_script()))
    runs = waiting_runs("clerk", 2)
    AgentVersion.objects.filter(agent="clerk").update(unregistered_at=runs[0].created_at)
    runs = [approve_and_resume(run) for run in runs]
    act(agent_admin, "register", "clerk:1")
    assert statuses(runs) == [RunStatus.NEEDS_ATTENTION] * 2
    page = operator.get(BOARD).content.decode()
    assert "2 of 2 runs will be retried" in page
    operator.post(retry_url("clerk", "1"))
    finished = [Run.objects.get(pk=run.pk) for run in runs]
    assert statuses(finished) == [RunStatus.QUEUED] * 2
    assert CHANGELIST  # the admin list the board links to


def test_the_board_takes_as_many_queries_per_group_whatever_its_size(define, effects, operator):
    blocked_by_a_code_change(define, 1)
    with CaptureQueriesContext(connection) as one:
        operator.get(BOARD)
    more = waiting_runs("clerk", 4)
    with code_defines(make_agent(approval_script(), instructions="Refund everything.")):
        for run in more:
            approve_and_resume(run)
    with CaptureQueriesContext(connection) as five:
        operator.get(BOARD)
    # The retry preview asks the runtime once for the whole group (retry_problems).
    assert len(five) == len(one)


def test_a_user_without_the_console_view_permission_gets_403(define, django_user_model):
    from django.test import Client

    user = django_user_model.objects.create_user("nobody", password="pw")
    client = Client()
    client.force_login(user)
    assert client.get(BOARD).status_code == 403


def test_a_group_retried_whole_says_so_and_shows_its_code_matching(define, effects, operator):
    blocked_by_a_code_change(define, 2)
    fragment = operator.post(retry_url("clerk", "1"), **HTMX).content.decode()
    assert "Retried 2 of 2 runs." in fragment
    assert "No run of clerk 1 is blocked by its version anymore." in fragment
    assert '<span class="badge status-completed">matches</span>' in fragment
    assert "The runs started on" not in fragment
