"""What a person deciding on a tool call sees besides its raw arguments.

The tool declares how to present its calls (`runtime.Presentation`): formats for typed values,
a `context(args)` hook with the facts, a `subject(args)` key. From that, and from the run's
conversation, this module builds the decision page's panels and the inbox's warnings:

- the arguments, each formatted, with where its value appeared earlier (provenance);
- the facts, fetched now, with the time they were fetched (a failing hook is shown, not raised);
- the other pending and recent calls of the tool on the same subject, with their status.

Every function runs a fixed number of queries, whatever the number of items.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q
from django.utils import timezone
from pydantic import BaseModel, ValidationError

from agentops.templatetags.console import format_money
from runtime import Money, Presentation, registry
from runtime.agents import Tool
from runtime.models import (
    Interaction,
    InteractionKind,
    InteractionStatus,
    Operation,
    OperationStatus,
    Run,
)
from runtime.transcript import session_history

# Related calls: those of the last RECENT_DAYS, at most RELATED_SCAN of them looked at (the
# newest), at most RELATED_SHOWN listed per item.
RECENT_DAYS = 30
RELATED_SCAN = 500
RELATED_SHOWN = 10
# What a candidate's subject, summary and state are made of (its run: for the agent's code).
RELATED_COLUMNS = (
    "run__agent",
    "run__version",
    "operation_key",
    "kind",
    "tool_name",
    "payload",
    "status",
    "response",
    "responded_by",
    "created_at",
)
# Places listed per argument value, and the shortest text value looked for (a one-letter value
# is everywhere).
SOURCES_SHOWN = 3
SHORTEST_LOOKED_FOR = 2


def code_tool(run: Run, name: str) -> Tool | None:
    agent = registry.code_agent(run.agent, run.version)
    return agent.tool_named(name) if agent else None


def _presentation(tool: Tool | None) -> Presentation:
    return tool.presentation if tool is not None else Presentation()


def _validated(tool: Tool | None, arguments: Any) -> BaseModel | None:
    if tool is None or not isinstance(arguments, dict):
        return None
    try:
        return tool.input_model.model_validate(arguments)
    except ValidationError:
        return None


def formatted(value: Any, money: Money | None) -> str:
    """A value as the approver reads it: amounts in their currency, the rest as JSON text."""
    if money is not None and isinstance(value, int) and not isinstance(value, bool):
        return format_money(value, money)
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def subject_of(tool: Tool | None, arguments: Any) -> str:
    """The subject a call acts on ("order 1003"), or "" if the tool declares none."""
    hook = _presentation(tool).subject
    args = _validated(tool, arguments)
    if hook is None or args is None:
        return ""
    try:
        return str(hook(args))
    except Exception:  # a broken hook must not break the page: the call just has no subject
        return ""


def is_high_risk(tool: Tool | None, arguments: Any) -> bool:
    hook = _presentation(tool).high_risk
    args = _validated(tool, arguments)
    if hook is None or args is None:
        return False
    try:
        return bool(hook(args))
    except Exception:  # a broken rule asks for the confirmation rather than skipping it
        return True


# --- facts ---------------------------------------------------------------------------------------


@dataclass
class Facts:
    """What the tool's context hook returned, fetched at `fetched_at`."""

    available: bool
    rows: list[tuple[str, str]] = field(default_factory=list)
    fetched_at: dt.datetime | None = None
    error: str = ""


def facts(tool: Tool | None, arguments: Any) -> Facts:
    presentation = _presentation(tool)
    args = _validated(tool, arguments)
    if presentation.context is None or args is None:
        return Facts(available=False)
    fetched_at = timezone.now()
    try:
        found = presentation.context(args)
    except Exception as exc:  # the external system's failure is shown, not raised
        return Facts(available=True, fetched_at=fetched_at, error=f"{type(exc).__name__}: {exc}")
    rows = [
        (str(label), formatted(value, presentation.formats.get(str(label))))
        for label, value in found.items()
    ]
    return Facts(available=True, rows=rows, fetched_at=fetched_at)


# --- provenance ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """An earlier message of the session, as a person names it."""

    label: str
    text: str


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False, sort_keys=True)


