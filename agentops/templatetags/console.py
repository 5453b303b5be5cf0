"""Display helpers for the console's templates.

Everything here returns plain text for the template engine to escape, or builds HTML with
format_html, which escapes every value: agent-controlled data never becomes markup.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()

EVENT_LABELS = {
    "submitted": "Submitted",
    "claimed": "Claimed by a worker",
    "lease_expired": "Lease expired, taken over",
    "intent": "Intent written",
    "outcome": "Outcome written",
    "tool_approval_requested": "Approval requested",
    "question_requested": "Question asked",
    "approval_granted": "Approved",
    "approval_rejected": "Rejected",
    "question_answered": "Answered",
    "waiting": "Waiting",
    "blocked": "Blocked",
    "operation_resolved": "Reconciled",
    "retry_scheduled": "Retry scheduled",
    "retried": "Retried",
    "retried_now": "Retried now",
    "cancelled": "Cancelled",
    "completed": "Completed",
    "failed": "Failed",
    "agent_registered": "Version registered",
    "agent_unregistered": "Version unregistered",
}


@register.filter
def pretty_json(value: Any) -> str:
    """Indented JSON text (escaped by the template like any other text)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


@register.filter
def json_text(value: Any) -> str:
    """The whole value as one line of JSON (for a form field that carries it back)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


@register.filter
def compact_json(value: Any, length: int = 140) -> str:
    """One line of JSON, cut at `length` characters."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= length else text[: length - 1] + "…"


@register.filter
def short_id(value: Any) -> str:
    """The first eight characters of an id: enough to tell runs apart on a page."""
    return str(value)[:8]


@register.filter
def event_label(kind: str) -> str:
    return EVENT_LABELS.get(kind, kind.replace("_", " ").capitalize())


@register.filter
def status_label(status: str) -> str:
    return status.replace("_", " ")


@register.filter
def css(value: str) -> str:
    """A status or kind as a CSS class suffix."""
    return str(value).replace("_", "-")


@register.filter
def iso(value: dt.datetime | None) -> str:
    """An ISO 8601 time in UTC with milliseconds, which every browser's Date.parse reads."""
    if value is None:
        return ""
    return value.astimezone(dt.UTC).isoformat(timespec="milliseconds")


@register.filter
def blocks(content: Any) -> list[dict[str, Any]]:
    """A message's content as a list of blocks (a plain string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b if isinstance(b, dict) else {"type": "text", "text": str(b)} for b in content]
    return [{"type": "text", "text": str(content)}]


@register.filter
def tool_result_text(block: dict[str, Any]) -> str:
    """A tool_result block's content, pretty-printed when it is JSON."""
    content = block.get("content", "")
    if isinstance(content, str):
        try:
            return pretty_json(json.loads(content))
        except ValueError:
            return content
    return pretty_json(content)


def _utc(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@register.simple_tag(takes_context=True)
def page_query(context: template.Context, **cursor: str) -> str:
    """The current query string with the page cursor replaced by `cursor` (before/after)."""
    query = context["request"].GET.copy()
    for name in ("before", "after"):
        query.pop(name, None)
    for name, value in cursor.items():
        if value:
            query[name] = value
    return "?" + query.urlencode()


@register.simple_tag
def server_now() -> str:
    """The server's time, so the browser can correct its countdowns for clock skew."""
    return iso(timezone.now())


@register.simple_tag
def at(value: dt.datetime | None) -> SafeString | str:
    """An absolute time."""
    if value is None:
        return "—"
    return format_html('<time datetime="{}">{}</time>', iso(value), _utc(value))


@register.simple_tag
def clock(value: dt.datetime | None) -> SafeString | str:
    """A compact time for tables and timelines ("Nov 29 16:01:05"); the full time on hover."""
    if value is None:
        return "—"
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        iso(value),
        _utc(value),
        value.astimezone(dt.UTC).strftime("%b %d %H:%M:%S"),
    )


@register.simple_tag
def ago(value: dt.datetime | None) -> SafeString | str:
    """A time shown as its age ("3m ago"), ticking client-side; absolute without JavaScript.

    Rendered the same at any moment, so a pushed fragment equals a fresh page.
    """
    if value is None:
        return "—"
    return format_html(
        '<time datetime="{}" title="{}" data-age>{}</time>', iso(value), _utc(value), _utc(value)
    )


@register.simple_tag
def countdown(value: dt.datetime | None) -> SafeString | str:
    """A countdown to `value` ("in 0:42"), ticking client-side from the absolute time."""
    if value is None:
        return "—"
    return format_html(
        '<time datetime="{}" title="{}" data-countdown>{}</time>',
        iso(value),
        _utc(value),
        _utc(value),
    )


@register.simple_tag
def status_badge(status: str) -> SafeString:
    return format_html(
        '<span class="badge status-{}">{}</span>', status.replace("_", "-"), status_label(status)
    )
