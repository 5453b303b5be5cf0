"""Checks for JSON supplied by people and tools, before anything is stored.

Both databases must be able to store the value as it is: no NaN/Infinity (not JSON), no NUL
characters (PostgreSQL's jsonb refuses them), no lone surrogates (not encodable as UTF-8), a
bounded depth and a bounded size.
"""

from __future__ import annotations

import json
import math
from typing import Any

from django.conf import settings

from runtime.errors import InvalidInput

MAX_DEPTH = 32


def max_bytes() -> int:
    return int(settings.AGENTOPS_MAX_JSON_BYTES)


class _Refused(ValueError):
    """A parse hook's refusal; `loads` names the field in the message."""


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _Refused(f"duplicate key {key[:50]!r} in an object")
        result[key] = value
    return result


def _reject_constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON number")


def loads(text: str, *, what: str = "value") -> Any:
    """Parse JSON text typed by a person, with a clear InvalidInput for anything unusable."""
    if len(text.encode("utf-8", "surrogatepass")) > max_bytes():
        raise InvalidInput(f"the {what} is larger than {max_bytes()} bytes")
    try:
        value = json.loads(
            text, object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant
        )
    except _Refused as exc:
        raise InvalidInput(f"the {what} is not usable JSON: {exc}") from None
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            f"the {what} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except (RecursionError, ValueError):  # nesting beyond the parser, or a huge integer literal
        raise InvalidInput(f"the {what} is nested too deeply or has a number too large") from None
    check(value, what=what)
    return value


def check(value: Any, *, what: str = "value") -> None:
    """Raise InvalidInput unless `value` is plain JSON both databases can store."""
    _walk(value, 0, what)
    try:
        encoded = json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except ValueError:
        raise InvalidInput(
            f"the {what} contains NaN or Infinity, which JSON does not allow"
        ) from None
    if len(encoded) > max_bytes():
        raise InvalidInput(f"the {what} is larger than {max_bytes()} bytes")


def _walk(value: Any, depth: int, what: str) -> None:
    if depth > MAX_DEPTH:
        raise InvalidInput(f"the {what} is nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, str):
        check_text(value, what=what)
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidInput(f"the {what} has a non-string object key")
            check_text(key, what=what)
            _walk(item, depth + 1, what)
    elif isinstance(value, list | tuple):
        for item in value:
            _walk(item, depth + 1, what)
    elif isinstance(value, bool) or value is None:
        pass
    elif isinstance(value, int):
        if abs(value) >= 2**63:
            raise InvalidInput(f"the {what} has a number too large to store exactly")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInput(f"the {what} contains NaN or Infinity, which JSON does not allow")
    else:
        raise InvalidInput(f"the {what} contains a {type(value).__name__}, which is not JSON")


def check_text(text: str, *, what: str = "text", max_length: int | None = None) -> str:
    """Text both databases can store: no NUL characters, no lone surrogates."""
    if "\x00" in text:
        raise InvalidInput(f"the {what} contains a NUL character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"the {what} contains an unpaired surrogate character") from None
    if max_length is not None and len(text) > max_length:
        raise InvalidInput(f"the {what} is longer than {max_length} characters")
    return text