def conversation_sources(
    run: Run, messages: Sequence[dict[str, Any]], call_id: str = ""
) -> list[Source]:
    """The customer's messages, the operator's answers and the tool results, before the call.

    `messages` is the run's own transcript; the session's earlier runs come first. Nothing from
    the model response that made the call `call_id` (a tool_use id) on counts: a value cannot
    come from what followed it.
    """
    sources: list[Source] = []
    names: dict[str, str] = {}
    questions: dict[str, str] = {}
    for message in [*session_history(run), *messages]:
        content = message.get("content")
        if call_id and isinstance(content, list):
            ids = {b.get("id") for b in content if isinstance(b, dict)}
            if call_id in ids:
                break
        if message.get("role") == "user" and isinstance(content, str):
            sources.append(Source("the customer's message", content))
            continue
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "tool_use":
                names[str(block.get("id"))] = str(block.get("name"))
                question = (block.get("input") or {}).get("question")
                if isinstance(question, str):
                    questions[str(block.get("id"))] = question
            elif kind == "tool_result" and not block.get("is_error"):
                use = str(block.get("tool_use_id"))
                text = _text_of(block.get("content", ""))
                if use in questions:
                    short = questions[use] if len(questions[use]) <= 60 else questions[use][:59]
                    sources.append(Source(f"the operator's answer to “{short}”", text))
                else:
                    sources.append(Source(f"the result of {names.get(use, 'a tool')}", text))
            elif kind == "text" and message.get("role") == "user":
                sources.append(Source("the customer's message", str(block.get("text", ""))))
    return sources


def _needles(value: Any, money: Money | None) -> list[str]:
    """The spellings under which `value` may appear in a message."""
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int) and money is not None:
        major, minor = divmod(value, 10**money.exponent)
        spellings = [str(value), format_money(value, money), f"{major}.{minor:0{money.exponent}d}"]
        if not minor:
            spellings.append(str(major))
        return spellings
    if isinstance(value, int | float):
        return [str(value)]
    if isinstance(value, str) and len(value.strip()) >= SHORTEST_LOOKED_FOR:
        return [value.strip()]
    return []


def _appears(needle: str, text: str) -> bool:
    # Whole words only: order 100 is not in "1003", nor $20 in "$200".
    pattern = r"(?<![\w.])" + re.escape(needle) + r"(?![\w]|\.\d)"
    return re.search(pattern, text, flags=re.IGNORECASE) is not None


def provenance(
    arguments: dict[str, Any], formats: dict[str, Money], sources: Sequence[Source]
) -> dict[str, list[str]]:
    """For each argument, the earlier messages its value appears in (first SOURCES_SHOWN)."""
    found: dict[str, list[str]] = {}
    for name, value in arguments.items():
        needles = _needles(value, formats.get(name))
        labels: list[str] = []
        for source in sources:
            if source.label not in labels and any(_appears(n, source.text) for n in needles):
                labels.append(source.label)
        found[name] = labels[:SOURCES_SHOWN]
    return found


@dataclass
class Argument:
    name: str
    raw: Any
    shown: str
    formatted: bool
    sources: list[str]
    # Whether provenance was looked for at all (nested values and flags are not).
    traced: bool


def arguments(tool: Tool | None, values: Any, sources: Sequence[Source]) -> list[Argument]:
    if not isinstance(values, dict):
        return []
    formats = dict(_presentation(tool).formats)
    traced = provenance(values, formats, sources)
    rows = []
    for name, value in values.items():
        money = formats.get(name)
        rows.append(
            Argument(
                name=name,
                raw=value,
                shown=formatted(value, money),
                formatted=money is not None and isinstance(value, int),
                sources=traced.get(name, []),
                traced=bool(_needles(value, money)),
            )
        )
    return rows


# --- related calls -------------------------------------------------------------------------------


@dataclass
class Related:
    """Another call of the same tool on the same subject, and where it stands."""

    interaction: Interaction
    summary: str
    state: str
    pending: bool


def _state(interaction: Interaction, operation: Operation | None) -> tuple[str, bool]:
    if interaction.status == InteractionStatus.PENDING:
        return "waiting for approval", True
    if interaction.status == InteractionStatus.CANCELLED:
        return "closed: its run was cancelled", False
    by = interaction.responded_by
    if not (interaction.response or {}).get("approved"):
        return f"rejected by {by}", False
    if operation is None:
        return f"approved by {by}, not run yet", False
    if operation.status == OperationStatus.COMPLETED:
        return f"approved by {by}, {'failed' if operation.is_error else 'done'}", False
    if operation.status == OperationStatus.STARTED:
        return f"approved by {by}, outcome unknown (in flight or uncertain)", False
    return f"approved by {by}, {operation.status.replace('_', ' ')}", False


