"""The messages a run shows the model, rebuilt from the log alone.

Every list of messages built here is one the Messages API accepts: roles alternate (a message
of the same role as the one before is merged into it, as the API would combine them), every
tool_use is answered by a tool_result, and no message is empty (S3).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from runtime import jsonvalues, keys
from runtime.agents import ToolDurabilityError
from runtime.llm import ModelResponse
from runtime.models import Event, EventKind, Operation, OperationStatus, Run, RunStatus

# What the engine says, once per run, when the model ends its turn with nothing to show: the
# Messages API's advice for an empty end_turn is a new user message asking it to go on, never
# the same request again.
NUDGE = "Please continue."
# The runs a later run's history is made of: every finished one (S4).
ENDED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)
# A tool call whose result the model saw.
ANSWERED = (OperationStatus.COMPLETED, OperationStatus.REJECTED)


def tool_result_block(tool_use_id: str, result: Any, is_error: bool) -> dict[str, Any]:
    """A tool's recorded result as the model sees it."""
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": jsonvalues.shown(result),
        "is_error": is_error,
    }


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def visible_content(response: ModelResponse) -> list[dict[str, Any]]:
    """The response's blocks as they are sent back: text blocks without text are dropped (the
    API refuses them); thinking blocks stay, unchanged, with their signatures (S6)."""
    return [
        block.model_dump()
        for block in response.content
        if not (block.type == "text" and not block.text.strip())
    ]


def has_answer(response: ModelResponse) -> bool:
    return bool(response.text.strip())


def append(messages: list[dict[str, Any]], role: str, content: str | list[dict[str, Any]]) -> None:
    """Add a message, merged into the last one when it has the same role; nothing if empty."""
    if not content:
        return
    if messages and messages[-1]["role"] == role:
        last = messages[-1]
        messages[-1] = {"role": role, "content": [*_blocks(last["content"]), *_blocks(content)]}
    else:
        messages.append({"role": role, "content": content})


def _blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [text_block(content)] if isinstance(content, str) else list(content)


def joined(parts: Iterable[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Message lists one after the other, as one valid list."""
    messages: list[dict[str, Any]] = []
    for part in parts:
        for message in part:
            append(messages, message["role"], message["content"])
    return messages


# --- a run's messages from its log ---------------------------------------------------------------


def _unfinished_result(op: Operation | None, name: str, tool_use_id: str, how: str) -> Any:
    """The result a later run is shown for a call its ended run never finished."""
    if op is None:
        return {"error": f"not run: the run was {how} before this call ran"}
    # Its intent was written, its outcome never was: it may have run.
    return ToolDurabilityError(name, tool_use_id).to_result()


def logged_messages(
    run_input: str, ops: dict[str, Operation], *, ended: str = ""
) -> list[dict[str, Any]]:
    """The messages a run sent and received, rebuilt step by step as the engine built them.

    `ended` ("failed", "cancelled") settles the last step of a run that ended without an
    answer: a call it never finished is answered by an error result saying so. Without it the
    messages stop at the first call without an outcome (a run in progress, for display).
    """
    messages: list[dict[str, Any]] = []
    append(messages, "user", run_input)
    nudged = False
    step = 1
    while (model := ops.get(keys.model_key(step))) and model.status == OperationStatus.COMPLETED:
        response = ModelResponse.model_validate(model.result)
        content = visible_content(response)
        if response.stop_reason == "pause_turn":
            append(messages, "assistant", content)
            step += 1
            continue
        uses = response.tool_uses
        if not uses:
            if has_answer(response):
                append(messages, "assistant", content)
            elif not nudged:
                nudged = True
                append(messages, "user", [text_block(NUDGE)])
                step += 1
                continue
            break
        append(messages, "assistant", content)
        results = []
        for use in uses:
            op = ops.get(keys.tool_key(step, use.id))
            if op is not None and op.status in ANSWERED:
                results.append(tool_result_block(use.id, op.result, op.is_error))
            elif ended:
                result = _unfinished_result(op, use.name, use.id, ended)
                results.append(tool_result_block(use.id, result, True))
            else:
                break
        append(messages, "user", results)
        if len(results) < len(uses):
            break
        step += 1
    return messages


def _ending(run: Run, cancel_reason: str) -> str:
    if run.status == RunStatus.FAILED:
        return f"(This request ended without an answer: it failed: {run.error})"
    why = f": {cancel_reason}" if cancel_reason else ""
    return f"(This request ended without an answer: an operator cancelled it{why})"


def session_history(run: Run, *, runs: int | None = None) -> list[dict[str, Any]]:
    """What the ended runs before `run` in its session did, in order (S4); the last `runs` of
    them when given. A completed run contributes its transcript; a failed or cancelled one, its
    input, the calls it made with their results, and why it ended."""
    earlier = Run.objects.filter(session_id=run.session_id, seq__lt=run.seq, status__in=ENDED)
    if runs is not None:
        earlier = earlier.order_by("-seq")[:runs]
    chosen = sorted(earlier, key=lambda each: each.seq)
    unanswered = [each.pk for each in chosen if each.status != RunStatus.COMPLETED]
    ops: dict[Any, dict[str, Operation]] = {pk: {} for pk in unanswered}
    reasons: dict[Any, str] = {}
    if unanswered:
        for op in Operation.objects.filter(run_id__in=unanswered):
            ops[op.run_id][op.key] = op
        for run_id, data in Event.objects.filter(
            run_id__in=unanswered, kind=EventKind.CANCELLED
        ).values_list("run_id", "data"):
            reasons[run_id] = str(data.get("reason", ""))
    parts = []
    for each in chosen:
        if each.status == RunStatus.COMPLETED:
            parts.append(each.transcript)
            continue
        messages = logged_messages(each.input, ops[each.pk], ended=each.status)
        append(messages, "user", [text_block(_ending(each, reasons.get(each.pk, "")))])
        parts.append(messages)
    return joined(parts)


def run_messages(run: Run, operations: list[Operation] | None = None) -> list[dict[str, Any]]:
    """This run's own messages so far: its input, then each answered step, for display."""
    if run.status == RunStatus.COMPLETED and run.transcript:
        return list(run.transcript)
    ops = operations if operations is not None else list(run.operations.all())
    return logged_messages(run.input, {op.key: op for op in ops})
