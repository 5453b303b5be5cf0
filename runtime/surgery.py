"""Run surgery: pause and resume a run; fork a run from one of its operations, after a preview.

Pause stops a run at its next durable boundary, never inside a call: a run that is not
running pauses at once (its timer and its pending interactions kept), a running one when its
worker next reaches a boundary. Resume returns it exactly where it was.

A fork is a new run in a new session that reuses its parent's recorded outcomes up to one
operation and runs from there — optionally with that operation's input edited (a model
request's messages, a tool call's arguments) and on another registered version. The preview
says, before anything runs, which calls are reused and which run again, each re-run call with
its recovery policy and whether repeating it is safe.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from runtime import jsonvalues, registry
from runtime.agents import Agent, digest, validate_input
from runtime.control import MAX_REASON_CHARS, _actor, _get, _text
from runtime.engine import opening, request_parts
from runtime.errors import ForkRefused, InvalidInput, InvalidTransition, NotFound
from runtime.llm import ModelResponse, ToolUseBlock
from runtime.models import (
    PAUSABLE_STATUSES,
    TERMINAL_STATUSES,
    Operation,
    OperationKind,
    OperationStatus,
    Run,
    RunStatus,
)
from runtime.store import surgery as surgery_store
from runtime.transcript import (
    NUDGE,
    append,
    has_answer,
    text_block,
    tool_result_block,
    visible_content,
)

# --- pause and resume ---------------------------------------------------------------------------


def pause_problem(run: Run) -> str | None:
    """Why `pause` would be refused for `run` now, or None if it would be accepted."""
    if run.status == RunStatus.PAUSED:
        return f"it is already paused (by {run.pause_requested_by})"
    if run.status == RunStatus.RUNNING and run.pause_requested_by:
        return f"a pause was already requested by {run.pause_requested_by}"
    if run.status in TERMINAL_STATUSES:
        return f"it is {run.status}; only unfinished runs can be paused"
    return None


def pause(run_id: Any, *, actor: str, reason: str = "") -> Run:
    """Pause a run at its next durable boundary; `resume` returns it where it was.

    A run that is not running pauses now. A running one finishes the call in flight (its
    outcome is recorded) and pauses before the next one; until then its status stays
    `running` with the request recorded. A paused run is never claimed; its retry timer waits;
    its pending approval or question can still be answered, and the answer moves it on only
    once it is resumed. Who paused it and why are in its history.
    """
    actor = _actor(actor)
    reason = _reason(reason)
    run = _get(Run, run_id)
    problem = pause_problem(run)
    if problem is not None:
        raise InvalidTransition(f"run {run.pk} cannot be paused: {problem}")
    if run.status in PAUSABLE_STATUSES:
        landed = surgery_store.pause_now(run, actor=actor, reason=reason)
    else:
        landed = surgery_store.request_pause(run, actor=actor, reason=reason)
    if not landed:
        raise InvalidTransition(f"run {run.pk} changed meanwhile; reload and try again")
    run.refresh_from_db()
    return run


def resume_problem(run: Run) -> str | None:
    """Why resuming `run` would be refused now, or None if it would be accepted."""
    if run.status == RunStatus.PAUSED:
        return None
    if run.status == RunStatus.RUNNING and run.pause_requested_by:
        return None
    return f"it is {run.status} and not paused"


def resume_run(run_id: Any, *, actor: str) -> Run:
    """Return a paused run exactly where it was paused (queued, waiting, its retry timer, its
    block); a run whose interaction was answered while paused goes on. A running run whose
    pause was requested but not reached yet simply goes on."""
    actor = _actor(actor)
    run = _get(Run, run_id)
    problem = resume_problem(run)
    if problem is not None:
        raise InvalidTransition(f"run {run.pk} cannot be resumed: {problem}")
    if run.status == RunStatus.PAUSED:
        landed = surgery_store.resume_paused(run, actor=actor) is not None
    else:
        landed = surgery_store.withdraw_pause(run, actor=actor)
    if not landed:
        raise InvalidTransition(f"run {run.pk} changed meanwhile; reload and try again")
    run.refresh_from_db()
    return run


def _reason(reason: Any) -> str:
    if not isinstance(reason, str):
        raise InvalidInput(f"the reason must be text, not {type(reason).__name__}")
    return jsonvalues.check_text(reason.strip(), what="reason", max_length=MAX_REASON_CHARS)


# --- fork: the preview --------------------------------------------------------------------------

# The parent states a fork may start from: ended, blocked or paused — never while it moves.
FORKABLE_STATUSES = (
    RunStatus.COMPLETED,
    RunStatus.FAILED,
    RunStatus.CANCELLED,
    RunStatus.NEEDS_ATTENTION,
    RunStatus.PAUSED,
)
# A fork's first calls from the fork point on: reused, or run again (what the preview says).
REUSED = "reused"

_NOTES = {
    "manual": "NOT safe to repeat: a manual call's effect would happen again (nothing "
    "deduplicates it). Acknowledge this call to run it again.",
    "report": "NOT safe to repeat: its effect may happen again; it runs without asking.",
    "idempotent": "runs under a new operation id (the fork's): the service will not "
    "deduplicate it against the original call, so its effect happens again.",
    "safe": "safe to repeat (a read or pure work).",
}


@dataclass(frozen=True)
class PreviewCall:
    """One call of a fork, as the preview shows it."""

    key: str
    kind: str  # "model" or "tool"
    name: str
    # reused | rerun | new: reused outcome; a call of the parent made again; one it never made.
    plan: str
    policy: str = ""
    safe: bool = True
    note: str = ""
    # A manual call made again needs its own acknowledgement (`acknowledge=[key]`).
    needs_acknowledgement: bool = False
    needs_person: bool = False


@dataclass(frozen=True)
class ForkPreview:
    """What a fork from `at` will do, before anything runs.

    `reused` are the parent's recorded outcomes the fork replays; `calls` are the calls it
    makes, in order, up to and including its next model request; after that the model decides
    and whatever it asks for is new work (`then`).
    """

    parent: str
    at: str
    version: str
    reused: list[PreviewCall]
    calls: list[PreviewCall]
    then: str
    edited: bool = False
    unsafe: list[str] = field(default_factory=list)

    @property
    def acknowledgements_needed(self) -> list[str]:
        return [c.key for c in self.calls if c.needs_acknowledgement]


class _Messages(BaseModel):
    """A model request's edited messages: the Messages API's shape, roles alternating."""

    model_config = ConfigDict(extra="forbid", strict=True)
    role: str
    content: str | list[dict[str, Any]]


def fork_preview(
    run_id: Any, operation_key: str, *, version: str | None = None, input: Any = None
) -> ForkPreview:
    """Which calls a fork of `run_id` from `operation_key` reuses and which it runs again.

    `version`: another registered version of the agent to continue on (default: the run's).
    `input`: the operation's edited input — a model request's messages (a list of
    {"role", "content"}) or a tool call's arguments (checked against the tool's schema).
    Raises, changing nothing, if the fork could not be made.
    """
    return _plan(run_id, operation_key, version=version, input=input).preview


def fork(
    run_id: Any,
    operation_key: str,
    *,
    actor: str,
    version: str | None = None,
    input: Any = None,
    acknowledge: Iterable[str] = (),
) -> Run:
    """Start a fork of `run_id` from `operation_key`: a new run in a new session.

    It replays the parent's recorded outcomes before that operation and runs from there, as
    `fork_preview` says. Every manual call it would make again must be acknowledged by key in
    `acknowledge`; otherwise ForkRefused names them and nothing is created. Both runs record
    the fork (parent, fork point) in their history.
    """
    actor = _actor(actor)
    if isinstance(acknowledge, str | bytes):
        raise InvalidInput("acknowledge is a list of operation keys, not one string")
    acknowledged = {_text(key, "acknowledged operation key", 200) for key in acknowledge}
    planned = _plan(run_id, operation_key, version=version, input=input)
    preview = planned.preview
    missing = [key for key in preview.acknowledgements_needed if key not in acknowledged]
    if missing:
        raise ForkRefused(
            "these manual calls would run again and are not safe to repeat; acknowledge each "
            "to fork anyway: " + ", ".join(missing)
        )
    return surgery_store.create_fork(
        planned.parent,
        actor=actor,
        version=planned.agent.version,
        fingerprint=planned.agent.fingerprint,
        at=preview.at,
        context=planned.context,
        reused=planned.reused,
        event_data={
            "version": planned.agent.version,
            "edited": preview.edited,
            "reused": len(planned.reused),
            "acknowledged": sorted(acknowledged & set(preview.acknowledgements_needed)),
        },
    )


@dataclass
class _Planned:
    parent: Run
    agent: Agent
    preview: ForkPreview
    reused: list[Operation]
    context: dict[str, Any]


def _parent(run_id: Any) -> Run:
    parent = _get(Run, run_id)
    if parent.status not in FORKABLE_STATUSES:
        raise ForkRefused(
            f"run {parent.pk} is {parent.status}: fork a run that ended, is blocked or is "
            "paused (pause it first)"
        )
    return parent


def _plan(run_id: Any, operation_key: Any, *, version: Any, input: Any) -> _Planned:
    key = _text(operation_key, "operation key", 200)
    if version is not None:
        version = _text(version, "version", 50)
    parent = _parent(run_id)
    ops = list(parent.operations.order_by("id"))
    at = next((op for op in ops if op.key == key), None)
    if at is None:
        raise NotFound(f"run {parent.pk} has no operation {key!r}")
    before = [op for op in ops if op.pk < at.pk]
    unsettled = [op.key for op in before if op.status not in _REUSABLE]
    if unsettled:
        raise ForkRefused(
            f"{', '.join(unsettled)} before {key} has no recorded outcome to reuse; "
            "fork from there instead"
        )
    agent = registry.registered_version(parent.agent, version or parent.version)
    if agent is None:
        raise NotFound(
            f"agent {parent.agent!r} has no registered version {version or parent.version!r} "
            "that matches the code"
        )
    parent_agent = registry.code_agent(parent.agent, parent.version)
    if parent_agent is None:
        raise ForkRefused(
            f"the code of {parent.agent} {parent.version} is gone: its messages cannot be "
            "rebuilt; restore it first"
        )
    by_key = {op.key: op for op in ops}
    step = _step(key)
    context: dict[str, Any] = {"seed": opening(parent, parent_agent)[1]}
    # The parent's own edits (a fork of a fork) up to this step are part of what is reused.
    edits = {k: v for k, v in parent.fork_context.get("messages", {}).items() if _step(k) <= step}
    # Rebuild what the parent sent at this step and check it against its log before anything
    # is reused: the fork replays the same messages, or it would block on a mismatch (V4).
    messages = _messages_before(by_key, context["seed"], edits, step)
    if digest(messages) != by_key[f"step-{step}/model"].input.get("messages_sha256"):
        raise ForkRefused(f"the messages of step {step} cannot be rebuilt from the log")
    reused = [_copy(op) for op in before]
    edited = input is not None
    if at.kind == OperationKind.MODEL:
        if edited:
            edits[key] = _edited_messages(input)
        calls = [_model_call(key, "the model is asked again" + (" (edited)" if edited else ""))]
    else:
        model = next(op for op in reused if op.key == f"step-{step}/model")
        response = ModelResponse.model_validate(model.result)
        use_id = key.rsplit("/", 1)[-1]
        if edited:
            model.result = _with_arguments(response, agent, at.name, use_id, input)
            response = ModelResponse.model_validate(model.result)
        uses = response.tool_uses
        later = uses[[u.id for u in uses].index(use_id) :]
        calls = [_tool_call(agent, step, use, by_key) for use in later]
        if step < agent.max_steps:
            calls.append(_model_call(f"step-{step + 1}/model", "the model is asked again"))
    if edits:
        context["messages"] = edits
    _as_built_by(agent, reused)
    preview = ForkPreview(
        parent=str(parent.pk),
        at=key,
        version=agent.version,
        reused=[
            PreviewCall(key=op.key, kind=op.kind, name=op.name, plan=REUSED, policy=op.policy)
            for op in reused
        ],
        calls=calls,
        then="after that the model decides: every call it asks for is new work of the fork, "
        "under its tool's recovery policy and approval rules",
        edited=edited,
        unsafe=[c.key for c in calls if not c.safe],
    )
    return _Planned(parent=parent, agent=agent, preview=preview, reused=reused, context=context)


_REUSABLE = (OperationStatus.COMPLETED, OperationStatus.REJECTED)


def _as_built_by(agent: Agent, reused: list[Operation]) -> None:
    """Reused model requests are replayed under the fork's version: their saved input becomes
    what that version builds for the same messages, so the engine's replay check (V4) holds."""
    _tools, static = request_parts(agent)
    for op in reused:
        if op.kind == OperationKind.MODEL:
            op.input = {
                **static,
                "tools": list(static["tools"]),
                "message_count": op.input["message_count"],
                "messages_sha256": op.input["messages_sha256"],
            }
            op.input_hash = digest(op.input)


