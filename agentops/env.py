"""Typed environment helpers that fail loudly on malformed values.

A number's range is stated where it is read (`at_least`, `above`): a value outside it stops the
process at start with the setting's name, where it would otherwise fail later or quietly, e.g. a
lease of `nan` seconds at every claim, or a sweep of 0 seconds spinning."""

from __future__ import annotations

import math
import os

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), got {raw!r}")


def env_float(
    name: str, default: float, *, at_least: float | None = None, above: float | None = None
) -> float:
    """A finite number (the default when unset or empty), within the range given."""
    raw = _given(name)
    if raw is None:
        return default
    value = _number(name, raw, "a number")
    if not math.isfinite(value):
        raise ImproperlyConfigured(f"{name} must be a finite number, got {raw!r}")
    _in_range(name, raw, value, at_least, above)
    return value


def env_int(name: str, default: int, *, at_least: int | None = None) -> int:
    """A whole number (the default when unset or empty), at least `at_least`. Written as a
    number with no fraction ("10.0", "1e3") it is taken; "2.5" is refused, not cut to 2."""
    raw = _given(name)
    if raw is None:
        return default
    number = _number(name, raw, "a whole number")
    if not number.is_integer():
        raise ImproperlyConfigured(f"{name} must be a whole number, got {raw!r}")
    value = int(number)
    _in_range(name, raw, value, at_least, None)
    return value


def _given(name: str) -> str | None:
    """The variable's text, or None when it is unset or empty (the setting's default)."""
    raw = os.environ.get(name)
    return None if raw is None or raw == "" else raw


def _number(name: str, raw: str, what: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be {what}, got {raw!r}") from None


def _in_range(
    name: str, raw: str, value: float, at_least: float | None, above: float | None
) -> None:
    if at_least is not None and value < at_least:
        raise ImproperlyConfigured(f"{name} must be at least {at_least:g}, got {raw!r}")
    if above is not None and value <= above:
        raise ImproperlyConfigured(f"{name} must be more than {above:g}, got {raw!r}")


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]
