"""Display helpers for the console's templates.

Everything here returns plain text for the template engine to escape, or builds HTML with
format_html, which escapes every value: agent-controlled data never becomes markup.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
import unicodedata
import uuid
from typing import Any

from django import template
from django.conf import settings
from django.urls import get_script_prefix, get_urlconf, reverse
from django.utils import timezone
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import Truncator, add_truncation_text, calculate_truncate_chars_length

from runtime import Money

register = template.Library()

# Characters that change how text around them is shown without being seen themselves: the
# bidirectional controls (U+202E turns "gnp.exe" into what looks like "exe.png") and the
# zero-width characters (two ids that look equal but differ). Each is shown by its code point.
INVISIBLE = {
    "\u00ad": "soft hyphen",
    "\u061c": "Arabic letter mark",
    "\u115f": "Hangul choseong filler",
    "\u1160": "Hangul jungseong filler",
    "\u180e": "Mongolian vowel separator",
    "\u200b": "zero width space",
    "\u200c": "zero width non-joiner",
    "\u200d": "zero width joiner",
    "\u200e": "left-to-right mark",
    "\u200f": "right-to-left mark",
    "\u202a": "left-to-right embedding",
    "\u202b": "right-to-left embedding",
    "\u202c": "pop directional formatting",
    "\u202d": "left-to-right override",
    "\u202e": "right-to-left override",
    "\u2060": "word joiner",
    "\u2061": "function application",
    "\u2062": "invisible times",
    "\u2063": "invisible separator",
    "\u2064": "invisible plus",
    "\u2066": "left-to-right isolate",
    "\u2067": "right-to-left isolate",
    "\u2068": "first strong isolate",
    "\u2069": "pop directional isolate",
    "\u3164": "Hangul filler",
    "\ufeff": "zero width no-break space",
}
_INVISIBLE = re.compile("[" + "".join(INVISIBLE) + "]")
CURRENCY_SIGNS = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥"}


def reveal(value: Any) -> SafeString:
    """`value` as escaped text in which every invisible character is shown by its code point.

    The characters themselves are left out, so none of them can reorder or hide what follows.
    """
    text = str(value)
    parts: list[str] = []
    last = 0
    for found in _INVISIBLE.finditer(text):
        char = found.group()
        parts.append(escape(text[last : found.start()]))
        parts.append(
            format_html(
                '<span class="hidden-char" title="{}">{}</span>',
                INVISIBLE[char],
                f"U+{ord(char):04X}",
            )
        )
        last = found.end()
    parts.append(escape(text[last:]))
    # Safe: every part was escaped or built by format_html.
    return mark_safe("".join(parts))


@register.filter
def has_invisible(value: Any) -> bool:
    return _INVISIBLE.search(str(value)) is not None


@register.filter
def shown(value: Any, length: int | None = None) -> SafeString:
    """Agent- or user-supplied text for a page: escaped, invisible characters made visible;
    with `length` (`{{ run.input|shown:80 }}`), cut to that many characters first."""
    text = "" if value is None else str(value)
    return reveal(text if length is None else clipped(text, int(length)))


def clipped(text: str, length: int) -> str:
    """`text` cut to `length` characters, "…" last, exactly as Django's truncatechars cuts it.

    truncatechars walks the text a character at a time to skip combining characters, which it
    does not count: a list of 50 rows that cut two texts each spent 7 % of its time there. Text
    that fits needs no walk, and ASCII text has no combining characters to skip."""
    text = unicodedata.normalize("NFC", text)  # as truncatechars counts
    if length <= 0:
        return ""
    if len(text) <= length:
        return text
    if text.isascii():
        return add_truncation_text(text[: calculate_truncate_chars_length(length, None)], None)
    return Truncator(text).chars(length)


def format_money(value: Any, money: Money) -> str:
    """An integer amount in minor units as its amount in the currency ("$40.00")."""
    if isinstance(value, bool) or not isinstance(value, int):
        return str(value)
    sign = "-" if value < 0 else ""
    major, minor = divmod(abs(value), 10**money.exponent)
    amount = f"{major:,}" + (f".{minor:0{money.exponent}d}" if money.exponent else "")
    symbol = CURRENCY_SIGNS.get(money.currency)
    return f"{sign}{symbol}{amount}" if symbol else f"{sign}{amount} {money.currency}"


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


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


@register.filter
def pretty_json(value: Any) -> SafeString:
    """Indented JSON, escaped, with invisible characters made visible."""
    return reveal(_pretty(value))


@register.filter
def json_text(value: Any) -> str:
    """The whole value as one line of JSON (for a form field that carries it back)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