def _summary(tool: Tool | None, arguments: Any) -> str:
    if not isinstance(arguments, dict):
        return ""
    formats = _presentation(tool).formats
    return ", ".join(
        f"{name} {formatted(value, formats.get(name))}"
        for name, value in arguments.items()
        if name in formats
    )


def related_calls(items: Iterable[Interaction]) -> dict[Any, list[Related]]:
    """For each approval in `items`: the other pending and recent approvals of its tool on the
    same subject, newest first. Two queries whatever the number of items (one when no item
    has another call on its subject)."""
    items = list(items)
    names = {item.pk: item.tool_name for item in items}
    keyed = {pk: (names[pk], subject) for pk, subject in subjects_of(items).items()}
    if not keyed:
        return {}
    since = timezone.now() - dt.timedelta(days=RECENT_DAYS)
    tool_names = sorted({name for name, _ in keyed.values()})
    candidates = list(
        Interaction.objects.filter(
            Q(created_at__gte=since) | Q(status=InteractionStatus.PENDING),
            kind=InteractionKind.TOOL_APPROVAL,
            tool_name__in=tool_names,
        )
        .select_related("run")
        # Up to RELATED_SCAN rows at every inbox render: only what a candidate is judged by.
        .only(*RELATED_COLUMNS)
        .order_by("-created_at", "-pk")[:RELATED_SCAN]
    )
    by_subject: dict[tuple[str, str], list[Interaction]] = {}
    for candidate in candidates:
        tool = code_tool(candidate.run, candidate.tool_name)
        subject = subject_of(tool, (candidate.payload or {}).get("arguments"))
        if subject:
            by_subject.setdefault((candidate.tool_name, subject), []).append(candidate)
    # Each item shows the first RELATED_SHOWN others of its subject: only those are looked at
    # further, however many the scan found (a subject with hundreds of pending calls is when
    # the warning matters most).
    shown = {
        pk: list(
            itertools.islice((c for c in by_subject.get(key, []) if c.pk != pk), RELATED_SHOWN)
        )
        for pk, key in keyed.items()
    }
    every = {c.pk: c for others in shown.values() for c in others}.values()
    operations = {
        (op.run_id, op.key): op
        for op in Operation.objects.filter(
            run_id__in={c.run_id for c in every}, name__in=tool_names
        ).only("run_id", "key", "status", "is_error")
    }
    related = {c.pk: _related(c, operations) for c in every}
    return {pk: [related[c.pk] for c in others] for pk, others in shown.items()}


def _related(candidate: Interaction, operations: dict[tuple[Any, str], Operation]) -> Related:
    tool = code_tool(candidate.run, candidate.tool_name)
    state, pending = _state(candidate, operations.get((candidate.run_id, candidate.operation_key)))
    return Related(
        candidate, _summary(tool, (candidate.payload or {}).get("arguments")), state, pending
    )


def subjects_of(items: Iterable[Interaction]) -> dict[Any, str]:
    """The subject of each approval in `items` whose tool declares one."""
    found = {}
    for item in items:
        if item.kind != InteractionKind.TOOL_APPROVAL:
            continue
        tool = code_tool(item.run, item.tool_name)
        subject = subject_of(tool, (item.payload or {}).get("arguments"))
        if subject:
            found[item.pk] = subject
    return found


def summary(interaction: Interaction) -> str:
    """What an approval was about, in one line: "refund_order on order 1003: amount_cents
    $20.00" (the subject and the formatted values), else the arguments, cut short."""
    tool = code_tool(interaction.run, interaction.tool_name)
    arguments = (interaction.payload or {}).get("arguments")
    subject = subject_of(tool, arguments)
    values = _summary(tool, arguments)
    if not values:
        text = json.dumps(arguments, ensure_ascii=False, sort_keys=True, default=str)
        values = text if len(text) <= 120 else text[:119] + "…"
    return f"{interaction.tool_name}{' on ' + subject if subject else ''}: {values}"
