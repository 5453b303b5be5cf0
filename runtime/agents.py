"""Agents and tools defined in plain Python, validated when they are defined.

@tool(recovery="safe")
def get_order(args: OrderQuery, ctx: ToolContext) -> Order:
    \"\"\"Look an order up.\"\"\"

refund_desk = Agent(name="refund-desk", version="1", model="claude-sonnet-4-5",
                    instructions="…", tools=[get_order, ask_operator])
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import random
import re
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from runtime import jsonvalues, store
from runtime.errors import AgentDefinitionError, LeaseLost
from runtime.llm import Model, ToolSpec

Recovery = Literal["manual", "safe", "idempotent", "report"]
RECOVERY_POLICIES: tuple[str, ...] = typing.get_args(Recovery)
_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9_-]{0,63}$")


@dataclass(frozen=True)
class ModelRetry:
    """Persisted exponential backoff for errors raised inside the model call.

    max_attempts: attempts in all, crashed ones included (default 3, at least 1).
    initial_delay: seconds before the second attempt (default 1.0, > 0).
    max_delay: the cap on any one delay, in seconds (default 60.0, >= initial_delay).
    jitter: True (default) draws each delay uniformly between 0 and its capped exponential
        ("full jitter"), so runs failing together do not return together; False waits the
        capped exponential exactly.
    """

    max_attempts: int = 3
    initial_delay: float = 1.0
    max_delay: float = 60.0
    jitter: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise AgentDefinitionError(
                f"ModelRetry.max_attempts must be >= 1, got {self.max_attempts!r}"
            )
        if not self.initial_delay > 0:
            raise AgentDefinitionError(
                f"ModelRetry.initial_delay must be > 0, got {self.initial_delay!r}"
            )
        if not self.max_delay >= self.initial_delay:
            raise AgentDefinitionError(
                f"ModelRetry.max_delay ({self.max_delay!r}) must be >= "
                f"initial_delay ({self.initial_delay!r})"
            )

    def delay_after(self, attempt: int, *, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based).

        With jitter, a uniform draw in [0, capped exponential], so that many runs failing at
        once (a provider outage) do not all come back at once. Never less than the provider's
        `retry_after`, when it sent one: it said when to come back.
        """
        ceiling = min(self.max_delay, self.initial_delay * 2 ** (attempt - 1))
        delay = ceiling * jitter() if self.jitter else ceiling
        return float(max(delay, retry_after or 0.0))


# The backoff's randomness, in one place so tests can seed or pin it (runtime.testing).
_random = random.Random()


def jitter() -> float:
    """A uniform fraction in [0, 1] for backoff jitter."""
    return _random.random()


class Cancelled(LeaseLost):
    """Raised by `ToolContext.raise_if_cancelled`: the run is no longer this call's to run.

    A LeaseLost (a BaseException): the handler's `except Exception` cannot swallow it, and the
    worker stops without writing anything more.
    """


@dataclass(frozen=True)
class ToolContext:
    """What a tool handler learns about the call it serves.

    `operation_id` (run id + key) is stable across crashes and retries: pass it to the external
    service as the idempotency key. A long handler should poll `cancelled()` (or call
    `raise_if_cancelled()`) between steps of its work: an operator may cancel the run meanwhile.
    """

    run_id: str
    operation_key: str
    operation_id: str
    attempt: int
    # The claim this call runs under; a cancel or a takeover replaces it.
    fence: int = 0

    def cancelled(self) -> bool:
        """True once the run was cancelled (or taken over by another worker): whatever this
        handler does next will not be recorded. One database read."""
        return not store.still_running(self.run_id, self.fence)

    def raise_if_cancelled(self) -> None:
        """Stop the handler (and this worker's work on the run) if the run was cancelled."""
        if self.cancelled():
            raise Cancelled(self.run_id)


