"""Operation keys and ids, written and read here only.

A key names one operation within its run and is the same on every replay: `step-3/model` for the
model request of step 3, `step-3/tool/toolu_01` for the tool call toolu_01 the model asked for in
step 3. The operation id, the run id and the key, is what a tool receives as its idempotency key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_KEY = re.compile(r"step-(?P<step>[1-9][0-9]*)/(?:(?P<model>model)|tool/(?P<call>.+))")


def model_key(step: int) -> str:
    """The key of step `step`'s model request."""
    return f"step-{step}/model"


def tool_key(step: int, call_id: str) -> str:
    """The key of the tool call `call_id` of step `step`."""
    return f"step-{step}/tool/{call_id}"


@dataclass(frozen=True)
class Key:
    """A key read back: its step, and the tool call's id ("" for a model request)."""

    step: int
    call_id: str = ""

    @property
    def is_model(self) -> bool:
        return not self.call_id


def parse_key(key: str) -> Key | None:
    """The parts of `key`, or None if it is not an operation key."""
    match = _KEY.fullmatch(key)
    if match is None:
        return None
    return Key(int(match["step"]), match["call"] or "")


def operation_id(run_id: Any, key: str) -> str:
    """The operation's external id: stable across crashes, retries and workers (P2)."""
    return f"{run_id}:{key}"
