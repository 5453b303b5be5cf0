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
import json
import re
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from runtime.errors import AgentDefinitionError
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
    """

    max_attempts: int = 3
    initial_delay: float = 1.0
    max_delay: float = 60.0

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

    def delay_after(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        return float(min(self.max_delay, self.initial_delay * 2 ** (attempt - 1)))


@dataclass(frozen=True)
class ToolContext:
    """What a tool handler learns about the call it serves.

    `operation_id` (run id + key) is stable across crashes and retries: pass it to the external
    service as the idempotency key.
    """

    run_id: str
    operation_key: str
    operation_id: str
    attempt: int


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


def _rule_fingerprint(rule: ApprovalRule) -> str | bool:
    if not callable(rule):
        return bool(rule)
    try:
        source = inspect.getsource(rule)
    except (OSError, TypeError):
        source = getattr(rule, "__qualname__", repr(rule))
    return "rule:" + hashlib.sha256(source.encode()).hexdigest()[:16]


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest(value: object) -> str:
    """The sha256 of a JSON value's canonical form."""
    return hashlib.sha256(_canonical(value).encode()).hexdigest()


@dataclass(frozen=True)
class Agent:
    """An agent version defined in code.

    The fingerprint covers everything that changes behaviour: model, instructions, tools and
    their schemas, recovery policies and approval rules. Bump `version` when it changes.
    max_steps: model requests allowed in one run (default 10). model_retry: None (default)
    fails the run on the first model error.
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
        }

    @functools.cached_property
    def fingerprint(self) -> str:
        # Cached: an Agent is frozen, and the JSON schemas behind it are costly to rebuild on
        # every submit and claim (cached_property writes __dict__, which frozen allows).
        return digest(self.spec())


def spec_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The parts of two agent specs that differ, as [{"part", "saved", "current"}]."""
    differences = []
    for part in ("model", "instructions", "tools", "recovery", "approval"):
        before, after = saved.get(part), current.get(part)
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
