"""What the operators of the PostgreSQL restart test do, on the test's own server.

The test process's Django keeps to the test database, so these run in a process of their own,
as `manage.py shell -c "..."` with DATABASE_URL pointing at the own server, the reliability
agents in AGENTOPS_AGENT_MODULES and the fake service's folder in AGENTOPS_TEST_EFFECTS (see
test_postgres_restart). Those with an answer print it as JSON on their last line.
"""

from __future__ import annotations

import json

OPERATOR = "rita-restart"


def run_plan(n: int) -> str:
    """A run touching every recovery policy: read and open a ticket, charge, notify."""
    from tests.reliability.agents import plan

    order = {"order_id": f"R{n}"}
    return plan(
        [("lookup", {**order, "seconds": 0.2}), ("ticket", {**order, "seconds": 0.2})],
        [("charge", {**order, "seconds": 0.3})],
        [("notify", order)],
    )


def register_agent() -> None:
    """Register the reliability agent, as an agent admin would before the first run."""
    from runtime import register
    from tests.reliability.agents import reliability

    register([reliability], actor=OPERATOR)


def submit_runs(first: int, count: int) -> None:
    """Submit runs `first` to `first + count - 1`; their messages go to the broker on commit."""
    from runtime import submit

    ids = [
        str(submit("reliability", run_plan(n), actor=OPERATOR).pk)
        for n in range(first, first + count)
    ]
    print(json.dumps(ids))


def reconcile() -> None:
    """Settle every call a run is blocked on from the fake service's records: with its receipt
    when it took effect, else as not run (a charge runs once more, a notice is reported to the
    model as not sent)."""
    import os
    from pathlib import Path

    from runtime import resolve
    from runtime.control import NOT_RUN_AGAIN, NOT_RUN_TELL_MODEL
    from runtime.keys import operation_id
    from runtime.models import AttentionReason, Operation, Run, RunStatus
    from tests.reliability.agents import EFFECTS_ENV, read_records
    from tests.reliability.chaos_support import receipt_of

    effects = read_records(Path(os.environ[EFFECTS_ENV])).effects
    settled = []
    blocked = Run.objects.filter(
        status=RunStatus.NEEDS_ATTENTION, attention_reason=AttentionReason.UNCERTAIN_OPERATION
    )
    for run in blocked:
        key = run.blocked_operation
        op_id = operation_id(run.pk, key)
        if effects[op_id]:
            receipt = {"receipt_id": receipt_of(op_id)}
            evidence = f"receipt {receipt['receipt_id']} in the service's log for {op_id}"
            resolve(run.pk, key, receipt, evidence=evidence, actor=OPERATOR)
        else:
            name = Operation.objects.get(run=run, key=key).name
            outcome = NOT_RUN_AGAIN if name == "charge" else NOT_RUN_TELL_MODEL
            evidence = f"no record of {op_id} in the service's log"
            resolve(run.pk, key, evidence=evidence, actor=OPERATOR, outcome=outcome)
        settled.append(op_id)
    print(json.dumps(settled))
