"""The `agentops` command against a live server: each command, and its errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from agentops.api.cli import main
from runtime.models import Event, EventKind, Interaction, Run
from tests.api.conftest import make_account, make_token

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def cli(
    live_server: Any,
    world: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
    keep_connections: None,
) -> Any:
    monkeypatch.setenv("AGENTOPS_URL", live_server.url)
    monkeypatch.setenv("AGENTOPS_TOKEN", make_token(make_account("ops")))

    def run(*argv: str) -> tuple[int, str, str]:
        status = main(list(argv))
        out, err = capsys.readouterr()
        return status, out, err

    return run


def test_inbox_lists_what_waits(cli: Any, world: Any) -> None:
    approval = world.pending(world.run("waiting"))
    question = world.pending(world.run("question"))
    blocked = world.run("blocked")
    status, out, _ = cli("inbox")
    assert status == 0
    assert f"{approval.pk}  run {approval.run_id}  approval  refund" in out
    assert f"{question.pk}  run {question.run_id}  question  Which order do you mean?" in out
    assert f"run {blocked.pk}  needs attention: uncertain_operation on" in out
    status, out, _ = cli("--json", "inbox")
    assert [i["id"] for i in json.loads(out)["interactions"]] == [
        str(approval.pk),
        str(question.pk),
    ]


def test_inbox_when_nothing_waits(cli: Any) -> None:
    assert cli("inbox") == (0, "Nothing waits.\n", "")


def test_show_a_run(cli: Any, world: Any) -> None:
    run = world.run("waiting")
    status, out, _ = cli("show", str(run.pk))
    assert status == 0
    assert f"run {run.pk}  waiting" in out
    assert "step-1/model" in out
    assert "waits for" in out


def test_submit_with_an_idempotency_key(cli: Any) -> None:
    first = cli("submit", "chatty", "hello", "--idempotency-key", "k-1")
    again = cli("submit", "chatty", "hello", "--idempotency-key", "k-1")
    assert first[0] == again[0] == 0
    assert first[1] == again[1]
    assert Run.objects.count() == 1
    assert Event.objects.get(kind=EventKind.SUBMITTED).actor == "api:ops"


def test_approve(cli: Any, world: Any) -> None:
    interaction = world.pending(world.run("waiting"))
    status, out, _ = cli("approve", str(interaction.pk))
    assert status == 0
    assert "answered by api:ops" in out
    assert Interaction.objects.get(pk=interaction.pk).response == {"approved": True, "reason": ""}


def test_reject_with_a_reason(cli: Any, world: Any) -> None:
    interaction = world.pending(world.run("waiting"))
    assert cli("reject", str(interaction.pk), "--reason", "over the limit")[0] == 0
    assert Interaction.objects.get(pk=interaction.pk).response == {
        "approved": False,
        "reason": "over the limit",
    }


def test_answer(cli: Any, world: Any) -> None:
    interaction = world.pending(world.run("question"))
    assert cli("answer", str(interaction.pk), "order A1")[0] == 0
    assert Interaction.objects.get(pk=interaction.pk).response == {"answer": "order A1"}


def test_resolve_the_blocked_operation_with_evidence(cli: Any, world: Any) -> None:
    run = world.run("blocked")
    status, out, _ = cli(
        "resolve", str(run.pk), "--result", '{"receipt_id": "rcpt-1"}', "--evidence", "ledger"
    )
    assert status == 0, out
    assert "completed: the run continues" in out
    event = Event.objects.get(run=run, kind=EventKind.OPERATION_RESOLVED)
    assert (event.actor, event.data["evidence"]) == ("api:ops", "ledger")


def test_resolve_a_call_that_did_not_happen(cli: Any, world: Any) -> None:
    run = world.run("blocked")
    status, out, _ = cli(
        "resolve", str(run.pk), "--did-not-happen", "tell-model", "--evidence", "none"
    )
    assert status == 0, out
    event = Event.objects.get(run=run, kind=EventKind.OPERATION_RESOLVED)
    assert (event.actor, event.data["outcome"]) == ("api:ops", "not_run_tell_model")
    status, _, err = cli("resolve", str(run.pk), "--evidence", "none")
    assert status == 2
    assert "--result" in err or "--did-not-happen" in err


def test_retry_and_cancel(cli: Any, world: Any) -> None:
    failed = world.run("failed")
    assert cli("retry", str(failed.pk)) == (0, f"run {failed.pk}  queued\n", "")
    assert cli("cancel", str(failed.pk), "--reason", "not needed") == (
        0,
        f"run {failed.pk}  cancelled\n",
        "",
    )
    assert Run.objects.get(pk=failed.pk).status == "cancelled"


def test_a_refusal_exits_1_with_the_apis_code_and_message(cli: Any, world: Any) -> None:
    blocked = world.run("blocked")
    status, out, err = cli("retry", str(blocked.pk))
    assert status == 1
    assert out == ""
    assert err.startswith("error: retry_rejected: run ")
    assert cli("show", "00000000-0000-0000-0000-000000000000")[2].startswith("error: not_found:")
    interaction = world.pending(world.run("waiting"))
    status, _, err = cli("reject", str(interaction.pk), "--reason", " ")
    assert (status, err.split(":")[1].strip()) == (1, "invalid_input")
    assert Interaction.objects.get(pk=interaction.pk).status == "pending"


def test_a_bad_token_or_no_configuration(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTOPS_TOKEN", "aot_wrong")
    status, _, err = cli("inbox")
    assert (status, err.split(":")[1].strip()) == (1, "unauthenticated")
    monkeypatch.delenv("AGENTOPS_TOKEN")
    assert cli("inbox") == (2, "", "error: not_configured: set AGENTOPS_URL and AGENTOPS_TOKEN\n")


def test_a_result_that_is_not_json_is_a_usage_error(cli: Any, world: Any) -> None:
    run = world.run("blocked")
    status, _, err = cli("resolve", str(run.pk), "--result", "{nope", "--evidence", "x")
    assert status == 2
    assert err.startswith("error: invalid_result:")
    assert Run.objects.get(pk=run.pk).status == "needs_attention"


def test_agent_text_cannot_drive_the_terminal(cli: Any, world: Any) -> None:
    from runtime import submit
    from runtime.testing import run_until_idle

    run = run_until_idle(submit("questions", "hi \x1b[2J\x1b]0;owned\x07", actor="alice").pk)
    status, out, _ = cli("show", str(run.pk))
    assert status == 0
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b[2J" in out


def test_the_installed_command_runs(live_server: Any, world: Any, keep_connections: None) -> None:
    """The console script as a user runs it: its own process, over HTTP."""
    env = {
        **os.environ,
        "AGENTOPS_URL": live_server.url,
        "AGENTOPS_TOKEN": make_token(make_account("shell")),
    }
    waiting = world.run("waiting")
    done = subprocess.run(
        [sys.executable, "-m", "agentops.api.cli", "inbox"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert str(waiting.pk) in done.stdout