class ToolDurabilityError(Exception):
    """A tool call whose intent was written but whose outcome was not, under `report` recovery.

    The model receives `to_result()`, {kind, error, toolName, toolCallId}, as the call's error
    result and decides (check first, ask, or stop). `from_result` recognizes such a result in
    a run's history.
    """

    KIND = "tool-durability-error"

    def __init__(self, tool_name: str, tool_call_id: str) -> None:
        super().__init__(
            f"Tool {tool_name!r} (call {tool_call_id}) was requested but its execution did not "
            "complete durably: it may have run. Check before trying again."
        )
        self.tool_name = tool_name
        self.tool_call_id = tool_call_id

    def to_result(self) -> dict[str, str]:
        return {
            "kind": self.KIND,
            "error": str(self),
            "toolName": self.tool_name,
            "toolCallId": self.tool_call_id,
        }

    @classmethod
    def from_result(cls, result: object) -> ToolDurabilityError | None:
        """The error a recorded tool result stands for, or None if it is not one."""
        if not isinstance(result, dict) or result.get("kind") != cls.KIND:
            return None
        return cls(str(result.get("toolName", "")), str(result.get("toolCallId", "")))


Handler = Callable[[Any, ToolContext], Any]
Lookup = Callable[[str], Any]
ApprovalRule = bool | Callable[[Any], bool]


@dataclass(frozen=True)
class Money:
    """A value format: an integer amount in minor units, e.g. Money("USD") shows 4000 as $40.00.

    currency: the ISO 4217 code (default "USD"). exponent: minor units per major unit, as a
    power of ten (default 2: cents).
    """

    currency: str = "USD"
    exponent: int = 2

    def __post_init__(self) -> None:
        if not re.match(r"^[A-Z]{3}$", self.currency):
            raise AgentDefinitionError(
                f"Money.currency must be an ISO 4217 code, got {self.currency!r}"
            )
        if not isinstance(self.exponent, int) or not 0 <= self.exponent <= 4:
            raise AgentDefinitionError(f"Money.exponent must be 0 to 4, got {self.exponent!r}")


@dataclass(frozen=True)
class Presentation:
    """How the console shows a call of the tool to the person who decides on it.

    Display only: it changes nothing the run does, so it is not part of the agent's fingerprint.
    formats: argument or fact name -> its format, e.g. {"amount_cents": Money("USD")}.
    context: context(args) -> the facts an approver needs, {label: value}; called each time the
        decision page is shown (a failure is shown, not raised).
    subject: subject(args) -> what the call acts on, e.g. "order 1003": the console lists the
        other pending and recent calls of the tool on the same subject.
    high_risk: high_risk(args) -> True to ask the approver to confirm an approval once more.
    """

    formats: Mapping[str, Money] = field(default_factory=dict)
    context: Callable[[Any], Mapping[str, Any]] | None = None
    subject: Callable[[Any], str] | None = None
    high_risk: Callable[[Any], bool] | None = None


@dataclass(frozen=True)
class Tool:
    """A tool the model may call. Build it with `@tool`."""

    name: str
    description: str
    input_model: type[BaseModel]
    output_model: type[BaseModel]
    handler: Handler | None
    recovery: Recovery = "manual"
    requires_approval: ApprovalRule = False
    # Asks the external system what became of an operation id; None if it never happened.
    lookup: Lookup | None = None
    is_question: bool = False
    presentation: Presentation = field(default_factory=Presentation, compare=False)

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise AgentDefinitionError(f"tool name {self.name!r} must match {_NAME.pattern}")
        if self.recovery not in RECOVERY_POLICIES:
            raise AgentDefinitionError(
                f"tool {self.name!r}: unknown recovery policy {self.recovery!r} "
                f"(choose one of {', '.join(RECOVERY_POLICIES)})"
            )
        for label, model in (("input", self.input_model), ("output", self.output_model)):
            if not (isinstance(model, type) and issubclass(model, BaseModel)):
                raise AgentDefinitionError(
                    f"tool {self.name!r}: the {label} must be a pydantic model, got {model!r}"
                )

    def needs_approval(self, args: BaseModel) -> bool:
        rule = self.requires_approval
        return bool(rule(args)) if callable(rule) else bool(rule)

    def model_spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.name,
            description=self.description,
            input_schema=self.input_model.model_json_schema(),
        )

    def validate_output(self, value: Any) -> dict[str, Any]:
        """The handler's (or an operator's) result as JSON, checked against the output model."""
        model = (
            value
            if isinstance(value, self.output_model)
            else self.output_model.model_validate(value)
        )
        return model.model_dump(mode="json")

    def look_up(self, operation_id: str) -> dict[str, Any] | None:
        """What the external system reports for `operation_id`, validated; None if nothing."""
        if self.lookup is None:
            return None
        found = self.lookup(operation_id)
        return None if found is None else self.validate_output(found)


