"""The notification kinds: which committed events notify people, and how they are titled.

A table, so that a new kind is one row. The approval policy's timers emit `approval_expiring`
and `approval_escalated` (runtime.work.fire_due_timers).
"""

from __future__ import annotations

from dataclasses import dataclass

from runtime.models import EventKind


@dataclass(frozen=True)
class NotificationKind:
    name: str
    label: str
    # The event kinds (runtime.models.Event.kind) that raise this notification.
    events: frozenset[str]
    # Whether the link points at the interaction (a decision page) or at the run.
    links_interaction: bool


KINDS: dict[str, NotificationKind] = {
    kind.name: kind
    for kind in (
        NotificationKind(
            "approval_requested",
            "A tool call waits for approval",
            frozenset({EventKind.TOOL_APPROVAL_REQUESTED}),
            links_interaction=True,
        ),
        NotificationKind(
            "question_asked",
            "An agent asks a question",
            frozenset({EventKind.QUESTION_REQUESTED}),
            links_interaction=True,
        ),
        NotificationKind(
            "needs_attention",
            "A run needs attention",
            frozenset({EventKind.BLOCKED}),
            links_interaction=False,
        ),
        NotificationKind(
            "approval_expiring",
            "An approval is about to expire",
            frozenset({"approval_expiring"}),
            links_interaction=True,
        ),
        NotificationKind(
            "approval_escalated",
            "An approval was escalated",
            frozenset({"approval_escalated"}),
            links_interaction=True,
        ),
    )
}

KIND_CHOICES = [(kind.name, kind.label) for kind in KINDS.values()]


def kind_for_event(event_kind: str) -> NotificationKind | None:
    for kind in KINDS.values():
        if event_kind in kind.events:
            return kind
    return None


def notifying_event_kinds() -> list[str]:
    return sorted({event for kind in KINDS.values() for event in kind.events})
