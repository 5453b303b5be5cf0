"""Forks: the preview, checked call by call against what the fork then executes."""

from __future__ import annotations

from typing import Any

import pytest

from runtime import (
    ForkRefused,
    InvalidInput,
    NotFound,
    fork,
    fork_preview,
    pause,
    submit,
)
from runtime.llm.scripted import call, say
from runtime.models import Event, EventKind, Operation, Run, RunStatus
from runtime.surgery import messages_at
from runtime.testing import SimulatedCrash, crash_at, recover, run_until_idle
from tests.conftest import ARGS, make_agent


class Recorder:
    """A script (one response per assistant turn) that keeps every request it was sent."""

    def __init__(self, turns: list[Any]) -> None:
        self.turns, self.requests = turns, []

    def __call__(self, request: Any) -> Any:
        self.requests.append(request)
        return self.turns[sum(1 for m in request.messages if m["role"] == "assistant")]


def _two_calls(first: str, second: str) -> list[Any]:
    return [call((first, ARGS[first]), (second, ARGS[second]), step=1), say("done")]


def _executed(run_id: Any) -> list[str]:
    """The calls a run made itself, in order: its intents."""
    return list(
        Event.objects.filter(run_id=run_id, kind=EventKind.INTENT)
        .order_by("id")
        .values_list("operation_key", flat=True)
    )


def _finished(define: Any, turns: list[Any], **agent: Any) -> tuple[Run, Recorder]:
    script = Recorder(turns)
    define(make_agent(script, **agent))
    run = run_until_idle(submit(agent.get("name", "clerk"), "help", actor="alice").pk)
    return run, script


def test_the_preview_matches_what_the_fork_executes_call_by_call(define, effects):
    run, script = _finished(define, _two_calls("get_order", "open_ticket"))
    assert run.status == RunStatus.COMPLETED
    preview = fork_preview(run.pk, "step-1/tool/toolu_01_0")
    assert [c.key for c in preview.reused] == ["step-1/model"]
    assert [(c.key, c.plan, c.policy, c.safe) for c in preview.calls] == [
        ("step-1/tool/toolu_01_0", "rerun", "safe", True),
        ("step-1/tool/toolu_01_1", "rerun", "idempotent", False),
        ("step-2/model", "rerun", "", True),
    ]
    assert "will not deduplicate" in preview.calls[1].note
    requests_before = len(script.requests)

    child = run_until_idle(fork(run.pk, "step-1/tool/toolu_01_0", actor="bob").pk)
    assert child.status == RunStatus.COMPLETED
    assert _executed(child.pk) == [c.key for c in preview.calls]
    assert len(script.requests) == requests_before + 1  # step 1 reused, step 2 asked again
    # The re-run calls ran under the fork's operation ids: new effects.
    assert effects.effects[f"{child.pk}:step-1/tool/toolu_01_0"] == 1
    assert effects.effects[f"{child.pk}:step-1/tool/toolu_01_1"] == 1


def test_a_fork_records_its_parent_and_both_histories_link_each_other(define, effects):
    run, _ = _finished(define, _two_calls("get_order", "open_ticket"))
    child = fork(run.pk, "step-1/tool/toolu_01_1", actor="bob")
    assert (child.parent_id, child.fork_point) == (run.pk, "step-1/tool/toolu_01_1")
    assert child.session_id != run.session_id
    assert list(run.forks.all()) == [child]
    forked = Event.objects.get(run=child, kind=EventKind.FORKED)
    assert forked.actor == "bob"
    assert forked.data["parent"] == str(run.pk)
    assert Event.objects.get(run=run, kind=EventKind.FORK_CREATED).data["fork"] == str(child.pk)
    # Reused outcomes cost nothing again.
    reused = Operation.objects.get(run=child, key="step-1/tool/toolu_01_0")
    assert reused.usage is None


def test_a_manual_call_made_again_needs_its_acknowledgement(define, effects):
    run, _ = _finished(define, _two_calls("get_order", "charge"))
    preview = fork_preview(run.pk, "step-1/tool/toolu_01_0")
    assert preview.acknowledgements_needed == ["step-1/tool/toolu_01_1"]
    assert "NOT safe to repeat" in preview.calls[1].note
    runs = Run.objects.count()
    with pytest.raises(ForkRefused, match="step-1/tool/toolu_01_1"):
        fork(run.pk, "step-1/tool/toolu_01_0", actor="bob")
    with pytest.raises(ForkRefused):
        fork(run.pk, "step-1/tool/toolu_01_0", actor="bob", acknowledge=["step-1/tool/other"])
    assert Run.objects.count() == runs
    child = fork(
        run.pk, "step-1/tool/toolu_01_0", actor="bob", acknowledge=["step-1/tool/toolu_01_1"]
    )
    assert run_until_idle(child.pk).status == RunStatus.COMPLETED
    assert Event.objects.get(run=child, kind=EventKind.FORKED).data["acknowledged"] == [
        "step-1/tool/toolu_01_1"
    ]


def test_report_is_flagged_not_safe_to_repeat(define, effects):
    run, _ = _finished(define, _two_calls("notify", "get_order"))
    call_ = fork_preview(run.pk, "step-1/tool/toolu_01_0").calls[0]
    assert (call_.policy, call_.safe, call_.needs_acknowledgement) == ("report", False, False)
    assert "NOT safe to repeat" in call_.note


