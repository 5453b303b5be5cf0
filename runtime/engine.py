"""The engine: claim a run, replay its log, and advance it with two writes per call.

`advance(run_id)` is the one entry point. It claims the run (or does nothing), checks the
agent version, and walks the turn loop from the start. Every model request and tool call has
a deterministic key; a call whose outcome is in the log is replayed from it, a call with an
intent but no outcome goes through its recovery policy, and a new call is run between an
intent write and an outcome write. The loop stops when the run completes, fails or needs a
person; each of those is one fenced transition.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection
from pydantic import BaseModel, ValidationError

from agentops.models import (
    AttentionReason,
    Interaction,
    InteractionKind,
    InteractionStatus,
    Operation,
    OperationKind,
    OperationStatus,
    Run,
    RunStatus,
)
from runtime import clock, faults, jsonvalues, registry, store, tracing
from runtime.agents import Agent, Tool, ToolContext, digest, validate_input
from runtime.errors import InvalidInput, LeaseLost, ModelError
from runtime.llm import ModelRequest, ModelResponse, ToolSpec, ToolUseBlock
from runtime.transcript import session_history, tool_result_block

log = logging.getLogger(__name__)

# Without a ModelRetry, a model request interrupted by crashes is re-run at most this often.
CRASHED_MODEL_ATTEMPTS = 3


class _Stop(Exception):
    """The run was moved out of `running` (done, failed, waiting, blocked); stop the loop."""


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


def advance(run_id: Any, *, owner: str | None = None) -> bool:
    """Claim `run_id` and advance it as far as it goes. False if it was not claimable.

    Safe to call any number of times from any number of workers: the claim decides who works.
    """
    run = store.claim(run_id, owner or worker_name())
    if run is None:
        return False
    try:
        with _Heartbeat(run), tracing.run_span(run):
            _Turn(run).execute()
    except LeaseLost:
        log.warning("run %s: lease lost, stopping without further writes", run_id)
    except _Stop:
        pass
    return True


class _Heartbeat:
    """Renews the lease every third of its length while a call runs long."""

    def __init__(self, run: Run) -> None:
        self._run = run
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True, name=f"heartbeat-{run.pk}")

    def __enter__(self) -> _Heartbeat:
        # Off in in-process tests, whose test transaction the heartbeat's connection cannot see.
        if settings.AGENTOPS_HEARTBEAT:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()

    def _beat(self) -> None:
        interval = store.lease_seconds() / 3
        try:
            while not self._stopped.wait(interval):
                try:
                    store.renew(self._run)
                except LeaseLost:
                    return
                except Exception:  # a dropped connection: the next beat tries again
                    log.exception("run %s: heartbeat failed", self._run.pk)
                    close_old_connections()
        finally:
            connection.close()


class _Turn:
    def __init__(self, run: Run) -> None:
        self.run = run
        self.ops: dict[str, Operation] = {op.key: op for op in run.operations.all()}
        self.interactions: dict[str, Interaction] = {
            i.operation_key: i for i in run.interactions.all()
        }
        # What every model request of this turn shares (tool schemas and digests): built once.
        self._request_parts: tuple[list[ToolSpec], dict[str, Any]] | None = None

    # --- the loop ----------------------------------------------------------------------------

    def execute(self) -> None:
        agent = self._checked_agent()
        # A session's first run has no earlier transcript: skip the query.
        history = session_history(self.run) if self.run.seq > 1 else []
        messages: list[dict[str, Any]] = [*history, {"role": "user", "content": self.run.input}]
        for step in range(1, agent.max_steps + 1):
            response = self._model_call(agent, step, messages)
            messages.append(
                {"role": "assistant", "content": [b.model_dump() for b in response.content]}
            )
            if not response.tool_uses:
                self._finish(
                    RunStatus.COMPLETED,
                    "completed",
                    output=response.text,
                    transcript=messages[len(history) :],
                    steps=step,
                )
            results = [self._tool_call(agent, step, use) for use in response.tool_uses]
            messages.append({"role": "user", "content": results})
        self._finish(
            RunStatus.FAILED,
            "failed",
            error=f"step budget exhausted: {agent.max_steps} model requests without a final answer",
            steps=agent.max_steps,
        )

    def _finish(self, status: str, kind: str, **fields: Any) -> None:
        data = {"error": fields["error"]} if "error" in fields else {}
        store.transition(self.run, status, kind, data=data, finished_at=clock.now(), **fields)
        raise _Stop

    def _block(self, reason: str, detail: dict[str, Any], key: str = "") -> None:
        store.transition(
            self.run,
            RunStatus.NEEDS_ATTENTION,
            "blocked",
            key=key,
            data={"reason": reason, **detail},
            attention_reason=reason,
            attention_detail=detail,
            blocked_operation=key,
        )
        raise _Stop

    # --- versions ----------------------------------------------------------------------------

    def _checked_agent(self) -> Agent:
        run = self.run
        problem = registry.version_problem(run.agent, run.version, run.fingerprint)
        if problem is not None:
            self._block(problem.reason, problem.detail())
        agent = registry.code_agent(run.agent, run.version)
        assert agent is not None
        return agent

    def _replayable(self, key: str, fresh: dict[str, Any], fresh_hash: str) -> Operation | None:
        """The logged operation for `key`, after checking it was made from the same input."""
        op = self.ops.get(key)
        if op is not None and op.input_hash != fresh_hash:
            self._block(
                AttentionReason.INPUT_MISMATCH,
                {
                    "message": f"the saved input of {key} differs from what the code builds now",
                    "differences": [{"part": key, "saved": op.input, "current": fresh}],
                },
                key=key,
            )
        return op

    # --- model requests ----------------------------------------------------------------------

    def _model_call(self, agent: Agent, step: int, messages: list[dict[str, Any]]) -> ModelResponse:
        key = f"step-{step}/model"
        tools, static_input = self._static_request_parts(agent)
        request = ModelRequest(
            model=agent.model,
            system=agent.instructions,
            messages=messages,
            tools=tools,
            max_tokens=agent.max_tokens,
        )
        # The messages come from the log itself; their digest is enough to detect divergence.
        saved_input = {
            **static_input,
            "tools": list(static_input["tools"]),
            "message_count": len(messages),
            "messages_sha256": digest(messages),
        }
        input_hash = digest(saved_input)
        op = self._replayable(key, saved_input, input_hash)
        if op is not None and op.status == OperationStatus.COMPLETED:
            return ModelResponse.model_validate(op.result)
        limit = agent.model_retry.max_attempts if agent.model_retry else CRASHED_MODEL_ATTEMPTS
        if op is not None and op.status == OperationStatus.STARTED and op.attempts >= limit:
            self._finish(
                RunStatus.FAILED,
                "failed",
                error=f"model request {key} was interrupted {op.attempts} times",
            )
        faults.reach("before_intent", self.run, key, "model")
        op = store.write_intent(
            self.run,
            op,
            key=key,
            kind=OperationKind.MODEL,
            name=agent.model,
            policy="",
            input=saved_input,
            input_hash=input_hash,
        )
        self.ops[key] = op
        faults.reach("after_intent", self.run, key, "model")
        try:
            with tracing.model_span(self.run, key, request) as span:
                response = registry.model_client(agent).complete(
                    request, operation_id=_op_id(self.run, key)
                )
                span.model_response(response)
            # Text the database cannot store (NUL, lone surrogates) fails like bad output.
            jsonvalues.check(response.model_dump(mode="json"), what="model output")
        except LeaseLost:
            raise
        except Exception as exc:  # every error inside the model call is the model's
            message = exc.message if isinstance(exc, ModelError) else f"{type(exc).__name__}: {exc}"
            store.write_outcome(self.run, op, status=OperationStatus.FAILED, error=message)
            self._after_model_error(agent, op, message)
        faults.reach("after_handler", self.run, key, "model")
        store.write_outcome(
            self.run,
            op,
            status=OperationStatus.COMPLETED,
            result=response.model_dump(mode="json"),
            usage=response.usage.model_dump(),
        )
        faults.reach("after_outcome", self.run, key, "model")
        return response

    def _static_request_parts(self, agent: Agent) -> tuple[list[ToolSpec], dict[str, Any]]:
        """The tool specs and the step-independent part of the saved input, once per turn:
        rebuilding the JSON schemas for every step cost more than the step's durable writes."""
        if self._request_parts is None:
            tools = [t.model_spec() for t in agent.tools]
            self._request_parts = (
                tools,
                {
                    "model": agent.model,
                    "system_sha256": digest(agent.instructions),
                    "tools": [t.name for t in agent.tools],
                    "tools_sha256": digest([t.model_dump() for t in tools]),
                    "max_tokens": agent.max_tokens,
                },
            )
        return self._request_parts

    def _after_model_error(self, agent: Agent, op: Operation, message: str) -> None:
        policy = agent.model_retry
        if policy is None or op.attempts >= policy.max_attempts:
            tries = f" after {op.attempts} attempts" if policy else ""
            self._finish(RunStatus.FAILED, "failed", error=f"model error{tries}: {message}")
        assert policy is not None
        delay = policy.delay_after(op.attempts)
        due = clock.now() + dt.timedelta(seconds=delay)
        store.transition(
            self.run,
            RunStatus.RETRY_WAIT,
            "retry_scheduled",
            key=op.key,
            data={
                "attempt": op.attempts,
                "max_attempts": policy.max_attempts,
                "next_attempt_at": due.isoformat(),
                "error": message,
            },
            next_attempt_at=due,
            error=message,
        )
        raise _Stop

    # --- tool calls --------------------------------------------------------------------------

    def _tool_call(self, agent: Agent, step: int, use: ToolUseBlock) -> dict[str, Any]:
        key = f"step-{step}/tool/{use.id}"
        saved_input = {"tool": use.name, "arguments": use.input}
        input_hash = digest(saved_input)
        op = self._replayable(key, saved_input, input_hash)
        if op is not None and op.status in (OperationStatus.COMPLETED, OperationStatus.REJECTED):
            return tool_result_block(use.id, op.result, op.is_error)

        tool = agent.tool_named(use.name)
        args = validate_input(tool, use.input) if tool else f"unknown tool {use.name!r}"
        if tool is None or isinstance(args, str):
            # The model's mistake is a result it sees, not a call: nothing runs.
            result = {"error": args}
            store.record(
                self.run,
                key=key,
                name=use.name,
                policy="",
                input=saved_input,
                input_hash=input_hash,
                status=OperationStatus.COMPLETED,
                result=result,
                is_error=True,
            )
            return tool_result_block(use.id, result, True)
        policy = agent.policy_for(tool)

        if tool.is_question or tool.needs_approval(args):
            decided = self._decision(tool, key, args)
            if decided is not None:
                result, status, is_error = decided
                store.record(
                    self.run,
                    key=key,
                    name=tool.name,
                    policy=policy,
                    input=saved_input,
                    input_hash=input_hash,
                    status=status,
                    result=result,
                    is_error=is_error,
                )
                return tool_result_block(use.id, result, is_error)

        if op is not None:  # intent committed, outcome missing: the recovery policy decides
            if policy == "manual":
                self._block(
                    AttentionReason.UNCERTAIN_OPERATION,
                    {
                        "message": f"{tool.name} may have run: its intent was written but its "
                        "outcome was not. Check the external system with the operation id and "
                        "supply the verified result, or cancel the run.",
                        "operation_id": op.operation_id,
                        "tool": tool.name,
                    },
                    key=key,
                )
            if policy == "report":
                result = {
                    "kind": "tool-durability-error",
                    "error": f"Tool {tool.name!r} (call {use.id}) was requested but its execution "
                    "did not complete durably: it may have run. Check before trying again.",
                    "toolName": tool.name,
                    "toolCallId": use.id,
                }
                store.write_outcome(
                    self.run, op, status=OperationStatus.COMPLETED, result=result, is_error=True
                )
                return tool_result_block(use.id, result, True)
            # safe and idempotent: run again, with the same operation id.
        faults.reach("before_intent", self.run, key, tool.name)
        op = store.write_intent(
            self.run,
            op,
            key=key,
            kind=OperationKind.TOOL,
            name=tool.name,
            policy=policy,
            input=saved_input,
            input_hash=input_hash,
        )
        self.ops[key] = op
        faults.reach("after_intent", self.run, key, tool.name)
        with tracing.tool_span(self.run, op) as span:
            result, is_error = self._invoke(tool, args, op)
            span.tool_outcome(is_error)
        faults.reach("after_handler", self.run, key, tool.name)
        store.write_outcome(
            self.run, op, status=OperationStatus.COMPLETED, result=result, is_error=is_error
        )
        faults.reach("after_outcome", self.run, key, tool.name)
        return tool_result_block(use.id, result, is_error)

    def _invoke(self, tool: Tool, args: BaseModel, op: Operation) -> tuple[Any, bool]:
        """Run the handler; an exception it raises is an outcome the model sees."""
        assert tool.handler is not None
        context = _context(self.run, op)
        try:
            value = tool.handler(args, context)
            faults.reach("in_handler", self.run, op.key, tool.name)
            result = tool.validate_output(value)
            jsonvalues.check(result, what=f"result of {tool.name}")
            return result, False
        except ValidationError as exc:
            return {"error": f"{tool.name} returned output that fails its schema: {exc}"}, True
        except InvalidInput as exc:
            return {"error": exc.message}, True
        except Exception as exc:
            return {"error": str(exc) or type(exc).__name__, "type": type(exc).__name__}, True

    def _decision(self, tool: Tool, key: str, args: BaseModel) -> tuple[Any, str, bool] | None:
        """For a call that needs a person: the decided result, None to proceed, or wait."""
        interaction = self.interactions.get(key)
        if interaction is None:
            if tool.is_question:
                kind, payload = InteractionKind.QUESTION, args.model_dump(mode="json")
            else:
                kind, payload = (
                    InteractionKind.TOOL_APPROVAL,
                    {"arguments": args.model_dump(mode="json")},
                )
            store.request_interaction(
                self.run, key=key, kind=kind, tool_name=tool.name, payload=payload
            )
            raise _Stop
        if interaction.status != InteractionStatus.ANSWERED:
            # Claimed while a person still has to answer: should not happen; wait again.
            store.transition(self.run, RunStatus.WAITING, "waiting", key=key)
            raise _Stop
        response = interaction.response or {}
        if tool.is_question:
            return (
                tool.validate_output({"answer": response["answer"]}),
                OperationStatus.COMPLETED,
                False,
            )
        if not response.get("approved"):
            rejection = {
                "rejected": True,
                "reason": response.get("reason", ""),
                "by": interaction.responded_by,
            }
            return rejection, OperationStatus.REJECTED, True
        return None


def _op_id(run: Run, key: str) -> str:
    return f"{run.pk}:{key}"


def _context(run: Run, op: Operation) -> ToolContext:
    return ToolContext(
        run_id=str(run.pk), operation_key=op.key, operation_id=op.operation_id, attempt=op.attempts
    )
