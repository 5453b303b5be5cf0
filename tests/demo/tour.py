"""The README's tour, step by step, as an operator does it: run as a script on a seeded DB.

A worker would advance the runs after each action; here `run_until_idle` plays that worker.
Prints one JSON object with what each step observed.
"""

from __future__ import annotations

import json

import django

django.setup()

from django.test import Client  # noqa: E402
from django.urls import reverse  # noqa: E402
from django.utils import timezone  # noqa: E402

from demo.models import Refund  # noqa: E402
from runtime import resume  # noqa: E402
from runtime.models import AgentVersion, Interaction, Run  # noqa: E402
from runtime.testing import run_until_idle  # noqa: E402

seen: dict[str, object] = {}


def log_in(username: str, password: str) -> Client:
    """Through the login form, as the reader does with a login `make run` printed."""
    client = Client()
    done = client.post(reverse("login"), {"username": username, "password": password})
    assert done.status_code == 302, done.content.decode()[-500:]
    return client


operator = log_in("operator", "tour-password")
agent_admin = log_in("agent-admin", "tour-admin-password")


def pending(kind: str, text: str) -> Interaction:
    return next(
        i
        for i in Interaction.objects.filter(status="pending", kind=kind)
        if text in json.dumps(i.payload)
    )


# 1. Approve a refund.
approval = pending("tool_approval", '"1001"')
page = operator.get(f"/interactions/{approval.pk}/").content.decode()
seen["approval_page"] = all(s in page for s in ("refund_order", "1001", "4000"))
operator.post(f"/interactions/{approval.pk}/respond/", {"decision": "approve"})
run = run_until_idle(approval.run_id)
seen["approved"] = [
    run.status,
    Refund.objects.filter(order__number="1001").count(),
    "receipt re_" in run.output,
]
seen["timeline_names_approver"] = "operator" in operator.get(f"/runs/{run.pk}/").content.decode()

# 2. Answer a question.
question = pending("question", "Which order")
operator.post(f"/interactions/{question.pk}/respond/", {"answer": "1003"})
run_until_idle(question.run_id)
how_much = pending("question", "How much of order 1003")
operator.post(f"/interactions/{how_much.pk}/respond/", {"answer": "$20"})
run = run_until_idle(how_much.run_id)
seen["answered"] = [run.status, run.interactions.get(status="pending").payload["arguments"]]

# 3. Reconcile the uncertain refund.
blocked = Run.objects.get(attention_reason="uncertain_operation")
page = operator.get(f"/runs/{blocked.pk}/reconcile/").content.decode()
receipt = Refund.objects.get(order__number="1002")
seen["reconcile_page"] = [
    f"{blocked.pk}:{blocked.blocked_operation}" in page,
    receipt.receipt_id in page,
]
bad = operator.post(
    f"/runs/{blocked.pk}/resolve/",
    {
        "operation_key": blocked.blocked_operation,
        "result": '{"receipt_id": "made-up"}',
        "evidence": "none",
    },
)
seen["bad_result"] = [bad.status_code, Run.objects.get(pk=blocked.pk).status]
result = json.dumps(
    {"receipt_id": receipt.receipt_id, "order_number": "1002", "amount_cents": 2500}
)
operator.post(
    f"/runs/{blocked.pk}/resolve/",
    {
        "operation_key": blocked.blocked_operation,
        "result": result,
        "evidence": f"{receipt.receipt_id} seen in payments",
    },
)
run = run_until_idle(blocked.pk)
seen["reconciled"] = [run.status, Refund.objects.filter(order__number="1002").count()]

# 4. Watch a retry countdown; it is still counting down however long the reader took to get here
# (an hour from the seed), then retry now: the provider is still down; retry now again.
waiting = Run.objects.get(status="retry_wait")
seen["countdown_left_minutes"] = (waiting.next_attempt_at - timezone.now()).total_seconds() // 60
seen["timer_not_due"] = str(waiting.pk) not in resume()
first_due = waiting.next_attempt_at
operator.post(f"/runs/{waiting.pk}/retry/")
run = run_until_idle(waiting.pk)
seen["retry_now_1"] = [
    run.status,
    run.next_attempt_at is not None and run.next_attempt_at > first_due,
]
operator.post(f"/runs/{waiting.pk}/retry/")
run = run_until_idle(waiting.pk)
seen["retry_now_2"] = [run.status, run.interactions.get(status="pending").tool_name]

# 5. Restore a version: the board shows the difference; the agent admin's unregister of version 1
# is refused while the run needs it; the operator retries the group and it finishes on v1; then
# the unregister goes through.
board = operator.get("/versions/").content.decode()
seen["board"] = ["instructions" in board, "Refund the full order total" in board]
stopped = Run.objects.get(attention_reason="fingerprint_mismatch")


def unregister_v1() -> str:
    return agent_admin.post(
        "/admin/agentops/agentversion/",
        {"action": "unregister", "_selected_action": "refund-desk:1"},
        follow=True,
    ).content.decode()


refused = unregister_v1()
seen["unregister_refused"] = [
    str(stopped.pk) in refused,
    AgentVersion.objects.get(agent="refund-desk", version="1").unregistered_at is None,
]
operator.post("/versions/refund-desk/1/retry/")
run = run_until_idle(stopped.pk)
seen["restored"] = [run.status, run.version, Refund.objects.filter(order__number="1005").count()]
unregister_v1()
seen["unregistered_after"] = (
    AgentVersion.objects.get(agent="refund-desk", version="1").unregistered_at is not None
)
print(json.dumps(seen))