def test_a_fork_with_edited_arguments_runs_the_tool_with_them(define, effects):
    run, _ = _finished(define, _two_calls("get_order", "open_ticket"))
    edited = {"order_id": "B2"}
    with pytest.raises(InvalidInput, match="order_id"):
        fork(run.pk, "step-1/tool/toolu_01_0", actor="bob", input={"order": "B2"})
    child = fork(run.pk, "step-1/tool/toolu_01_0", actor="bob", input=edited)
    child = run_until_idle(child.pk)
    assert child.status == RunStatus.COMPLETED
    op = Operation.objects.get(run=child, key="step-1/tool/toolu_01_0")
    assert op.input == {"tool": "get_order", "arguments": edited}
    assert op.result == {"order_id": "B2", "status": "paid"}
    # The parent is untouched.
    parent_op = Operation.objects.get(run=run, key="step-1/tool/toolu_01_0")
    assert parent_op.input["arguments"] == ARGS["get_order"]


def test_a_fork_with_edited_messages_sends_them(define, effects):
    run, script = _finished(define, _two_calls("get_order", "open_ticket"))
    original = messages_at(run.pk, "step-2/model")
    assert original[0] == {"role": "user", "content": "help"}
    edited = [*original[:-1], {"role": "user", "content": "Use order B2 instead."}]
    bad = [{"role": "robot", "content": "hi"}]
    with pytest.raises(InvalidInput, match="role"):
        fork(run.pk, "step-2/model", actor="bob", input=bad)
    preview = fork_preview(run.pk, "step-2/model", input=edited)
    assert [c.key for c in preview.calls] == ["step-2/model"]
    assert preview.edited
    child = run_until_idle(fork(run.pk, "step-2/model", actor="bob", input=edited).pk)
    assert child.status == RunStatus.COMPLETED
    assert script.requests[-1].messages == edited
    assert _executed(child.pk) == ["step-2/model"]
    # Run again after a crash, the fork replays its edited request instead of blocking.
    assert Operation.objects.get(run=child, key="step-2/model").status == "completed"


def test_a_fork_continues_on_another_registered_version(define, effects):
    run, _ = _finished(define, _two_calls("get_order", "open_ticket"))
    v2_script = Recorder([call(("get_order", ARGS["get_order"]), step=1), say("from v2")])
    define(make_agent(v2_script, version="2", instructions="Be brief."))
    preview = fork_preview(run.pk, "step-1/tool/toolu_01_1", version="2")
    assert preview.version == "2"
    child = run_until_idle(fork(run.pk, "step-1/tool/toolu_01_1", actor="bob", version="2").pk)
    assert (child.version, child.status, child.output) == ("2", RunStatus.COMPLETED, "from v2")
    assert _executed(child.pk) == [c.key for c in preview.calls]
    assert len(v2_script.requests) == 1  # only the model request after the fork point
    with pytest.raises(NotFound, match="version '9'"):
        fork_preview(run.pk, "step-1/tool/toolu_01_1", version="9")


def test_a_fork_of_a_later_run_in_a_session_replays_its_history(define, effects):
    # One response per assistant turn in the request, the session's history included.
    script = Recorder([say("first"), *_two_calls("get_order", "open_ticket")])
    define(make_agent(script))
    first = run_until_idle(submit("clerk", "one", actor="alice").pk)
    second = run_until_idle(submit("clerk", "two", actor="alice", session=first.session_id).pk)
    assert second.status == RunStatus.COMPLETED
    child = run_until_idle(fork(second.pk, "step-1/tool/toolu_01_1", actor="bob").pk)
    assert child.status == RunStatus.COMPLETED  # no input mismatch: the seed is the history
    assert script.requests[-1].messages[0] == {"role": "user", "content": "one"}


def test_a_blocked_run_forks_at_its_uncertain_call(define, effects):
    define(make_agent(_two_calls("charge", "get_order")))
    run = submit("clerk", "charge", actor="alice")
    with crash_at("after_intent", tool="charge"), pytest.raises(SimulatedCrash):
        recover(run.pk)
    run = recover(run.pk)
    assert run.status == RunStatus.NEEDS_ATTENTION
    preview = fork_preview(run.pk, "step-1/tool/toolu_01_0")
    assert preview.acknowledgements_needed == ["step-1/tool/toolu_01_0"]
    # Nothing after the uncertain call can be reused: its outcome is unknown.
    with pytest.raises(NotFound):
        fork_preview(run.pk, "step-1/tool/toolu_01_1")


def test_a_paused_run_can_be_forked_and_a_moving_one_cannot(define, effects):
    define(make_agent(_two_calls("get_order", "open_ticket")))
    run = submit("clerk", "help", actor="alice")
    with pytest.raises(ForkRefused, match="queued"):
        fork_preview(run.pk, "step-1/model")
    pause(run.pk, actor="alice")
    with pytest.raises(NotFound, match="no operation"):
        fork_preview(run.pk, "step-1/model")


def test_it_refuses_what_it_cannot_reuse_and_creates_nothing(define, effects):
    run, _ = _finished(define, _two_calls("get_order", "open_ticket"))
    runs, events = Run.objects.count(), Event.objects.count()
    with pytest.raises(NotFound):
        fork(run.pk, "step-9/model", actor="bob")
    with pytest.raises(InvalidInput):
        fork(run.pk, "step-1/model", actor="bob", acknowledge="step-1/model")
    with pytest.raises(InvalidInput):
        fork(run.pk, "step-1/model", actor="", input=None)
    assert (Run.objects.count(), Event.objects.count()) == (runs, events)