def _models_from_hints(func: Callable[..., Any]) -> tuple[type[BaseModel], type[BaseModel]]:
    hints = typing.get_type_hints(func)
    params = [p for p in inspect.signature(func).parameters if p in hints]
    if not params or "return" not in hints:
        raise AgentDefinitionError(
            f"tool {func.__name__!r}: annotate the first argument and the return type with "
            "pydantic models, e.g. def f(args: In, ctx: ToolContext) -> Out"
        )
    return hints[params[0]], hints["return"]


def tool(
    func: Handler | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    recovery: Recovery = "manual",
    requires_approval: ApprovalRule = False,
    lookup: Lookup | None = None,
    presentation: Presentation | None = None,
) -> Any:
    """Declare a tool from `def handler(args: InputModel, ctx: ToolContext) -> OutputModel`.

    recovery: what happens when the intent committed but the outcome did not (default
        "manual": the run waits for an operator; "safe": run again; "idempotent": run again
        with the same operation id; "report": the model is told the call may have run).
    requires_approval: True, or a predicate over the validated input, to ask an operator first.
    lookup: `lookup(operation_id)` returns the external system's record of the operation, or
        None; the reconcile page shows it for the operator to confirm.
    presentation: how the console shows a call to its approver (display only: not part of the
        fingerprint).
    """

    def build(handler: Handler) -> Tool:
        input_model, output_model = _models_from_hints(handler)
        return Tool(
            name=name or handler.__name__,
            description=description or inspect.getdoc(handler) or handler.__name__,
            input_model=input_model,
            output_model=output_model,
            handler=handler,
            recovery=recovery,
            requires_approval=requires_approval,
            lookup=lookup,
            presentation=presentation or Presentation(),
        )

    return build(func) if func is not None else build


class Question(BaseModel):
    question: str = Field(min_length=1, max_length=4000, description="What to ask the operator")


class Answer(BaseModel):
    answer: str = Field(min_length=1, max_length=20000)


ask_operator = Tool(
    name="ask_operator",
    description="Ask a human operator a question and wait for the answer.",
    input_model=Question,
    output_model=Answer,
    handler=None,
    recovery="safe",
    is_question=True,
)


def _source_fingerprint(code: Callable[..., Any]) -> str:
    try:
        source = inspect.getsource(code)
    except (OSError, TypeError):
        source = getattr(code, "__qualname__", repr(code))
    return "rule:" + hashlib.sha256(source.encode()).hexdigest()[:16]


def _rule_fingerprint(rule: ApprovalRule) -> str | bool:
    return _source_fingerprint(rule) if callable(rule) else bool(rule)


def digest(value: object) -> str:
    """The sha256 of a JSON value's canonical form."""
    return hashlib.sha256(jsonvalues.canonical(value).encode()).hexdigest()


class ListDigest:
    """`digest` of a list that grows at its end, asked for again and again: a run's messages,
    at each of its model requests. Each item is encoded once, where `digest` would encode the
    whole list every time (a run's cost would grow with the square of its length). An item
    replaced (the last message merged with the next of its role, a fork's edit) is encoded
    again from there; the items are never changed in place (transcript.append replaces)."""

    def __init__(self) -> None:
        self._items: list[object] = []  # held, so that `is` cannot meet a reused id
        # The canonical form's hash so far: "[", then each item before the i-th, comma-joined.
        self._states = [hashlib.sha256(b"[")]

    def of(self, items: Sequence[object]) -> str:
        kept = 0
        for mine, theirs in zip(self._items, items, strict=False):
            if mine is not theirs:
                break
            kept += 1
        del self._items[kept:], self._states[kept + 1 :]
        for item in items[kept:]:
            state = self._states[-1].copy()
            state.update((b"," if self._items else b"") + jsonvalues.canonical(item).encode())
            self._items.append(item)
            self._states.append(state)
        whole = self._states[-1].copy()
        whole.update(b"]")
        return whole.hexdigest()


