"""The whole story: v1's code changes without a bump, the board shows it, v1 is restored, the
group is retried, old runs finish on v1 while new runs use v2, then v1 is unregistered."""

from __future__ import annotations

from agentops.views.versions import group_dom_id
from runtime import submit
from runtime.models import AgentVersion, Run, RunStatus
from runtime.registry import code_defines
from runtime.testing import run_until_idle
from tests.versions.conftest import (
    CHANGELIST,
    act,
    approval_script,
    approve_and_resume,
    make_agent,
    messages_of,
    waiting_runs,
)


def test_runs_blocked_by_a_code_change_finish_on_their_version_after_a_restore(
    define, effects, agent_admin, operator
):
    v1 = make_agent(approval_script())
    define(v1)
    runs = waiting_runs("clerk", 2)
    done_before = effects.total  # each run read its order once

    # v1's code changes under the same label: the runs stop before calling anything.
    changed = make_agent(approval_script(), instructions="Refund every order in full.")
    with code_defines(changed):
        runs = [approve_and_resume(run) for run in runs]
        assert [run.attention_reason for run in runs] == ["fingerprint_mismatch"] * 2
        assert changed.llm.calls == 0
        assert effects.total == done_before

        board = operator.get("/versions/").content.decode()
        assert f'id="{group_dom_id("clerk", "1")}"' in board
        assert '<del class="error-text">-Help the customer.</del>' in board
        assert "<ins>+Refund every order in full.</ins>" in board
        assert "None of the 2 runs can be retried yet" in board

        listing = agent_admin.get(CHANGELIST).content.decode()
        assert '1 part differs: <span class="nowrap">instructions</span>' in listing
        assert changed.fingerprint[:12] in listing

        refused = act(agent_admin, "unregister", "clerk:1")
        assert all(str(run.pk) in messages_of(refused)[0] for run in runs)
        assert AgentVersion.objects.get(version="1").is_registered

    # The fix: v1's code restored, the change shipped as v2 and registered from the admin.
    v2 = make_agent(approval_script(), version="2", instructions="Refund every order in full.")
    define(v2, register_them=False)
    act(agent_admin, "register", "clerk:2")
    assert AgentVersion.objects.get(version="2").registered_by == "ada"
    # Registering retried nothing.
    assert [Run.objects.get(pk=r.pk).status for r in runs] == [RunStatus.NEEDS_ATTENTION] * 2

    board = operator.get("/versions/").content.decode()
    assert "2 of 2 runs will be retried" in board
    fragment = operator.post("/versions/clerk/1/retry/", HTTP_HX_REQUEST="true").content.decode()
    assert "Retried 2 of 2 runs." in fragment

    finished = [run_until_idle(run.pk) for run in runs]
    assert [(run.status, run.version, run.fingerprint) for run in finished] == [
        (RunStatus.COMPLETED, "1", v1.fingerprint)
    ] * 2
    assert v2.llm.calls == 0
    assert "No run is blocked by an agent version." in operator.get("/versions/").content.decode()

    new = run_until_idle(submit("clerk", "refund B2", actor="alice").pk)
    assert (new.version, new.fingerprint, new.status) == ("2", v2.fingerprint, RunStatus.WAITING)

    # v1's runs have drained: it can go.
    assert messages_of(act(agent_admin, "unregister", "clerk:1")) == ["Unregistered clerk 1."]
    assert not AgentVersion.objects.get(version="1").is_registered
    assert AgentVersion.objects.get(version="2").is_registered


def test_runs_whose_version_left_the_code_finish_once_it_is_deployed_again(
    define, effects, operator
):
    v1 = make_agent(approval_script())
    define(v1)
    [run] = waiting_runs("clerk", 1)
    with code_defines(make_agent(approval_script(), version="2")):
        run = approve_and_resume(run)
        assert run.attention_reason == "version_missing"
        board = operator.get("/versions/").content.decode()
        assert "Deploy the code of clerk version 1 again" in board
        assert "There is nothing to compare: the code of this version is gone." in board
        assert "The run cannot be retried yet." in board
    fragment = operator.post("/versions/clerk/1/retry/", HTTP_HX_REQUEST="true").content.decode()
    assert "Retried 1 of 1 run." in fragment
    assert run_until_idle(run.pk).status == RunStatus.COMPLETED
