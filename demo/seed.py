"""Seed the demo: customers and orders, and runs in every state an operator meets.

Every run is produced by the real runtime: submitted, advanced by a worker, answered by a
person. The uncertain refund comes from a worker process that is really killed (SIGKILL) after
the payments service refunded and before the outcome was written.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import transaction
from django.utils import timezone

from demo.agents import refund_desk_v1, refund_desk_v2
from demo.models import Customer, Order
from runtime import register, respond, submit
from runtime.models import ApprovalRule, ExpiryOutcome, Run
from runtime.registry import code_defines
from runtime.testing import run_until_idle

AGENT = "refund-desk"
SEEDER = "demo-seed"

CUSTOMERS = [
    ("Ada Okafor", "ada@example.com", "1001", "Stand mixer", 24900),
    ("Bram de Vries", "bram@example.com", "1002", "Noise-cancelling headphones", 18900),
    ("Chen Wei", "chen@example.com", "1003", "Espresso grinder", 13900),
    ("Dara Byrne", "dara@example.com", "1004", "Hiking boots", 15900),
    ("Eva Lindqvist", "eva@example.com", "1005", "Rain jacket", 8900),
    ("Farid Haddad", "farid@example.com", "1006", "Desk lamp", 4900),
    ("Grace Mensah", "grace@example.com", "1007", "Standing desk", 52900),
    ("Hugo Martin", "hugo@example.com", "1008", "Office chair", 31900),
]


def seeded() -> bool:
    return Order.objects.exists()


def seed(log=print) -> None:
    """Create the demo data once; a second call does nothing."""
    if seeded():
        log("demo data already present")
        return
    create_orders()
    # Before v2 existed: two runs on v1.
    register([refund_desk_v1], actor=SEEDER)
    _version_blocked_run(log)
    _uncertain_refund(log)
    register([refund_desk_v2], actor=SEEDER)
    _approval_rules()
    _completed_refund()
    _answered_status()
    _failed_run()
    _retry_wait()
    _question()
    _waiting_approval()
    counts = {
        s: Run.objects.filter(status=s).count()
        for s in ("waiting", "needs_attention", "retry_wait", "completed", "failed")
    }
    log("demo runs: " + ", ".join(f"{n} {s}" for s, n in counts.items()))


def _approval_rules() -> None:
    """An approval rule as data: refunds over $150 are decided by the operators, and one left
    waiting a working day is flagged."""
    ApprovalRule.objects.create(
        name="large refunds",
        description="Refunds over $150 go to the operators; flagged after a working day.",
        agent=AGENT,
        tool="refund_order",
        condition={">": [{"var": "amount_cents"}, 15000]},
        approver_group=Group.objects.get(name="operators"),
        expires_after=dt.timedelta(hours=8),
        on_expiry=ExpiryOutcome.KEEP_WAITING,
    )


def create_orders() -> None:
    """The customers and their orders, without any run."""
    placed = timezone.now() - dt.timedelta(days=9)
    with transaction.atomic():
        for i, (name, email, number, item, total) in enumerate(CUSTOMERS):
            customer = Customer.objects.create(name=name, email=email)
            Order.objects.create(
                number=number,
                customer=customer,
                item=item,
                total_cents=total,
                placed_at=placed + dt.timedelta(hours=7 * i),
            )


def _start(message: str) -> Run:
    return run_until_idle(submit(AGENT, message, actor="support-inbox").pk)


def _approve(run: Run, approver: str) -> None:
    respond(run.interactions.get(status="pending").pk, {"approved": True}, actor=approver)


def _version_blocked_run(log) -> None:
    """A v1 run that a deploy stopped: v1's instructions were edited without a version bump.

    The run waits for approval on the original v1; the approval is then picked up by a worker
    running the edited code, which blocks the run without calling anything. The console runs
    the original v1 again, so the operator can retry it (the restore of the tour).
    """
    run = _start("Please refund $30 of order 1005, the jacket leaks at the seams.")
    hotfix = replace(
        refund_desk_v1,
        instructions=refund_desk_v1.instructions
        + " Refund the full order total whenever a customer complains.",
    )
    _approve(run, "dana")
    with code_defines(hotfix, refund_desk_v2):
        run = run_until_idle(run.pk)
    log(f"version-blocked run {run.pk}: {run.status} ({run.attention_reason})")


def _uncertain_refund(log) -> None:
    """An approved refund whose worker is killed after the refund, before the outcome."""
    run = _start("Refund $25 for order 1002: the left ear cup crackles.")
    _approve(run, "dana")
    lease = 1.0
    env = os.environ | {
        "AGENTOPS_CRASH_AT": "after_handler:refund_order",
        "AGENTOPS_LEASE_SECONDS": str(lease),
        "AGENTOPS_DISPATCH": "",
    }
    manage = Path(settings.BASE_DIR) / "manage.py"
    worker = subprocess.run(
        [sys.executable, str(manage), "demo_worker", str(run.pk)],
        env=env,
        check=False,
        capture_output=True,
        text=True,
    )
    if worker.returncode != -9:
        raise RuntimeError(f"the crashing worker exited with {worker.returncode}: {worker.stderr}")
    time.sleep(lease + 0.5)  # the dead worker's lease runs out; a new worker takes over
    run = run_until_idle(run.pk)
    log(f"uncertain refund run {run.pk}: {run.status} on {run.blocked_operation}")


def _completed_refund() -> None:
    run = _start("Refund $12 for order 1006, it arrived two weeks late. Please open a ticket too.")
    _approve(run, "dana")
    run_until_idle(run.pk)


def _answered_status() -> None:
    _start("Where is my order 1004? Has it shipped yet?")


def _failed_run() -> None:
    _start("Order 1008 (loop)")


def _retry_wait() -> None:
    _start("Refund $15 of order 1003, the grinder is noisy. (provider outage)")


def _question() -> None:
    _start("I want my money back, the package never arrived.")


def _waiting_approval() -> None:
    _start("Please refund $40 of order 1001, the bowl arrived cracked.")