@register.filter
def compact_json(value: Any, length: int = 140) -> SafeString:
    """One line of JSON, cut at `length` characters, invisible characters made visible."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return reveal(text if len(text) <= length else text[: length - 1] + "…")


@register.filter
def seconds(value: dt.timedelta) -> str:
    """A duration as people say it: "0.42 s", "12 s", "3 min 05 s"."""
    total = value.total_seconds()
    if total < 10:
        return f"{total:.2f} s"
    if total < 60:
        return f"{total:.0f} s"
    minutes, rest = divmod(round(total), 60)
    return f"{minutes} min {rest:02d} s"


@register.filter
def lockout_duration(value: dt.timedelta) -> str:
    """A lockout's length as people say it: "15 minutes", "1 hour 30 minutes"."""
    minutes = max(1, round(value.total_seconds() / 60))
    hours, rest = divmod(minutes, 60)
    parts = [f"{hours} hour{'s' if hours != 1 else ''}"] if hours else []
    if rest or not hours:
        parts.append(f"{rest} minute{'s' if rest != 1 else ''}")
    return " ".join(parts)


@register.filter
def took(op: Any) -> str:
    """How long an operation took from its intent to its outcome ("" without an outcome)."""
    if op.outcome_at is None:
        return ""
    return seconds(op.outcome_at - op.intent_at)


@register.filter
def short_id(value: Any) -> str:
    """The first eight characters of an id: enough to tell runs apart on a page."""
    return str(value)[:8]


# Reversed in place of the id, then cut out: what a URL of one id holds around it.
_ANY_ID = uuid.UUID(int=0)


@functools.cache
def _around_id(name: str, script_prefix: str, urlconf: str) -> tuple[str, str]:
    # `script_prefix` keys the cache only: reverse() reads the current one itself.
    prefix, _, suffix = reverse(name, urlconf, args=[_ANY_ID]).partition(str(_ANY_ID))
    return prefix, suffix


@register.filter
def url_of(ident: Any, name: str) -> str:
    """`{% url name ident %}` for a view of one UUID: reversed once per process and filled in,
    where a list would reverse it once per row (a tenth of the runs list's time, profiled)."""
    # The script prefix and the URLconf are what reverse() reads besides the name.
    urlconf = get_urlconf() or settings.ROOT_URLCONF
    prefix, suffix = _around_id(name, get_script_prefix(), urlconf)
    return f"{prefix}{ident}{suffix}"


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
def tool_result_text(block: dict[str, Any]) -> SafeString:
    """A tool_result block's content, pretty-printed when it is JSON."""
    content = block.get("content", "")
    if isinstance(content, str):
        try:
            return pretty_json(json.loads(content))
        except ValueError:
            return reveal(content)
    return pretty_json(content)


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


def _when(value: dt.datetime | None, mark: str) -> SafeString | str:
    # The absolute time in UTC is the text without JavaScript; console.js rewrites it to
    # "3m ago · 2025-01-02 16:01:05 CET" in the operator's time zone. Rendered the same at any
    # moment, so a pushed fragment equals a fresh page.
    if value is None:
        return "—"
    utc = value.astimezone(dt.UTC)
    # Safe without escaping: both are digits, "-", ":", ".", "+", "T", " " and "UTC". (A list
    # shows two a row: built with format_html, they were a tenth of the runs list's time.)
    return mark_safe(f'<time datetime="{iso(utc)}" {mark}>{utc:%Y-%m-%d %H:%M:%S} UTC</time>')


@register.simple_tag
def when(value: dt.datetime | None) -> SafeString | str:
    """A moment, the one way the console shows one: relative and absolute, both as text."""
    return _when(value, "data-when")


# The older names of the one format, kept for the templates that use them.
at = register.simple_tag(when, name="at")
clock = register.simple_tag(when, name="clock")
ago = register.simple_tag(when, name="ago")


@register.simple_tag
def countdown(value: dt.datetime | None) -> SafeString | str:
    """A countdown to `value` ("in 0:42"), ticking client-side from the absolute time."""
    if value is None:
        return "—"
    # The countdown's text is only the time left; the exact time is beside it, as text.
    return format_html(
        '{}<span class="countdown-at" data-at="{}"></span>',
        _when(value, "data-countdown"),
        iso(value),
    )


@register.simple_tag
def status_badge(status: str) -> SafeString:
    return format_html(
        '<span class="badge status-{}">{}</span>', status.replace("_", "-"), status_label(status)
    )


@register.filter
def field_of(value: Any, name: str) -> Any:
    """`value[name]` of a JSON object; None when it is not one or has no such field."""
    return value.get(name) if isinstance(value, dict) else None
