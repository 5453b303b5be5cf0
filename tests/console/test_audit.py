"""The audit log: operator actions only, who/when/what with evidence, filters, pages."""

from __future__ import annotations

import re

import pytest

from agentops import selectors
from runtime import cancel, resolve, respond
from tests.console.conftest import htmx

# session, user, permissions (user's and groups', in one: agentops.backends); then one page of
# events.
AUDIT_QUERIES = 4


def rows(html: str) -> list[str]:
    return re.findall(r'<td class="actor">([^<]+)</td>', html)


def test_it_lists_every_operator_action_and_no_runtime_event(world, as_user):
    waiting = world.run("waiting")
    respond(world.pending(waiting).pk, {"approved": False, "reason": "too much"}, actor="bob")
    blocked = world.run("blocked")
    resolve(
        blocked.pk,
        blocked.blocked_operation,
        {"receipt_id": "rcpt-9"},
        evidence="ledger line 42",
        actor="carol",
    )
    html = as_user("viewer").get("/audit/").content.decode()
    assert "runtime" not in rows(html)
    assert rows(html)[:3] == ["carol", "alice", "bob"]  # newest first
    assert "Evidence: ledger line 42" in html
    assert "Reason: too much" in html
    assert "Reconciled" in html
    assert "Rejected" in html
    assert "Submitted" in html  # alice's messages are actions too


def test_it_filters_by_actor_kind_and_run(world, as_user):
    first = world.run("waiting")
    second = world.run("waiting")
    cancel(first.pk, actor="bob", reason="dup")
    cancel(second.pk, actor="carol")
    client = as_user("viewer")
    assert rows(client.get("/audit/?actor=bob").content.decode()) == ["bob"]
    assert rows(client.get("/audit/?kind=cancelled").content.decode()) == ["carol", "bob"]
    assert rows(client.get(f"/audit/?run={first.pk}").content.decode()) == ["bob", "alice"]


def test_it_refuses_a_malformed_run_filter(world, as_user):
    response = as_user("viewer").get("/audit/?run=42")
    assert response.status_code == 400
    assert "a run id is a UUID" in response.content.decode()


def test_it_pages_by_event_id(world, as_user, monkeypatch):
    monkeypatch.setattr(selectors, "PAGE_SIZE", 2)
    for name in ("u1", "u2", "u3"):
        cancel(world.run("waiting").pk, actor=name)
    client = as_user("viewer")
    first = client.get("/audit/?kind=cancelled").content.decode()
    assert rows(first) == ["u3", "u2"]
    older = re.search(r'href="\?kind=cancelled&amp;before=(\d+)" rel="next"', first).group(1)
    second = client.get(f"/audit/?kind=cancelled&before={older}").content.decode()
    assert rows(second) == ["u1"]
    newer = re.search(r'href="\?kind=cancelled&amp;after=(\d+)" rel="prev"', second).group(1)
    assert rows(client.get(f"/audit/?kind=cancelled&after={newer}").content.decode()) == [
        "u3",
        "u2",
    ]


def test_it_swaps_only_the_table_for_htmx(world, as_user):
    world.run("waiting")
    html = as_user("viewer").get("/audit/?actor=alice", **htmx()).content.decode()
    assert html.startswith('<div id="audit-table"')


@pytest.mark.parametrize("n", [3, 30])
def test_it_lists_actions_with_a_fixed_number_of_queries(
    world, as_user, django_assert_num_queries, n
):
    for _ in range(n):
        cancel(world.run("queued").pk, actor="bob", reason="tidy up")
    client = as_user("operator")
    with django_assert_num_queries(AUDIT_QUERIES):
        html = client.get("/audit/?kind=cancelled").content.decode()
    assert rows(html) == ["bob"] * n
