"""The engine: claim a run, replay its log, and advance it with two writes per call.

`advance(run_id)` is the one entry point. It claims the run (or does nothing), checks the
agent version, and walks the turn loop from the start. Every model request and tool call has
a deterministic key; a call whose outcome is in the log is replayed from it, a call with an
intent but no outcome goes through its recovery policy, and a new call is run between an
intent write and an outcome write. A call's outcome is held and committed with the next call's
intent (or the run's move), one commit per call (runtime/store/worker.py). The loop stops
when the run completes, fails or needs a person; each of those is one fenced transition.

Nothing loops unbounded (C13, C14): every claim counts as a crash until it ends in such a
transition, and a run whose claims keep crashing (a dead worker, an unexpected exception) goes
to needs_attention; an operation re-run after crashes has an attempt budget.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
import os
import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from django.conf import settings
from django.db import connection, transaction
from pydantic import BaseModel, ValidationError

from runtime import (
    clock,
    faults,
    heartbeat,
    jsonvalues,
    keys,
    registry,
    signals,
    store,
    tracing,
)
from runtime.agents import (
    Agent,
    ListDigest,
    Tool,
    ToolContext,
    ToolDurabilityError,
    digest,
    validate_input,
)
from runtime.errors import InvalidInput, LeaseLost, ModelError, PauseRequested, PromptTooLong
from runtime.llm import ModelRequest, ModelResponse, ToolSpec, ToolUseBlock
from runtime.models import (
    ApprovalReceipt,
    ApprovalRule,
    AttentionReason,
    ErrorKind,
    EventKind,
    Interaction,
    InteractionKind,
    InteractionStatus,
    Operation,
    OperationKind,
    OperationStatus,
    Run,
    RunStatus,
    WorkItem,
)
from runtime.policy import (
    QUESTION,
    Policy,
    changes,
    edited_result,
    policy_for,
    receipt,
    receipt_differences,
    rules_by_tool,
)
from runtime.store import surgery as surgery_store
from runtime.transcript import (
    NUDGE,
    append,
    has_answer,
    joined,
    session_history,
    text_block,
    tool_result_block,
    visible_content,
)

log = logging.getLogger(__name__)

# Stop reasons that end the turn without an answer (S1, S2), and PromptTooLong's reason: the run
# goes to needs_attention with the reason said plainly; an operator may retry (ask again). Why
# not continue on our own: a max_tokens answer may end inside a tool call whose arguments are cut
# off, and asking again costs as much as the first request and may truncate the same way; a
# person who sees the reason can retry, raise the limit in a new version, or cancel. The
# response is recorded as a failed request, so a retry asks again instead of replaying it.
MODEL_STOPS = {
    "max_tokens": "the model's answer was cut off at the agent's max_tokens: it is incomplete, "
    "so it was not used and none of its tool calls ran. Retry to ask again, or raise max_tokens "
    "in a new version of the agent.",
    "refusal": "the model declined to answer this request. Retry to ask again, or cancel the run.",
    "model_context_window_exceeded": "the model's answer filled its context window and is "
    "incomplete, so it was not used. Retry to ask again, or bound the agent's history "
    "(history_runs) in a new version.",
    "prompt_too_long": "the conversation no longer fits the model's context window (prompt too "
    "long), so the model was not asked. Retrying will fail the same way until the agent's "
    "history is bounded (history_runs or compact_history, in a new version); or cancel the run.",
}


def crash_loop_claims() -> int:
    return int(settings.AGENTOPS_CRASH_LOOP_CLAIMS)


def operation_attempts() -> int:
    return int(settings.AGENTOPS_OPERATION_ATTEMPTS)


class _Stop(Exception):
    """The run was moved out of `running` (done, failed, waiting, blocked); stop the loop."""


class _ReceiptUsed(Exception):
    """An approval's receipt was used by an intent already: its transaction is rolled back."""


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
    except LeaseLost as lost:
        log.warning("run %s: lease lost, stopping without further writes", run_id)
        signals.refused(run, lost)
    except _Stop:
        pass
    except Exception as exc:  # a bug or a failed checkpoint: never leave the run `running`
        log.exception("run %s: the claim ended in an unexpected exception", run_id)
        _record_crash(run, exc)
    # A pause asked for while the claim ended elsewhere (waiting, a retry timer, a block) takes
    # effect now, before anyone can act on that state.
    surgery_store.settle_pause(run.pk)
    return True


