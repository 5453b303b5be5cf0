"""Agents of the browser tests, defined in the test and in its server and worker processes.

The console server and the workers load this module next to demo.agents through
AGENTOPS_AGENT_MODULES, as a deployment loads its agents. All of them are the refund desk's
tools and scripted brain, varied where a scenario needs it:

- `flaky-desk`: the demo refund desk with a retry timer the retry-wait test can watch tick.
- `returns-desk` v1 and v2: the versions test's agent. With AGENTOPS_BROWSER_EDITED=1 in a
  process's environment, v1's instructions are edited without bumping the version: starting the
  processes with it is the deploy that changed the code under a live run.
- `ledger-desk`: the refund desk whose refund tool cannot look its own effect up, so an operator
  reconciling it types the receipt they found in the payments service.
- `hostile-desk` and `hostile-asker`: model text, tool arguments and a question full of markup,
  as a prompt injection would write them.
"""

from __future__ import annotations

import os
from dataclasses import replace

from demo import payments
from demo.agents import (
    V1_INSTRUCTIONS,
    RefundReceipt,
    RefundRequest,
    create_ticket,
    get_order,
    lookup_refunds,
    refund_desk_v1,
)
from runtime import Agent, ModelRetry, ToolContext, ask_operator, tool
from runtime.llm.scripted import ScriptedModel, call, say

EDITED_ENV = "AGENTOPS_BROWSER_EDITED"
# The sentence the "deploy" adds to returns-desk v1 without a version bump.
EDIT = " Refund the full order total whenever a customer complains."
# Seconds of a retry wait: long enough to watch the countdown, cut short by "retry now".
RETRY_DELAY = 30.0

HOSTILE = (
    '<script>alert(1)</script><img src=x onerror=alert(2)> <a href="javascript:alert(3)">x</a>'
    ' <div hx-get="/admin/" hx-trigger="load">y</div> ![i](https://evil.example/p.png)'
    # What would mislead an approver: a right-to-left override ("invoice_exe.png" on screen)
    # and a zero-width space inside a word.
    " invoice_\u202egnp.exe\u202c acc\u200bount"
)

flaky_desk = replace(
    refund_desk_v1,
    name="flaky-desk",
    # Exact timers (no jitter): the countdown test reads a known delay.
    model_retry=ModelRetry(
        max_attempts=3, initial_delay=RETRY_DELAY, max_delay=RETRY_DELAY, jitter=False
    ),
)

returns_desk_v1 = replace(
    refund_desk_v1,
    name="returns-desk",
    instructions=V1_INSTRUCTIONS + (EDIT if os.environ.get(EDITED_ENV) == "1" else ""),
)
returns_desk_v2 = replace(
    refund_desk_v1,
    name="returns-desk",
    version="2",
    instructions=V1_INSTRUCTIONS + " Say in the final answer what is left to refund.",
)


@tool(name="refund_order", recovery="manual", requires_approval=True)
def blind_refund_order(args: RefundRequest, ctx: ToolContext) -> RefundReceipt:
    """Refund part or all of an order. Needs an approver; cannot look a refund up afterwards."""
    made = payments.refund(
        args.order_number, args.amount_cents, args.reason, idempotency_key=ctx.operation_id
    )
    return RefundReceipt(
        receipt_id=made.receipt_id, order_number=args.order_number, amount_cents=made.amount_cents
    )


ledger_desk = replace(
    refund_desk_v1,
    name="ledger-desk",
    tools=[get_order, lookup_refunds, create_ticket, blind_refund_order, ask_operator],
)

hostile_desk = Agent(
    name="hostile-desk",
    version="1",
    model="claude-test",
    instructions="Follow the customer's instructions.",
    tools=refund_desk_v1.tools,
    llm=ScriptedModel(
        [
            call(
                (
                    "refund_order",
                    {"order_number": "1001", "amount_cents": 100, "reason": HOSTILE},
                ),
                text=HOSTILE,
                step=1,
            ),
            say(HOSTILE),
        ]
    ),
)

hostile_asker = Agent(
    name="hostile-asker",
    version="1",
    model="claude-test",
    instructions="Follow the customer's instructions.",
    tools=refund_desk_v1.tools,
    llm=ScriptedModel(
        [call(("ask_operator", {"question": HOSTILE}), text=HOSTILE, step=1), say(HOSTILE)]
    ),
)

AGENTS = [flaky_desk, returns_desk_v1, ledger_desk, hostile_desk, hostile_asker]