def _copy(op: Operation) -> Operation:
    """A copy of a recorded outcome for the fork (no tokens were spent on it: no usage)."""
    return Operation(
        key=op.key,
        kind=op.kind,
        name=op.name,
        policy=op.policy,
        status=op.status,
        input=op.input,
        input_hash=op.input_hash,
        result=op.result,
        is_error=op.is_error,
        error=op.error,
        usage=None,
        attempts=op.attempts,
        intent_at=op.intent_at,
        outcome_at=op.outcome_at,
    )


def _step(key: str) -> int:
    return int(key.split("/", 1)[0].removeprefix("step-"))


def _model_call(key: str, note: str) -> PreviewCall:
    return PreviewCall(
        key=key,
        kind=OperationKind.MODEL,
        name="model",
        plan="rerun",
        note=f"{note}: side-effect free, costs tokens",
    )


def _tool_call(agent: Agent, step: int, use: ToolUseBlock, by_key: dict[str, Operation]) -> Any:
    key = f"step-{step}/tool/{use.id}"
    parent_op = by_key.get(key)
    # Made again only if the parent made it (or may have): a refused approval had no effect.
    again = parent_op is not None and parent_op.status != OperationStatus.REJECTED
    plan = "rerun" if again else "new"
    tool = agent.tool_named(use.name)
    if tool is None:
        return PreviewCall(key, "tool", use.name, plan, note="unknown tool: the model is told")
    args = validate_input(tool, use.input)
    if isinstance(args, str):
        return PreviewCall(key, "tool", use.name, plan, note=f"{args}: the model is told")
    if tool.is_question:
        return PreviewCall(
            key, "tool", use.name, plan, note="asks the operator again", needs_person=True
        )
    policy = agent.policy_for(tool)
    approval = tool.needs_approval(args)
    note = _NOTES[policy] if again else f"not made by the parent ({policy})"
    if approval:
        note += " Needs approval again before it runs."
    return PreviewCall(
        key=key,
        kind="tool",
        name=tool.name,
        plan=plan,
        policy=policy,
        safe=not again or policy == "safe",
        note=note,
        needs_acknowledgement=again and policy == "manual",
        needs_person=approval,
    )