def _record_crash(run: Run, exc: Exception) -> None:
    """After an unexpected exception: try again soon, or stop as a crash loop (C13)."""
    crash = describe_crash(exc)
    try:
        if run.crashed_claims >= crash_loop_claims():
            _crash_loop(run, crash, run.crashed_claims)
        else:
            # Due at once: the sweep hands it over again, which paces the loop.
            now = clock.now()
            store.transition(
                run,
                RunStatus.RETRY_WAIT,
                EventKind.RETRY_SCHEDULED,
                data={
                    "reason": "crash",
                    "error": crash,
                    "crashed_claims": run.crashed_claims,
                    "next_attempt_at": now.isoformat(),
                },
                next_attempt_at=now,
                error=crash,
                last_crash=crash,
                crashed_claims=run.crashed_claims,
            )
    except (_Stop, LeaseLost):  # recorded; or the run is no longer this claim's to record
        pass
    except Exception:  # the database is gone too: the lease expires, the next claim counts it
        log.exception("run %s: could not record the crash", run.pk)


def _crash_loop(run: Run, crash: str, claims: int) -> None:
    """Stop the run as a crash loop after `claims` crashed claims. The block ends this claim
    cleanly (the count is reset), so an operator's retry gets a fresh budget."""
    detail = {
        "message": f"{claims} claims in a row ended in a crash (the last: {crash}); nothing "
        "more runs until an operator retries or cancels the run",
        "claims": claims,
        "last_crash": crash,
    }
    store.transition(
        run,
        RunStatus.NEEDS_ATTENTION,
        EventKind.BLOCKED,
        data={"reason": AttentionReason.CRASH_LOOP, **detail},
        attention_reason=AttentionReason.CRASH_LOOP,
        attention_detail=detail,
        blocked_operation="",
        last_crash=crash,
    )
    raise _Stop


