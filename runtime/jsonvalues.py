"""Checks for JSON supplied by people and tools, before anything is stored.

Both databases must be able to store the value as it is: no NaN/Infinity (not JSON), no NUL
characters (PostgreSQL's jsonb refuses them), no lone surrogates (not encodable as UTF-8), a
bounded depth and a bounded size.

`normalized` gives a value as the databases give it back, so that what the engine hashes and
shows the model on its first pass is what it rebuilds from the log on a replay (V4).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from decimal import Decimal
from json import encoder as _encoder
from typing import Any

from django.conf import settings

from runtime.errors import InvalidInput

MAX_DEPTH = 32


def _dumps(
    *,
    sort_keys: bool = False,
    ensure_ascii: bool = True,
    separators: tuple[str, str] = (", ", ": "),
) -> Callable[[Any], str]:
    """`json.dumps` with these options, the same text, with its encoder built once: json.dumps
    builds one at every call, which costs as much as encoding a small value, and a run's
    records encode hundreds of them. Unlike json.dumps, it does not look for a value that
    contains itself (the values here are trees: a cycle would end in RecursionError)."""
    make = getattr(_encoder, "c_make_encoder", None)  # not in typeshed
    if make is None:  # no C accelerator: json.dumps itself
        return functools.partial(
            json.dumps, sort_keys=sort_keys, ensure_ascii=ensure_ascii, separators=separators
        )
    escape = _encoder.encode_basestring_ascii if ensure_ascii else _encoder.encode_basestring
    item, key = separators
    encode = make(None, json.JSONEncoder().default, escape, None, key, item, sort_keys, False, True)

    def dumps(value: Any) -> str:
        return "".join(encode(value, 0))

    return dumps


# A stored value's text, as Django's JSONField writes it (json.dumps's defaults).
dumps = _dumps()
# The canonical form that digests hash: sorted keys, no spaces, characters as they are.
canonical = _dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
# A tool result as the model is shown it: sorted keys, characters as they are.
shown = _dumps(sort_keys=True, ensure_ascii=False)


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
    checked(value, what=what)


def checked(value: Any, *, what: str = "value") -> Any:
    """`check`, then `normalized`, in one walk of the value: what the engine stores of a result
    or a model's output (the hot path walks each once, not twice)."""
    bound = [0]
    result = _walk(value, 0, what, bound)
    if bound[0] > max_bytes():  # only then can it be too large: encoded to measure it exactly
        try:
            encoded = json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")
        except ValueError:
            raise InvalidInput(
                f"the {what} contains NaN or Infinity, which JSON does not allow"
            ) from None
        if len(encoded) > max_bytes():
            raise InvalidInput(f"the {what} is larger than {max_bytes()} bytes")
    return result


# What a scalar's JSON text may take at most, in bytes: a float's repr is at most 24 characters,
# an int under 2**63 at most 20, true, false and null at most 5.
_SCALAR_BYTES = 24


def _walk(value: Any, depth: int, what: str, bound: list[int]) -> Any:
    """Check `value` (raise InvalidInput) and return it `normalized`; add to `bound` at least
    the bytes of its JSON text (json.dumps with ensure_ascii=False, as UTF-8), so that a value
    whose bound is within the limit needs no encoding to be known within it."""
    if depth > MAX_DEPTH:
        raise InvalidInput(f"the {what} is nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, str):
        # A character is at most 4 bytes in UTF-8, or 6 escaped (\u001f); and two quotes.
        bound[0] += 6 * len(value) + 2
        return value if _plain(value) else check_text(value, what=what)
    if isinstance(value, dict):
        size = 2 + 4 * len(value)  # the braces, each ": " and ", "
        copied = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidInput(f"the {what} has a non-string object key")
            size += 6 * len(key) + 2
            if not _plain(key):
                check_text(key, what=what)
            copied[key] = _walk(item, depth + 1, what, bound)
        bound[0] += size
        return copied
    if isinstance(value, list | tuple):
        bound[0] += 2 + 2 * len(value)  # the brackets and each ", "
        return [_walk(item, depth + 1, what, bound) for item in value]
    bound[0] += _SCALAR_BYTES
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        if abs(value) >= 2**63:
            raise InvalidInput(f"the {what} has a number too large to store exactly")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInput(f"the {what} contains NaN or Infinity, which JSON does not allow")
        return _jsonb_number(value)
    raise InvalidInput(f"the {what} contains a {type(value).__name__}, which is not JSON")


def _plain(text: str) -> bool:
    # Most text is ASCII without NUL, which check_text passes without encoding it to see.
    return text.isascii() and "\x00" not in text


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


def normalized(value: Any) -> Any:
    """`value` as both databases return it after storing it: the engine's canonical JSON.

    PostgreSQL's jsonb keeps a number as a decimal and prints it without an exponent, so a
    float comes back rewritten: 1e20 as the integer 100000000000000000000, -0.0 as 0.0 (1.0
    and 1.5e-07 come back as they were). SQLite keeps the text as written. Rewriting every
    float the way jsonb does, before anything is stored or hashed, makes the value a fixed
    point of both: stored anywhere and read back, it is equal and hashes the same.
    """
    if isinstance(value, float):
        return _jsonb_number(value)
    if isinstance(value, dict):
        return {key: normalized(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [normalized(item) for item in value]
    return value


def _jsonb_number(number: float) -> int | float:
    # json.dumps writes a float as repr(); jsonb parses that text into a decimal with its
    # scale, and prints it in positional notation, without the sign of a zero.
    exact = Decimal(repr(number))
    text = format(abs(exact) if exact.is_zero() else exact, "f")
    # json.loads reads a number without a point as an int, as Django does on the way back.
    return float(text) if "." in text else int(text)