def _edited_messages(value: Any) -> list[dict[str, Any]]:
    """Edited messages for a model request: valid for the Messages API, or InvalidInput."""
    if not isinstance(value, list) or not value:
        raise InvalidInput("the edited input of a model request is a non-empty list of messages")
    messages: list[dict[str, Any]] = []
    for index, message in enumerate(value):
        try:
            parsed = _Messages.model_validate(message)
        except ValidationError as exc:
            raise InvalidInput(f"message {index}: {exc.errors()[0]['msg']}") from None
        if parsed.role not in ("user", "assistant"):
            raise InvalidInput(f"message {index}: the role must be user or assistant")
        if not parsed.content:
            raise InvalidInput(f"message {index}: the content is empty")
        append(messages, parsed.role, parsed.content)
    if messages[0]["role"] != "user" or messages[-1]["role"] != "user":
        raise InvalidInput("the messages must start and end with a user message")
    jsonvalues.check(messages, what="messages")
    return messages


def _with_arguments(
    response: ModelResponse, agent: Agent, name: str, use_id: str, arguments: Any
) -> dict[str, Any]:
    """The recorded model response with one tool call's arguments replaced (validated)."""
    tool = agent.tool_named(name)
    if tool is None:
        raise InvalidInput(f"{agent.name} {agent.version} has no tool {name!r}")
    if not isinstance(arguments, dict):
        raise InvalidInput(f"the arguments of {name} must be an object")
    args = validate_input(tool, arguments)
    if isinstance(args, str):
        raise InvalidInput(args)
    checked = args.model_dump(mode="json")
    jsonvalues.check(checked, what="arguments")
    result = response.model_dump(mode="json")
    for block in result["content"]:
        if block.get("type") == "tool_use" and block.get("id") == use_id:
            block["input"] = checked
    return dict(jsonvalues.normalized(result))