History = list[dict[str, Any]]
Compactor = Callable[[History], History]

# The settings of the fingerprint's "settings" part, with their defaults (see Agent).
_SETTING_DEFAULTS: dict[str, Any] = {
    "max_tokens": 1024,
    "thinking_budget": None,
    "history_runs": None,
    "compact_history": None,
}


@dataclass(frozen=True)
class Agent:
    """An agent version defined in code.

    max_steps: model requests allowed in one run (default 10).
    model_retry: None (default) fails the run on the first model error.
    max_tokens: the longest answer the model may give in one request (default 1024); an answer
        cut off there never completes a run, and its tool calls never run.
    thinking_budget: tokens of extended thinking per request (None, the default: off); the
        thinking blocks are kept and sent back unchanged while tool use goes on.
    timeout: seconds one model request may take (None: the adapter's default).
    prompt_caching: mark the system prompt, tools and transcript as cacheable (default True).
    history_runs: how many earlier runs of the session the model is shown (None, the default:
        all of them). Every earlier run counts, failed and cancelled ones included, with what
        its tool calls did and why it ended.
    compact_history: a function given the earlier runs' messages (Messages API shape, roles
        alternating) that returns the messages to send instead, e.g. a summary. It must be
        deterministic (replays rebuild the request and compare it with the log) and keep every
        tool_use answered by its tool_result.

    The fingerprint covers what a recorded run means: model, instructions, tools and their
    schemas, recovery policies and approval rules, and the settings that change what the model
    is asked or produces: max_tokens and thinking_budget (the answer), history_runs and
    compact_history (what the model is shown). A code change there under the same version
    blocks the runs in flight, since their log was recorded under other terms. These settings
    enter the fingerprint only when they differ from their defaults, so agents defined before
    the settings existed (the demo's among them) keep their fingerprint and their registrations.
    Left out on purpose: max_steps and model_retry are limits on how far and how often a run
    goes; raising them never changes what was recorded, and lets an operator finish a run that
    hit them (raise the limit, retry). timeout and prompt_caching change how a request travels,
    not what it asks. Bump `version` when the fingerprint changes.
    """

    name: str
    version: str
    model: str
    instructions: str
    tools: Sequence[Tool] = ()
    model_retry: ModelRetry | None = None
    max_steps: int = 10
    max_tokens: int = 1024
    # Per-tool recovery overrides: {"search": "safe"}; every name must be a tool of this agent.
    recovery: Mapping[str, Recovery] = field(default_factory=dict)
    thinking_budget: int | None = None
    timeout: float | None = None
    prompt_caching: bool = True
    history_runs: int | None = None
    compact_history: Compactor | None = None
    # The model client; None uses the project default (see runtime.registry.default_model).
    llm: Model | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise AgentDefinitionError(f"agent name {self.name!r} must match {_NAME.pattern}")
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,49}$", self.version):
            raise AgentDefinitionError(
                f"agent {self.name!r}: invalid version label {self.version!r}"
            )
        object.__setattr__(self, "tools", tuple(self.tools))
        names = [t.name for t in self.tools if isinstance(t, Tool)]
        if len(names) != len(self.tools):
            raise AgentDefinitionError(f"agent {self.name!r}: tools must be declared with @tool")
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise AgentDefinitionError(f"agent {self.name!r}: duplicate tool names {duplicates}")
        for tool_name, policy in self.recovery.items():
            if tool_name not in names:
                raise AgentDefinitionError(
                    f"agent {self.name!r}: recovery policy names missing tool {tool_name!r}"
                )
            if policy not in RECOVERY_POLICIES:
                raise AgentDefinitionError(
                    f"agent {self.name!r}: unknown recovery policy {policy!r} for {tool_name!r}"
                )
        if not isinstance(self.max_steps, int) or self.max_steps < 1:
            raise AgentDefinitionError(f"agent {self.name!r}: max_steps must be >= 1")
        if self.model_retry is not None and not isinstance(self.model_retry, ModelRetry):
            raise AgentDefinitionError(f"agent {self.name!r}: model_retry must be a ModelRetry")
        if not _positive_int(self.max_tokens):
            raise AgentDefinitionError(f"agent {self.name!r}: max_tokens must be >= 1")
        if self.thinking_budget is not None and not (
            _positive_int(self.thinking_budget) and self.thinking_budget < self.max_tokens
        ):
            # The Messages API requires budget_tokens < max_tokens.
            raise AgentDefinitionError(
                f"agent {self.name!r}: thinking_budget must be >= 1 and below max_tokens"
            )
        if self.timeout is not None and not (
            isinstance(self.timeout, int | float) and self.timeout > 0
        ):
            raise AgentDefinitionError(f"agent {self.name!r}: timeout must be > 0 seconds")
        if self.history_runs is not None and not (
            isinstance(self.history_runs, int)
            and not isinstance(self.history_runs, bool)
            and self.history_runs >= 0
        ):
            raise AgentDefinitionError(f"agent {self.name!r}: history_runs must be >= 0")
        if self.compact_history is not None and not callable(self.compact_history):
            raise AgentDefinitionError(f"agent {self.name!r}: compact_history must be callable")

    @property
    def key(self) -> tuple[str, str]:
        return (self.name, self.version)

    def tool_named(self, name: str) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)

    def policy_for(self, tool_: Tool) -> Recovery:
        return self.recovery.get(tool_.name, tool_.recovery)

    def spec(self) -> dict[str, Any]:
        """The fingerprint's parts, kept with each registration so changes can be shown."""
        return {
            "model": self.model,
            "instructions": self.instructions,
            "tools": {
                t.name: {
                    "description": t.description,
                    "input_schema": t.input_model.model_json_schema(),
                    "output_schema": t.output_model.model_json_schema(),
                }
                for t in self.tools
            },
            "recovery": {t.name: self.policy_for(t) for t in self.tools},
            "approval": {t.name: _rule_fingerprint(t.requires_approval) for t in self.tools},
            **({"settings": settings} if (settings := self._changed_settings()) else {}),
        }

    def _changed_settings(self) -> dict[str, Any]:
        """The fingerprinted settings that differ from their defaults, as JSON."""
        changed: dict[str, Any] = {}
        for name, default in _SETTING_DEFAULTS.items():
            value = getattr(self, name)
            if value != default:
                changed[name] = _source_fingerprint(value) if callable(value) else value
        return changed

    @functools.cached_property
    def fingerprint(self) -> str:
        # Cached: an Agent is frozen, and the JSON schemas behind it are costly to rebuild on
        # every submit and claim (cached_property writes __dict__, which frozen allows).
        return digest(self.spec())


def spec_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The parts of two agent specs that differ, as [{"part", "saved", "current"}]."""
    differences = []
    for part in ("model", "instructions", "tools", "recovery", "approval", "settings"):
        # An agent with every setting at its default has no "settings" part.
        missing: dict[str, Any] | None = {} if part == "settings" else None
        before, after = saved.get(part, missing), current.get(part, missing)
        if isinstance(before, dict) and isinstance(after, dict):
            for name in sorted(set(before) | set(after)):
                if before.get(name) != after.get(name):
                    differences.append(
                        {
                            "part": f"{part}.{name}",
                            "saved": before.get(name),
                            "current": after.get(name),
                        }
                    )
        elif before != after:
            differences.append({"part": part, "saved": before, "current": after})
    return differences


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def validate_input(tool_: Tool, arguments: Mapping[str, Any]) -> BaseModel | str:
    """The tool's validated input, or a message for the model saying what was wrong."""
    try:
        return tool_.input_model.model_validate(arguments)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'input'}: {err['msg']}"
            for err in exc.errors()
        )
        return f"invalid arguments for {tool_.name}: {problems}"
