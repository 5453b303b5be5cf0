"""Agent versions from the admin and the version board, across real deploys.

A deploy here is what it is in production: the server and the worker are restarted with other
code. returns-desk v1's instructions change with AGENTOPS_BROWSER_EDITED=1 (tests/browser/
agents.py), without a version bump.
"""

from __future__ import annotations

import pytest

from runtime.models import AgentVersion, AttentionReason, RunStatus
from tests.browser.agents import EDIT, EDITED_ENV

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ADMIN_VERSIONS = "/admin/agentops/agentversion/"


def _register_v2_from_the_list(ada) -> None:
    admin = ada.page
    admin.goto(ADMIN_VERSIONS)
    assert "never registered" in admin.locator("tr", has_text="returns-desk 2").inner_text()
    admin.check("input.action-select[value='returns-desk:2']")
    admin.select_option("select[name=action]", "register")
    admin.get_by_role("button", name="Go").click()
    success = admin.locator(".messagelist .success")
    success.wait_for()
    assert success.inner_text().startswith("Registered returns-desk 2.")
    registered = AgentVersion.objects.get(agent="returns-desk", version="2")
    assert (registered.is_registered, registered.registered_by) == (True, "ada")
    ada.shot("admin-registered-v2")


def _unregister_v1_is_refused(ada, run) -> None:
    admin = ada.page
    admin.goto(f"{ADMIN_VERSIONS}version/returns-desk/1/")
    admin.get_by_role("button", name="Unregister returns-desk 1").click()
    refused = admin.locator(".messagelist .error")
    refused.wait_for()
    assert "still needed by 1 unfinished run(s)" in refused.inner_text()
    assert str(run.pk) in refused.inner_text()
    assert AgentVersion.objects.get(agent="returns-desk", version="1").is_registered
    ada.shot("admin-unregister-refused")


def test_it_manages_versions_from_the_admin_and_unblocks_a_run_on_the_board(desk, people, stack):
    run = desk.submit("Please refund $30 of order 1005, the jacket leaks.", agent="returns-desk")
    desk.wait_status(run, RunStatus.WAITING)
    ada = people(stack, "ada")
    _register_v2_from_the_list(ada)
    # v1 is still needed by the waiting run: unregistering it is refused, naming the run.
    _unregister_v1_is_refused(ada, run)

    # A deploy changes v1's code under the same label; the approval is given afterwards.
    stack.deploy(**{EDITED_ENV: "1"})
    alice = people(stack, "alice")
    page = alice.open(f"/interactions/{desk.pending(run).pk}/")
    page.get_by_role("button", name="Approve", exact=True).click()
    page.locator(".decided").wait_for()
    blocked = desk.wait_status(run, RunStatus.NEEDS_ATTENTION)
    assert blocked.attention_reason == AttentionReason.FINGERPRINT_MISMATCH
    assert desk.refunds() == 0  # nothing ran on the changed code

    page.goto("/versions/")
    group = page.locator("section.version-group[data-agent='returns-desk'][data-version='1']")
    group.wait_for()
    assert "changed" in group.locator(".meta").inner_text()
    assert str(run.pk)[:8] in group.locator("table.version-group-runs").inner_text()
    assert EDIT.strip() in group.locator("pre.version-diff ins").inner_text()
    assert group.get_by_role("button", name="Nothing to retry yet").is_disabled()
    alice.shot("board-code-changed")

    # The fix: the original v1 deployed again. Registering or deploying retries nothing.
    stack.deploy()
    assert desk.wait_status(run, RunStatus.NEEDS_ATTENTION).status == RunStatus.NEEDS_ATTENTION
    page.goto("/versions/")
    group.wait_for()
    assert "code matches again" in group.inner_text()
    alice.shot("board-code-restored")
    group.get_by_role("button", name="Retry 1 run").click()
    group.locator(".version-group-result", has_text="Retried 1 of 1 run.").wait_for()
    alice.shot("board-retried")

    finished = desk.wait_status(run, RunStatus.COMPLETED)
    assert (finished.version, finished.fingerprint) == ("1", run.fingerprint)
    assert finished.output.startswith("Refunded $30.00 of order 1005")
    assert desk.refunds("1005") == 1
    page.goto(f"/runs/{run.pk}/")
    alice.wait_live()
    assert page.locator("#run-header .badge").inner_text() == "completed"
    assert page.locator("#run-timeline li.kind-retried .actor").inner_text() == "alice"
    alice.shot("run-finished-on-v1")