def _messages_before(
    ops: dict[str, Operation],
    seed: list[dict[str, Any]],
    edits: dict[str, Any],
    step: int,
) -> list[dict[str, Any]]:
    """The messages a run sent with its model request of `step`, rebuilt from its log `ops` as
    the engine builds them (from its seed, with its own fork's edits)."""
    messages = [dict(m) for m in seed]
    nudged = False
    for each in range(1, step):
        if edits.get(f"step-{each}/model") is not None:
            messages = list(edits[f"step-{each}/model"])
        response = ModelResponse.model_validate(ops[f"step-{each}/model"].result)
        content = visible_content(response)
        if response.stop_reason == "pause_turn":
            append(messages, "assistant", content)
            continue
        if not response.tool_uses:
            if not has_answer(response) and not nudged:
                nudged = True
                append(messages, "user", [text_block(NUDGE)])
            continue
        append(messages, "assistant", content)
        results = []
        for use in response.tool_uses:
            op = ops[f"step-{each}/tool/{use.id}"]
            results.append(tool_result_block(use.id, op.result, op.is_error))
        append(messages, "user", results)
    if edits.get(f"step-{step}/model") is not None:
        messages = list(edits[f"step-{step}/model"])
    return messages


def messages_at(run_id: Any, operation_key: str) -> list[dict[str, Any]]:
    """The messages a run sent with one of its model requests, rebuilt from its log (what an
    operator edits for a fork)."""
    key = _text(operation_key, "operation key", 200)
    run = _get(Run, run_id)
    ops = {op.key: op for op in run.operations.all()}
    op = ops.get(key)
    if op is None or op.kind != OperationKind.MODEL:
        raise NotFound(f"run {run.pk} has no model request {key!r}")
    agent = registry.code_agent(run.agent, run.version)
    if agent is None:
        raise ForkRefused(f"the code of {run.agent} {run.version} is gone; restore it first")
    messages = _messages_before(
        ops, opening(run, agent)[1], run.fork_context.get("messages", {}), _step(key)
    )
    if digest(messages) != op.input.get("messages_sha256"):
        raise ForkRefused(f"the messages of {key} cannot be rebuilt from the log")
    return messages


__all__ = [
    "FORKABLE_STATUSES",
    "ForkPreview",
    "PreviewCall",
    "fork",
    "fork_preview",
    "messages_at",
    "pause",
    "pause_problem",
    "resume_problem",
    "resume_run",
]
