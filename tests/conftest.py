"""Shared fixtures: an agent with one tool of each recovery policy over a fake service."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from pydantic import BaseModel

from runtime import Agent, ModelRetry, ToolContext, ask_operator, register, tool
from runtime.llm.scripted import ScriptedModel, Turn, call, say
from runtime.registry import code_defines
from tests.support import store_guard

STRICT = os.environ.get("AGENTOPS_STRICT") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """PostgreSQL-only tests belong to the PostgreSQL pass of `make test`: on SQLite they are
    deselected (not skipped), and the strict (CI) form makes that pass mandatory."""
    if os.environ.get("DATABASE_URL"):
        return
    postgres_only = [item for item in items if "postgres" in item.keywords]
    if postgres_only:
        config.hook.pytest_deselected(items=postgres_only)
        items[:] = [item for item in items if "postgres" not in item.keywords]


@pytest.fixture(autouse=True, scope="session")
def _store_guard() -> None:
    store_guard.install()


@pytest.fixture(autouse=True)
def _only_the_store_writes(_store_guard: None) -> Iterator[None]:
    """Every test fails that made product code write the runtime's tables outside the store."""
    seen = len(store_guard.violations)
    yield
    written = store_guard.violations[seen:]
    assert not written, f"written outside runtime.store: {written}"


@pytest.fixture(autouse=True)
def _runtime_settings(settings: Any) -> None:
    settings.AGENTOPS_HEARTBEAT = False
    settings.AGENTOPS_DISPATCH = ""
    settings.AGENTOPS_BULK_DISPATCH = ""
    settings.AGENTOPS_PUBLISH = ""


class Effects:
    """A fake external service: counts what really happened, per operation id.

    `deduplicate` mimics a service that enforces idempotency keys.
    """

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.effects: Counter[str] = Counter()
        self.receipts: dict[str, str] = {}

    def apply(self, operation_id: str, *, deduplicate: bool = False) -> str:
        self.calls[operation_id] += 1
        if deduplicate and operation_id in self.receipts:
            return self.receipts[operation_id]
        self.effects[operation_id] += 1
        receipt = f"rcpt-{len(self.receipts) + 1}"
        self.receipts[operation_id] = receipt
        return receipt

    @property
    def total(self) -> int:
        return sum(self.effects.values())


class Amount(BaseModel):
    order_id: str
    amount_cents: int


class Receipt(BaseModel):
    receipt_id: str


class Lookup(BaseModel):
    order_id: str


class OrderInfo(BaseModel):
    order_id: str
    status: str


EFFECTS = Effects()


@tool(
    recovery="manual",
    lookup=lambda op_id: (
        {"receipt_id": EFFECTS.receipts[op_id]} if op_id in EFFECTS.receipts else None
    ),
)
def charge(args: Amount, ctx: ToolContext) -> Receipt:
    """Move money (not idempotent on its own)."""
    return Receipt(receipt_id=EFFECTS.apply(ctx.operation_id))


@tool(recovery="safe")
def get_order(args: Lookup, ctx: ToolContext) -> OrderInfo:
    """Read an order."""
    EFFECTS.apply(ctx.operation_id)
    return OrderInfo(order_id=args.order_id, status="paid")


@tool(recovery="idempotent")
def open_ticket(args: Lookup, ctx: ToolContext) -> Receipt:
    """Open a ticket; the service deduplicates on the operation id."""
    return Receipt(receipt_id=EFFECTS.apply(ctx.operation_id, deduplicate=True))


@tool(recovery="report")
def notify(args: Lookup, ctx: ToolContext) -> Receipt:
    """Send a message."""
    return Receipt(receipt_id=EFFECTS.apply(ctx.operation_id))


@tool(recovery="manual", requires_approval=True)
def refund(args: Amount, ctx: ToolContext) -> Receipt:
    """Refund an order; needs an approver."""
    return Receipt(receipt_id=EFFECTS.apply(ctx.operation_id, deduplicate=True))


TOOLS = {t.name: t for t in (charge, get_order, open_ticket, notify, refund)}
ARGS = {
    "charge": {"order_id": "A1", "amount_cents": 500},
    "get_order": {"order_id": "A1"},
    "open_ticket": {"order_id": "A1"},
    "notify": {"order_id": "A1"},
    "refund": {"order_id": "A1", "amount_cents": 500},
}


def make_agent(
    turns: list[Turn] | Any,
    *,
    name: str = "clerk",
    version: str = "1",
    instructions: str = "Help the customer.",
    model_retry: ModelRetry | None = None,
    max_steps: int = 10,
) -> Agent:
    return Agent(
        name=name,
        version=version,
        model="claude-test",
        instructions=instructions,
        tools=[*TOOLS.values(), ask_operator],
        model_retry=model_retry,
        max_steps=max_steps,
        llm=ScriptedModel(turns),
    )


def one_call(tool_name: str, args: dict[str, Any] | None = None) -> list[Turn]:
    """A script: call one tool, then answer."""
    return [call((tool_name, args or ARGS[tool_name]), step=1), say("done")]


@pytest.fixture
def effects() -> Iterator[Effects]:
    EFFECTS.__init__()  # type: ignore[misc]
    yield EFFECTS


@pytest.fixture
def define(db: None) -> Iterator[Any]:
    """define(agent, ...) puts agents in the code registry and registers them."""
    stack: list[Any] = []
    defined: list[Agent] = []

    def _define(*agents: Agent, register_them: bool = True) -> Agent:
        # Each call adds to the agents defined so far (a newer definition of a key wins).
        keys = {agent.key for agent in agents}
        defined[:] = [a for a in defined if a.key not in keys] + list(agents)
        ctx = code_defines(*defined)
        ctx.__enter__()
        stack.append(ctx)
        if register_them:
            register(list(agents), actor="admin")
        return agents[0]

    yield _define
    while stack:
        stack.pop().__exit__(None, None, None)


@pytest.fixture
def on_postgres() -> bool:
    return connection.vendor == "postgresql"


__all__ = ["ARGS", "STRICT", "TOOLS", "Effects", "call", "make_agent", "one_call", "say"]
