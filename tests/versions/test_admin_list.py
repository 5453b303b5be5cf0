"""The agent versions list and page: every version from code or registered, and what needs it."""

from __future__ import annotations

from django.db import connection
from django.test.utils import CaptureQueriesContext

from runtime.models import AgentVersion
from runtime.registry import code_defines
from tests.versions.conftest import CHANGELIST, act, approval_script, make_agent, waiting_runs

PAGE = "/admin/agentops/agentversion/version/{}/{}/"


def test_it_lists_code_only_versions_and_registrations_whose_code_is_gone(define, agent_admin):
    define(make_agent([], name="retired"))
    act(agent_admin, "unregister", "retired:1")
    with code_defines(make_agent([]), make_agent([], version="2", instructions="Be brief.")):
        page = agent_admin.get(CHANGELIST).content.decode()
    assert 'value="clerk:1"' in page
    assert 'value="clerk:2"' in page
    assert 'value="retired:1"' in page
    # A code-only version is listed without a row being created for it.
    assert list(AgentVersion.objects.values_list("agent", flat=True)) == ["retired"]
    assert page.count("never registered") == 2
    assert "not defined in the code: cannot be registered" in page


def test_it_shows_the_model_tools_policies_approval_rules_and_who_registered(define, agent_admin):
    define(make_agent([]))
    page = agent_admin.get(CHANGELIST).content.decode()
    assert "claude-test" in page
    assert 'charge <span class="quiet">(manual)</span>' in page
    assert 'get_order <span class="quiet">(safe)</span>' in page
    assert 'open_ticket <span class="quiet">(idempotent)</span>' in page
    assert 'refund <span class="quiet">(manual · approval)</span>' in page
    assert make_agent([]).fingerprint[:12] in page
    assert "registered by admin · " in page


def test_it_counts_the_unfinished_runs_that_need_each_version_and_links_to_them(
    define, agent_admin, effects
):
    define(make_agent(approval_script()))
    waiting_runs("clerk", 3)
    page = agent_admin.get(CHANGELIST).content.decode()
    assert ">3 runs</a>" in page
    assert "agent=clerk&amp;version=1" in page


def test_it_shows_a_fingerprint_mismatch_with_the_differing_parts(define, agent_admin):
    define(make_agent([]))
    changed = make_agent([], instructions="Refund <b>everything</b>.")
    with code_defines(changed):
        listing = agent_admin.get(CHANGELIST).content.decode()
        page = agent_admin.get(PAGE.format("clerk", "1")).content.decode()
    assert "<strong>changed</strong>" in listing
    assert '1 part differs: <span class="nowrap">instructions</span>' in listing
    assert make_agent([]).fingerprint[:12] in listing
    assert changed.fingerprint[:12] in listing
    assert "What changed under the same label" in page
    assert "Help the customer." in page
    # Agent text is escaped, never interpreted.
    assert "Refund &lt;b&gt;everything&lt;/b&gt;." in page
    assert "<b>everything</b>" not in page


def test_it_filters_by_state(define, agent_admin):
    define(make_agent([]), make_agent([], name="greeter"))
    act(agent_admin, "unregister", "greeter:1")
    page = agent_admin.get(CHANGELIST + "?state=registered").content.decode()
    assert 'value="clerk:1"' in page
    assert 'value="greeter:1"' not in page


def test_the_list_takes_as_many_queries_for_many_versions_and_runs_as_for_one(
    define, agent_admin, effects
):
    define(make_agent(approval_script()))
    with CaptureQueriesContext(connection) as few:
        agent_admin.get(CHANGELIST)
    define(*[make_agent(approval_script(), name=f"agent{i}") for i in range(5)])
    for i in range(5):
        waiting_runs(f"agent{i}", 2)
    with CaptureQueriesContext(connection) as many:
        page = agent_admin.get(CHANGELIST).content.decode()
    assert page.count('class="action-select"') == 6
    assert len(many) == len(few)


def test_the_version_page_lists_the_runs_that_need_it(define, agent_admin, effects):
    define(make_agent(approval_script()))
    runs = waiting_runs("clerk", 2)
    page = agent_admin.get(PAGE.format("clerk", "1")).content.decode()
    assert "2 runs need this version" in page
    for run in runs:
        assert str(run.pk) in page
    assert "Refused while 2 unfinished runs need it" in page


def test_an_unknown_version_is_not_found(define, agent_admin):
    define(make_agent([]))
    assert agent_admin.get(PAGE.format("clerk", "7")).status_code == 404


def test_a_registration_change_link_leads_to_its_version_page(define, agent_admin):
    define(make_agent([]))
    row = AgentVersion.objects.get()
    response = agent_admin.get(f"{CHANGELIST}{row.pk}/change/")
    assert response.status_code == 302
    assert response["Location"] == PAGE.format("clerk", "1")
