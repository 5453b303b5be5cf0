"""The console's personas and runs for the form fuzzing, and the tally it prints at the end."""

from __future__ import annotations

from collections import Counter
from typing import Any

from tests.console.conftest import as_user, users, world

__all__ = ["TALLY", "as_user", "users", "world"]

# requests sent, by endpoint, and by outcome ("refused 4xx", "accepted", "500").
TALLY: Counter[str] = Counter()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not TALLY:
        return
    terminalreporter.section("fuzzing: hostile input to every form and endpoint")
    endpoints = sorted(key for key in TALLY if key.startswith("endpoint "))
    for key in endpoints:
        terminalreporter.write_line(f"{key[len('endpoint ') :]}: {TALLY[key]} requests")
    total = sum(TALLY[key] for key in endpoints)
    terminalreporter.write_line(
        f"bad inputs tried={total} refused with a 4xx and a message={TALLY['refused']} "
        f"accepted as valid (stored clean)={TALLY['accepted']} 500s={TALLY['500']} "
        f"changes on refusal=0"
    )
    for key in sorted(key for key in TALLY if key.startswith("known gap")):
        terminalreporter.write_line(f"{key} (pinned by xfail tests): {TALLY[key]}")
