"""The messages a run shows the model, rebuilt from the log alone."""

from __future__ import annotations

import json
from typing import Any

from agentops.models import Operation, OperationKind, OperationStatus, Run, RunStatus


def tool_result_block(tool_use_id: str, result: Any, is_error: bool) -> dict[str, Any]:
    """A tool's recorded result as the model sees it."""
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": json.dumps(result, ensure_ascii=False, sort_keys=True),
        "is_error": is_error,
    }


def session_history(run: Run) -> list[dict[str, Any]]:
    """The transcript of the completed runs before `run` in its session, in order."""
    earlier = Run.objects.filter(
        session_id=run.session_id, seq__lt=run.seq, status=RunStatus.COMPLETED
    ).order_by("seq")
    return [
        message
        for transcript in earlier.values_list("transcript", flat=True)
        for message in transcript
    ]


def run_messages(run: Run, operations: list[Operation] | None = None) -> list[dict[str, Any]]:
    """This run's own messages so far: its input, then each answered step, for display."""
    if run.status == RunStatus.COMPLETED and run.transcript:
        return list(run.transcript)
    ops = {op.key: op for op in (operations if operations is not None else run.operations.all())}
    messages: list[dict[str, Any]] = [{"role": "user", "content": run.input}]
    step = 1
    while (model := ops.get(f"step-{step}/model")) and model.status == OperationStatus.COMPLETED:
        content = model.result["content"]
        messages.append({"role": "assistant", "content": content})
        results = []
        for block in content:
            if block.get("type") != "tool_use":
                continue
            tool = ops.get(f"step-{step}/tool/{block['id']}")
            if (
                tool is None
                or tool.kind != OperationKind.TOOL
                or tool.status == OperationStatus.STARTED
            ):
                break
            results.append(tool_result_block(block["id"], tool.result, tool.is_error))
        if results:
            messages.append({"role": "user", "content": results})
        step += 1
    return messages