_CREDENTIALS_IN_URL = re.compile(r"(://[^/\s:@]+:)[^/\s@]+@")
_SECRET_NAMES = re.compile(r"KEY|SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)


def describe_crash(exc: BaseException) -> str:
    """The exception's type and message for the run's record: bounded, and with every secret
    the process knows (settings, environment, database password, URL credentials) masked."""
    text = f"{type(exc).__name__}: {exc}"
    secrets = [settings.SECRET_KEY, connection.settings_dict.get("PASSWORD") or ""]
    secrets += [value for name, value in os.environ.items() if _SECRET_NAMES.search(name)]
    for secret in sorted({s for s in secrets if len(s) >= 6}, key=len, reverse=True):
        text = text.replace(secret, "[redacted]")
    text = _CREDENTIALS_IN_URL.sub(r"\1[redacted]@", text)
    return text if len(text) <= 2000 else text[:2000] + "…"


class _Heartbeat:
    """The claim's lease renewed by the process's heartbeat while the claim lasts."""

    def __init__(self, run: Run) -> None:
        self._run = run
        self._token: int | None = None

    def __enter__(self) -> _Heartbeat:
        # Off in in-process tests, whose test transaction the heartbeat's connection cannot see.
        if settings.AGENTOPS_HEARTBEAT:
            self._token = heartbeat.HEARTBEATS.add(self._run)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            heartbeat.HEARTBEATS.remove(self._token)


class _Turn:
    def __init__(self, run: Run) -> None:
        self.run = run
        self.run_id = str(run.pk)  # a uuid's text, built once: each call's ids begin with it
        # A run's first claim has logged nothing yet: the claim says so (store.claim), and
        # saves the two reads.
        self.ops: dict[str, Operation] = {}
        if getattr(run, "has_operations", True):
            self.ops = {op.key: op for op in run.operations.all()}
        self.interactions: dict[str, Interaction] = {}
        if getattr(run, "has_interactions", True):
            self.interactions = {
                i.operation_key: i for i in run.interactions.select_related("work", "receipt")
            }
        # Read at the first call that may need them; the claim says whether there are any.
        self._rules: dict[str, list[ApprovalRule]] | None = (
            None if getattr(run, "has_rules", True) else {}
        )
        self._messages_digest = ListDigest()

    # --- the loop ----------------------------------------------------------------------------

    def execute(self) -> None:
        self._check_crash_loop()
        agent = self._checked_agent()
        own, messages = opening(self.run, agent)
        # A fork's edited model requests: from that step on, the model is sent these messages.
        edits: dict[str, Any] = self.run.fork_context.get("messages", {})

        def add(role: str, content: str | list[dict[str, Any]]) -> None:
            append(own, role, content)
            append(messages, role, content)

        nudged = False
        for step in range(1, agent.max_steps + 1):
            edited = edits.get(f"step-{step}/model")
            if edited is not None:
                # A fork's own part is all it sends (see `opening`), so both are the edit.
                own[:], messages[:] = copy.deepcopy(edited), copy.deepcopy(edited)
            response = self._model_call(agent, step, messages)
            content = visible_content(response)
            if response.stop_reason == "pause_turn":
                # The turn goes on: the paused content goes back as it is, the model continues.
                add("assistant", content)
                continue
            if not response.tool_uses:
                if has_answer(response):
                    add("assistant", content)
                elif not nudged:
                    # An empty end: never stored nor sent back (S3); asked once to go on.
                    nudged = True
                    add("user", [text_block(NUDGE)])
                    continue
                self._finish(
                    RunStatus.COMPLETED,
                    EventKind.COMPLETED,
                    output=response.text,
                    transcript=own,
                    steps=step,
                )
            add("assistant", content)
            add("user", [self._tool_call(agent, step, use) for use in response.tool_uses])
        self._finish(
            RunStatus.FAILED,
            EventKind.FAILED,
            error=f"step budget exhausted: {agent.max_steps} model requests without a final answer",
            steps=agent.max_steps,
        )

    @contextmanager
    def _pause_point(self) -> Iterator[None]:
        """A call's intent, the durable boundary where an operator's pause takes effect: the
        intent's own fence refuses it then (no read of its own per call), and the run pauses
        with the outcome the intent would have carried."""
        try:
            yield
        except PauseRequested:
            surgery_store.enter_pause(self.run)
            raise _Stop from None

    def _pause_before_asking(self) -> None:
        """Before asking a person (no intent to refuse): pause here if an operator asked to."""
        if surgery_store.pause_requested(self.run):
            surgery_store.enter_pause(self.run)
            raise _Stop

    def _finish(self, status: str, kind: EventKind, **fields: Any) -> None:
        data = {"error": fields["error"]} if "error" in fields else {}
        store.transition(self.run, status, kind, data=data, finished_at=clock.now(), **fields)
        raise _Stop

    def _block(self, reason: str, detail: dict[str, Any], key: str = "") -> NoReturn:
        store.transition(
            self.run,
            RunStatus.NEEDS_ATTENTION,
            EventKind.BLOCKED,
            key=key,
            data={"reason": reason, **detail},
            attention_reason=reason,
            attention_detail=detail,
            blocked_operation=key,
        )
        raise _Stop

    # --- crashes -----------------------------------------------------------------------------

    def _check_crash_loop(self) -> None:
        """This claim is counted already: the claims before it that crashed are one fewer."""
        crashed = self.run.crashed_claims - 1
        if crashed >= crash_loop_claims():
            _crash_loop(self.run, self.run.last_crash, crashed)

    def _attempts_exhausted(self, op: Operation, attempts: int, limit: int) -> None:
        self._block(
            AttentionReason.ATTEMPTS_EXHAUSTED,
            {
                "message": f"{op.name} ({op.key}) was interrupted by crashes {attempts} times "
                f"(the budget is {limit}); it is not run again until an operator retries or "
                "cancels the run",
                "operation": op.key,
                "operation_id": op.operation_id,
                "name": op.name,
                "attempts": attempts,
            },
            key=op.key,
        )

    # --- versions ----------------------------------------------------------------------------

    def _checked_agent(self) -> Agent:
        run = self.run
        agent = registry.code_agent(run.agent, run.version)
        # The claim read the version's registration: when the code and the registration both
        # match the run's fingerprint, as nearly always, the check needs no read of its own.
        registered = getattr(run, "registered_fingerprint", None)
        if agent is None or not agent.fingerprint == registered == run.fingerprint:
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
        key = keys.model_key(step)
        tools, static_input = request_parts(agent)
        request = ModelRequest(
            model=agent.model,
            system=agent.instructions,
            messages=messages,
            tools=tools,
            max_tokens=agent.max_tokens,
            thinking_budget=agent.thinking_budget,
            timeout=agent.timeout,
            cache=agent.prompt_caching,
        )
        # The messages come from the log itself; their digest is enough to detect divergence.
        saved_input = {
            **static_input,
            "tools": list(static_input["tools"]),
            "message_count": len(messages),
            "messages_sha256": self._messages_digest.of(messages),
        }
        input_hash = digest(saved_input)
        op = self._replayable(key, saved_input, input_hash)
        if op is not None and op.status == OperationStatus.COMPLETED:
            return ModelResponse.model_validate(op.result)
        if op is not None:
            self._before_model_attempt(agent, op)
        faults.reach("before_intent", self.run, key, "model")
        with self._pause_point():
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
                raw = registry.model_client(agent).complete(
                    request, operation_id=keys.operation_id(self.run_id, key)
                )
                span.model_response(raw)
            # Text the database cannot store (NUL, lone surrogates) fails like bad output.
            # Checked, and as the log will give it back on a replay, so both passes send the
            # same (V4).
            dumped = jsonvalues.checked(raw.model_dump(mode="json"), what="model output")
            response = ModelResponse.model_validate(dumped)
        except LeaseLost:
            raise
        except Exception as exc:  # every error inside the model call is the model's
            self._model_failed(agent, op, exc)
        faults.reach("after_handler", self.run, key, "model")
        # What is stored is what was validated: the response dumps to it again (plain fields).
        result, usage = dumped, dumped["usage"]
        stop = response.stop_reason
        if stop in MODEL_STOPS:
            # Not an answer: recorded as a failed request, so a retry asks again (S1, S2).
            stopped = {"stopped": stop, "response": result}
            store.write_outcome(
                self.run, op, status=OperationStatus.FAILED, result=stopped, error=stop, usage=usage
            )
            self._model_stopped(op, stop)
        # Held: the next record (a tool's intent, the next request's, the run's completion)
        # commits it (runtime/faults.py says where its windows lie).
        store.write_outcome(
            self.run, op, status=OperationStatus.COMPLETED, result=result, usage=usage, hold=True
        )
        return response

    def _before_model_attempt(self, agent: Agent, op: Operation) -> None:
        """Checks before a logged model request is attempted again (T6, T8, C14)."""
        if op.status == OperationStatus.FAILED and store.last_word_is_outcome(self.run, op.key):
            # The failed outcome committed, the run's move did not (a crash in between): make
            # that move now, from the log, instead of spending another attempt.
            self._after_failed_outcome(agent, op)
        limit = agent.model_retry.max_attempts if agent.model_retry else operation_attempts()
        if op.attempts < limit:
            return
        if op.status == OperationStatus.STARTED:
            self._attempts_exhausted(op, op.attempts, limit)
        if op.status == OperationStatus.FAILED:
            self._finish(
                RunStatus.FAILED,
                EventKind.FAILED,
                error=f"model error after {op.attempts} attempts: {op.error}",
            )

    def _model_failed(self, agent: Agent, op: Operation, exc: Exception) -> None:
        if isinstance(exc, PromptTooLong):
            stopped = {"stopped": "prompt_too_long", "error": exc.message}
            store.write_outcome(
                self.run, op, status=OperationStatus.FAILED, result=stopped, error=exc.message
            )
            self._model_stopped(op, "prompt_too_long")
        if isinstance(exc, ModelError):
            message, transient, retry_after = exc.message, exc.transient, exc.retry_after
        else:  # an adapter's unexpected error: no reason to think waiting heals it
            message, transient, retry_after = f"{type(exc).__name__}: {exc}", False, None
        failure = {"transient": transient, "retry_after": retry_after}
        # Committed alone: a crash after it leaves the failed outcome without the run's move
        # (see _before_model_attempt).
        store.write_outcome(
            self.run, op, status=OperationStatus.FAILED, result=failure, error=message
        )
        self._after_model_error(agent, op, message, transient=transient, retry_after=retry_after)

    def _after_failed_outcome(self, agent: Agent, op: Operation) -> None:
        recorded = op.result if isinstance(op.result, dict) else {}
        if "stopped" in recorded:
            self._model_stopped(op, str(recorded["stopped"]))
        self._after_model_error(
            agent,
            op,
            op.error,
            transient=bool(recorded.get("transient")),
            retry_after=recorded.get("retry_after"),
        )

    def _model_stopped(self, op: Operation, reason: str) -> None:
        self._block(
            AttentionReason.MODEL_STOPPED,
            {
                "message": f"The model stopped without an answer ({reason}): {MODEL_STOPS[reason]}",
                "stop_reason": reason,
                "operation": op.key,
            },
            key=op.key,
        )

    def _after_model_error(
        self,
        agent: Agent,
        op: Operation,
        message: str,
        *,
        transient: bool,
        retry_after: float | None,
    ) -> None:
        kind = ErrorKind.TRANSIENT if transient else ErrorKind.PERMANENT
        policy = agent.model_retry
        if policy is None or op.attempts >= policy.max_attempts:
            tries = f" after {op.attempts} attempts" if policy else ""
            self._finish(
                RunStatus.FAILED,
                EventKind.FAILED,
                error=f"model error{tries}: {message}",
                error_kind=kind,
            )
        assert policy is not None
        delay = policy.delay_after(op.attempts, retry_after=retry_after)
        due = clock.now() + dt.timedelta(seconds=delay)
        store.transition(
            self.run,
            RunStatus.RETRY_WAIT,
            EventKind.RETRY_SCHEDULED,
            key=op.key,
            data={
                "attempt": op.attempts,
                "max_attempts": policy.max_attempts,
                "next_attempt_at": due.isoformat(),
                "error": message,
                "error_kind": kind,
            },
            next_attempt_at=due,
            error=message,
            error_kind=kind,
        )
        raise _Stop

    # --- tool calls --------------------------------------------------------------------------

    def _tool_call(self, agent: Agent, step: int, use: ToolUseBlock) -> dict[str, Any]:
        key = keys.tool_key(step, use.id)
        interaction = self.interactions.get(key)
        edit = _edit(interaction)
        saved_input = _saved_tool_input(use, edit)
        input_hash = digest(saved_input)
        op = self._replayable(key, saved_input, input_hash)
        if op is not None and op.status in (OperationStatus.COMPLETED, OperationStatus.REJECTED):
            return _result_block(use.id, op.result, op.is_error, edit)

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

        # Whether a call needs a person is decided once, before its intent: an interaction
        # already asked stays the answer, and a rule added after the intent changes nothing.
        ask = self._asks(agent, tool, args, interaction, op)
        if tool.is_question or interaction is not None or ask is not None:
            decided = self._decision(tool, key, args, ask)
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
            if interaction is not None:
                args = self._checked_receipt(agent, tool, interaction, key)

        rerun = ""
        if op is not None and op.status == OperationStatus.NOT_RUN:
            # An operator verified that the call did not happen and chose to run it again (R4):
            # it runs once more with the same operation id, whatever its policy.
            rerun = "an operator verified that it did not run"
        elif op is not None:  # intent committed, outcome missing: the recovery policy decides
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
                durability = ToolDurabilityError(tool.name, use.id).to_result()
                store.write_outcome(
                    self.run, op, status=OperationStatus.COMPLETED, result=durability, is_error=True
                )
                return _result_block(use.id, durability, True, edit)
            # safe and idempotent: run again, with the same operation id, within a budget.
            attempts = store.intents_since_a_person_acted(self.run, key)
            if attempts >= operation_attempts():
                self._attempts_exhausted(op, attempts, operation_attempts())
            rerun = "recovery"
        faults.reach("before_intent", self.run, key, tool.name)
        with self._pause_point():
            op = self._tool_intent(
                op,
                interaction,
                key=key,
                name=tool.name,
                policy=policy,
                saved_input=saved_input,
                input_hash=input_hash,
                rerun=rerun,
            )
        self.ops[key] = op
        faults.reach("after_intent", self.run, key, tool.name)
        with tracing.tool_span(self.run, op) as span:
            result, is_error = self._invoke(tool, args, op)
            span.tool_outcome(is_error)
        faults.reach("after_handler", self.run, key, tool.name)
        # Held, as a model request's: the next record commits it.
        store.write_outcome(
            self.run,
            op,
            status=OperationStatus.COMPLETED,
            result=result,
            is_error=is_error,
            hold=True,
        )
        return _result_block(use.id, result, is_error, edit)

    def _invoke(self, tool: Tool, args: BaseModel, op: Operation) -> tuple[Any, bool]:
        """Run the handler; an exception it raises is an outcome the model sees."""
        assert tool.handler is not None
        context = _context(self.run, self.run_id, op)
        try:
            value = tool.handler(args, context)
            faults.reach("in_handler", self.run, op.key, tool.name)
            result = tool.validate_output(value)
            # Checked, and stored and shown as the log will give it back on a replay (V4).
            return jsonvalues.checked(result, what=f"result of {tool.name}"), False
        except ValidationError as exc:
            return {"error": f"{tool.name} returned output that fails its schema: {exc}"}, True
        except InvalidInput as exc:
            return {"error": exc.message}, True
        except Exception as exc:
            return {"error": str(exc) or type(exc).__name__, "type": type(exc).__name__}, True

    def _decision(
        self, tool: Tool, key: str, args: BaseModel, ask: Policy | None
    ) -> tuple[Any, str, bool] | None:
        """For a call that needs a person: the decided result, None to proceed, or wait."""
        interaction = self.interactions.get(key)
        if interaction is None:
            self._pause_before_asking()
            if tool.is_question:
                kind, payload = InteractionKind.QUESTION, args.model_dump(mode="json")
            else:
                kind, payload = (
                    InteractionKind.TOOL_APPROVAL,
                    {"arguments": args.model_dump(mode="json")},
                )
            store.request_approval(
                self.run,
                key=key,
                kind=kind,
                tool_name=tool.name,
                payload=payload,
                policy=ask or QUESTION,
                expiring_seconds=float(settings.AGENTOPS_APPROVAL_EXPIRING_SECONDS),
            )
            raise _Stop
        if interaction.status != InteractionStatus.ANSWERED:
            # Claimed while a person still has to answer: should not happen; wait again.
            store.transition(self.run, RunStatus.WAITING, EventKind.WAITING, key=key)
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

    # --- approval policy ------------------------------------------------------------------------

    def _asks(
        self,
        agent: Agent,
        tool: Tool,
        args: BaseModel,
        interaction: Interaction | None,
        op: Operation | None,
    ) -> Policy | None:
        """The policy under which a call not asked yet must ask a person, or None."""
        if interaction is not None or tool.is_question:
            return None
        if op is not None and not tool.needs_approval(args):
            return None
        # The agent's rules, read once per claim: a turn calls the same tools again and again.
        if self._rules is None:
            self._rules = rules_by_tool(agent)
        return policy_for(agent, tool, args, self._rules.get(tool.name, []))

    def _tool_intent(
        self,
        op: Operation | None,
        interaction: Interaction | None,
        *,
        key: str,
        name: str,
        policy: str,
        saved_input: dict[str, Any],
        input_hash: str,
        rerun: str,
    ) -> Operation:
        """Write 1 of 2 of a tool call; an approved call's receipt is used by its first intent,
        in the same transaction: once, by this call. (Other calls keep the intent's own commit.)"""

        def intent() -> Operation:
            return store.write_intent(
                self.run,
                op,
                key=key,
                kind=OperationKind.TOOL,
                name=name,
                policy=policy,
                input=saved_input,
                input_hash=input_hash,
                rerun=rerun,
            )

        if op is not None or interaction is None or _receipt(interaction) is None:
            return intent()
        try:
            with transaction.atomic():
                if not store.use_receipt(interaction.pk, clock.now()):
                    raise _ReceiptUsed
                return intent()
        except _ReceiptUsed:
            self._block_receipt(key, "this approval was used already", [])

    def _checked_receipt(
        self, agent: Agent, tool: Tool, interaction: Interaction, key: str
    ) -> BaseModel:
        """The arguments to run for an approved call, after recomputing its receipt over what is
        about to run: a difference (arguments, code, rule, approvers) blocks the run, naming it.
        A call approved before receipts existed runs with its proposed arguments."""
        saved = _receipt(interaction)
        item = _item(interaction)
        try:
            current = receipt(self.run, agent, interaction, item, fingerprint=agent.fingerprint)
        except ValueError as exc:
            self._block_receipt(key, str(exc), [])
        if saved is not None:
            differences = receipt_differences(saved.contents, current)
            if differences or digest(current) != saved.digest:
                named = ", ".join(d["part"] for d in differences) or "the digest"
                self._block_receipt(
                    key,
                    f"what is about to run differs from what was approved: {named}",
                    differences,
                )
        return tool.input_model.model_validate(current["arguments"])

    def _block_receipt(self, key: str, message: str, differences: list[dict[str, Any]]) -> NoReturn:
        self._block(
            AttentionReason.RECEIPT_MISMATCH,
            {
                "message": f"{message}. The call was not run; cancel the run, or ask for the "
                "call again in a new run.",
                "differences": differences,
                "operation": key,
            },
            key=key,
        )


def _item(interaction: Interaction | None) -> WorkItem | None:
    try:
        return interaction.work if interaction is not None else None
    except WorkItem.DoesNotExist:
        return None


def _receipt(interaction: Interaction) -> ApprovalReceipt | None:
    try:
        return interaction.receipt
    except ApprovalReceipt.DoesNotExist:
        return None


def _edit(interaction: Interaction | None) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """For an approved call whose arguments an approver edited: (the edited arguments, the
    changed fields); None otherwise."""
    item = _item(interaction)
    if interaction is None or item is None or item.arguments is None:
        return None
    if interaction.status != InteractionStatus.ANSWERED or not (interaction.response or {}).get(
        "approved"
    ):
        return None
    proposed = interaction.payload.get("arguments", {})
    return dict(item.arguments), changes(proposed, item.arguments)


def _saved_tool_input(
    use: ToolUseBlock, edit: tuple[dict[str, Any], dict[str, Any]] | None
) -> dict[str, Any]:
    saved: dict[str, Any] = {"tool": use.name, "arguments": use.input}
    if edit is not None:
        # An approver edited the arguments: the call runs with these (the model's proposal
        # stays in "arguments", so the log shows both).
        saved["executed_arguments"] = edit[0]
    return saved


def _result_block(
    tool_use_id: str,
    result: Any,
    is_error: bool,
    edit: tuple[dict[str, Any], dict[str, Any]] | None,
) -> dict[str, Any]:
    """The tool result the model sees; for an edited call, with what the operator changed."""
    if edit is not None:
        result = edited_result(result, edit[1])
    return tool_result_block(tool_use_id, result, is_error)


def opening(run: Run, agent: Agent) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What a run starts its turn with: (its own part, for its transcript; what the model is
    sent). Both grow alike: a message merges into the one before it only when their roles
    match, and after the first message that depends on the own part alone.

    A fork starts with its parent's first request (its seed): its own part is all of it, so
    its new session's later runs see what the fork saw.
    """
    seed = run.fork_context.get("seed")
    if seed is not None:
        return copy.deepcopy(seed), copy.deepcopy(seed)
    # A session's first run has no earlier transcript: skip the query.
    history = session_history(run, runs=agent.history_runs) if run.seq > 1 else []
    if history and agent.compact_history is not None:
        history = joined([agent.compact_history(history)])
    own: list[dict[str, Any]] = []
    messages = joined([history])
    append(own, "user", run.input)
    append(messages, "user", run.input)
    return own, messages


# Where an agent keeps its request parts, built on first use as its fingerprint is.
_REQUEST_PARTS = "_request_parts"


def request_parts(agent: Agent) -> tuple[list[ToolSpec], dict[str, Any]]:
    """The tool specs and the step-independent part of a model request's saved input, shared:
    callers copy what they change. Built once per agent and process: an Agent is frozen, and
    rebuilding the JSON schemas cost more than a step's durable writes (once per claim, too)."""
    parts: tuple[list[ToolSpec], dict[str, Any]] | None = agent.__dict__.get(_REQUEST_PARTS)
    if parts is None:
        parts = agent.__dict__[_REQUEST_PARTS] = _request_parts(agent)
    return parts


def _request_parts(agent: Agent) -> tuple[list[ToolSpec], dict[str, Any]]:
    tools = [t.model_spec() for t in agent.tools]
    parts: dict[str, Any] = {
        "model": agent.model,
        "system_sha256": digest(agent.instructions),
        "tools": [t.name for t in agent.tools],
        "tools_sha256": digest([t.model_dump() for t in tools]),
        "max_tokens": agent.max_tokens,
    }
    # Only when set: requests logged before the setting existed keep their hash.
    if agent.thinking_budget is not None:
        parts["thinking_budget"] = agent.thinking_budget
    return tools, parts


def _context(run: Run, run_id: str, op: Operation) -> ToolContext:
    return ToolContext(
        run_id=run_id,
        operation_key=op.key,
        operation_id=keys.operation_id(run_id, op.key),
        attempt=op.attempts,
        fence=run.fence,
    )
