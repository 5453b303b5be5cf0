"""The chaos soak: its refund-desk agent, a Redis of its own, the fault scheduler, the invariants.

Worker processes import this module through AGENTOPS_AGENT_MODULES (for `chaos_desk`), so
everything else here is imported lazily, inside the functions the test process calls.

A soak (`Soak.run`) keeps a window of refund-desk runs in flight on real `celery worker`
processes while a seeded scheduler SIGKILLs workers (and starts replacements), pauses them with
SIGSTOP past their lease (then SIGCONT), terminates their PostgreSQL connections and restarts the
Redis broker. Meanwhile the test plays the operators: it approves (or rejects) refunds, answers
questions, reconciles runs blocked on an uncertain call from the fake service's records, and
cancels a few runs. When the faults stop it waits for every run to settle and checks the
invariants on the database, the fake service's records and the workers' logs.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from runtime import Agent, ModelRetry, ToolContext, ask_operator, tool
from runtime.models import EventKind
from tests.reliability.agents import (
    EFFECTS_ENV,
    PlanModel,
    Receipt,
    apply,
    charge,
    lookup,
    ticket,
)

CHAOS_AGENT = "chaos-desk"
AGENT_MODULES = "tests.reliability.agents,tests.reliability.chaos_support"
MANUAL_TOOLS = ("charge", "refund")
IDEMPOTENT_TOOLS = ("ticket",)
# Operators, as the test plays them (each action is checked against its audit event).
APPROVER, RECONCILER, OPERATOR, SUBMITTER = "ann-approver", "rex-reconciler", "olga-operator", "sam"


class Refund(BaseModel):
    order_id: str
    seconds: float = 0.0


def _span(ctx: ToolContext, started: float) -> None:
    """Record when this process ran the call (the same `spans` file as the other tools)."""
    line = f"{ctx.run_id}\t{os.getpid()}\t{started}\t{time.time()}\n"
    fd = os.open(Path(os.environ[EFFECTS_ENV]) / "spans", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@tool(recovery="manual", requires_approval=True)
def refund(args: Refund, ctx: ToolContext) -> Receipt:
    """Refund an order: needs an approver, and every call moves money (no deduplication)."""
    started = time.time()
    receipt = apply(ctx.operation_id)
    time.sleep(args.seconds)
    _span(ctx, started)
    return Receipt(receipt_id=receipt)


chaos_desk = Agent(
    name=CHAOS_AGENT,
    version="1",
    model="claude-test",
    instructions="Follow the plan: look the order up, refund it if approved, open a ticket.",
    tools=[lookup, charge, ticket, refund, ask_operator],
    # Short timers, so that runs whose model fails wait and come back within the soak.
    model_retry=ModelRetry(max_attempts=4, initial_delay=0.3, max_delay=0.6),
    llm=PlanModel(),
)


def receipt_of(operation_id: str) -> str:
    """The receipt the fake service gives for an operation id (as `apply` computes it)."""
    import hashlib

    return "rcpt-" + hashlib.sha256(operation_id.encode()).hexdigest()[:10]


# --- plans ---------------------------------------------------------------------------------------

KINDS = ("refund", "charge", "question", "flaky")
FAULTS = ("kill", "pause", "db_drop", "redis_restart")


def make_plan(kind: str, rng: random.Random, n: int) -> str:
    """A run input for PlanModel: a refund desk conversation of the given kind."""

    def order(**extra: Any) -> dict[str, Any]:
        return {"order_id": f"O{n}", "seconds": round(rng.uniform(0.05, 0.5), 3), **extra}

    if kind == "refund":
        steps = [[("lookup", order())], [("refund", order())], [("ticket", order())]]
    elif kind == "charge":
        steps = [[("lookup", order())], [("charge", order()), ("ticket", order())]]
    elif kind == "question":
        steps = [[("ask_operator", {"question": f"Which order, O{n}?"})], [("ticket", order())]]
    else:  # flaky: the model fails once at a random step, the run waits for its timer
        steps = [[("lookup", order())], [("ticket", order())], [("charge", order())]]
    errors = [rng.randint(1, len(steps))] if kind == "flaky" else []
    return json.dumps(
        {"steps": [[[name, args] for name, args in step] for step in steps], "model_errors": errors}
    )


# --- a Redis of our own, that the soak may restart --------------------------------------------

_PR_SET_PDEATHSIG = 1
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def _die_with_parent() -> None:
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class OwnRedis:
    """A throwaway redis-server on a free port: the machine's shared Redis is never touched."""

    def __init__(self, folder: Path) -> None:
        from tests.support.processes import free_port

        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.log = folder / "redis.log"
        self.popen: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    def start(self) -> None:
        import redis

        from tests.support.processes import wait_until

        command = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no", "--protected-mode", "yes"]
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - one libc call, no locks
            )

        def up() -> bool:
            try:
                return bool(redis.Redis.from_url(self.url, socket_connect_timeout=0.2).ping())
            except redis.RedisError:
                return False

        wait_until(up, timeout=20, what=f"redis-server on port {self.port}")

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(10)
        self.popen = None

    def restart(self, down_seconds: float) -> None:
        """Kill the server (every message in it is lost: no persistence), then start it again."""
        self.stop()
        time.sleep(down_seconds)
        self.start()
        self.restarts += 1


# --- the report ----------------------------------------------------------------------------------


@dataclass
class Action:
    """One operator action the test made, to be found in the audit log."""

    kind: str  # the event kind it must have written
    run_id: str
    actor: str
    data: dict[str, Any]


@dataclass
class Report:
    """What a soak did and observed; `problems` lists every invariant violation."""

    seed: int
    runs: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    duplicates: int = 0
    safe_reruns: int = 0
    zombie_calls: int = 0
    refused_writes: int = 0
    takeovers: int = 0
    orphans: int = 0
    reconciled: int = 0
    cancelled_unapplied: int = 0
    approvals: int = 0
    rejections: int = 0
    answers: int = 0
    cancels: int = 0
    lost: int = 0
    operator_actions: int = 0
    settle_seconds: float = 0.0
    elapsed: float = 0.0
    problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        faults = " ".join(f"{kind}={n}" for kind, n in sorted(self.faults.items()))
        statuses = " ".join(f"{kind}={n}" for kind, n in sorted(self.statuses.items()))
        return (
            f"seed={self.seed} runs={self.runs} ({statuses}) faults: {faults} "
            f"(total {sum(self.faults.values())}) | duplicates={self.duplicates} "
            f"fenced writes refused={self.refused_writes} takeovers={self.takeovers} "
            f"calls finished by paused workers after a takeover={self.zombie_calls} "
            f"orphans routed to needs_attention={self.orphans} (reconciled {self.reconciled}, "
            f"cancelled as never applied {self.cancelled_unapplied}) lost runs={self.lost} | "
            f"approvals={self.approvals} rejections={self.rejections} answers={self.answers} "
            f"cancels={self.cancels} operator actions audited={self.operator_actions} "
            f"safe re-runs={self.safe_reruns} settled {self.settle_seconds:.1f}s after the "
            f"faults stopped, {self.elapsed:.0f}s in all | violations={len(self.problems)}"
        )


# --- the soak ------------------------------------------------------------------------------------


@dataclass
class Settings:
    """How big a soak is. `runs` are submitted while faults happen; then the faults stop."""

    runs: int
    workers: int = 3
    window: int = 16  # runs in flight at once
    fault_every: tuple[float, float] = (0.8, 2.0)  # seconds between two faults
    min_fault_seconds: float = 20.0  # keep faulting at least this long
    settle_timeout: float = 90.0
    cancel_share: float = 0.04
    reject_share: float = 0.15
    # A run blocked on an uncertain call is reconciled only this long after it blocked: a worker
    # paused inside the handler may still be about to apply it (longest pause + slack).
    reconcile_after: float = 7.0


class Soak:
    """One soak against a cluster of workers; see the module docstring."""

    def __init__(self, cluster: Any, redis_server: OwnRedis, seed: int, size: Settings) -> None:
        self.cluster = cluster
        self.redis = redis_server
        self.rng = random.Random(seed)
        self.size = size
        self.report = Report(seed=seed)
        self.workers: list[Any] = []
        self.paused: dict[int, tuple[Any, float]] = {}  # pid -> (process, resume at)
        self.pauses: list[tuple[int, float, float]] = []  # (pid, stopped, resumed), wall clock
        self.stopped_at: dict[int, float] = {}
        self.run_ids: list[str] = []
        self.cancel_at: dict[str, float] = {}
        self.actions: list[Action] = []
        self.worker_serial = 0
        self.opening = list(FAULTS)
        self.rng.shuffle(self.opening)

    # --- workers ---------------------------------------------------------------------------

    def _start_worker(self, *, wait: bool) -> Any:
        self.worker_serial += 1
        process = self.cluster.worker(f"chaos-{self.worker_serial}", wait=wait)
        self.workers.append(process)
        return process

    def _live_workers(self) -> list[Any]:
        return [w for w in self.workers if w.alive() and w.pid not in self.paused]

    # --- faults ----------------------------------------------------------------------------

    def _fault(self) -> None:
        from tests.reliability.harness import LEASE_SECONDS

        # One of each kind first (in a seeded order), then kills and pauses twice as often.
        weighted = ["kill", "kill", "pause", "pause", "db_drop", "redis_restart"]
        kind = self.opening.pop(0) if self.opening else self.rng.choice(weighted)
        candidates = self._live_workers()
        if kind in ("kill", "pause") and len(candidates) < 2:
            kind = "db_drop"  # keep one worker running at least
        victim = self._victim(candidates) if kind in ("kill", "pause") else None
        if kind == "kill":
            assert victim is not None
            victim.kill()
            self.workers.remove(victim)
            self._start_worker(wait=False)
        elif kind == "pause":
            assert victim is not None
            victim.send(signal.SIGSTOP)
            self.stopped_at[victim.pid] = time.time()
            # Past the lease, so that its runs are taken over while it sleeps.
            until = time.monotonic() + LEASE_SECONDS + self.rng.uniform(0.5, 2.0)
            self.paused[victim.pid] = (victim, until)
        elif kind == "db_drop":
            self._drop_connections()
        else:
            self.redis.restart(self.rng.uniform(0.2, 1.5))
        self.report.faults[kind] += 1

    def _victim(self, candidates: list[Any]) -> Any:
        """Mostly a worker in the middle of a run (its pid is in the run's lease owner)."""
        from runtime.models import Run

        owners = Run.objects.filter(pk__in=self.run_ids, status="running").values_list(
            "lease_owner", flat=True
        )
        pids = {int(owner.split(":")[1]) for owner in owners if owner.count(":") >= 2}
        busy = [w for w in candidates if w.pid in pids]
        return self.rng.choice(busy if busy and self.rng.random() < 0.85 else candidates)

    def _drop_connections(self) -> None:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )

    def _resume_paused(self, *, every: bool = False) -> None:
        now = time.monotonic()
        for pid, (process, until) in list(self.paused.items()):
            if every or now >= until:
                with contextlib.suppress(ProcessLookupError):
                    process.send(signal.SIGCONT)
                del self.paused[pid]
                self.pauses.append((pid, self.stopped_at.pop(pid), time.time()))

    # --- the operators ---------------------------------------------------------------------

    def _submit(self) -> None:
        from runtime import submit

        n = len(self.run_ids)
        kind = KINDS[n % len(KINDS)] if n < len(KINDS) else self.rng.choice(KINDS)
        run = submit(CHAOS_AGENT, make_plan(kind, self.rng, n), actor=SUBMITTER)
        run_id = str(run.pk)
        self.run_ids.append(run_id)
        self.actions.append(Action("submitted", run_id, SUBMITTER, {"agent": CHAOS_AGENT}))
        if self.rng.random() < self.size.cancel_share:
            self.cancel_at[run_id] = time.monotonic() + self.rng.uniform(0.2, 3.0)
        try:  # what the dispatch hook does; a broker that is down loses it to the sweep
            self.cluster.publish(run_id)
        except Exception:
            self.report.faults["publish_lost"] += 1

    def _operate(self) -> None:
        """Answer what waits for a person, reconcile blocked runs, make the planned cancels."""
        from runtime import AgentOpsError, cancel, respond
        from runtime.models import Interaction, InteractionStatus, Run, RunStatus

        pending = Interaction.objects.filter(
            run_id__in=self.run_ids, status=InteractionStatus.PENDING
        )
        for interaction in pending:
            self._respond(interaction, respond)
        blocked = Run.objects.filter(
            pk__in=self.run_ids,
            status=RunStatus.NEEDS_ATTENTION,
            attention_reason="uncertain_operation",
        )
        for run in blocked:
            self._reconcile(run)
        now = time.monotonic()
        for run_id, due in list(self.cancel_at.items()):
            if now < due:
                continue
            del self.cancel_at[run_id]
            reason = "customer withdrew the request"
            try:
                cancel(run_id, actor=OPERATOR, reason=reason)
            except AgentOpsError:
                continue  # it finished first
            self.report.cancels += 1
            self.actions.append(
                Action(
                    "cancelled",
                    run_id,
                    OPERATOR,
                    {"reason": reason},
                )
            )

    def _respond(self, interaction: Any, respond: Any) -> None:
        from runtime import AgentOpsError

        if interaction.kind == "question":
            response: dict[str, Any] = {"answer": f"order {interaction.run_id}"}
            kind = "question_answered"
        elif self.rng.random() < self.size.reject_share:
            response = {"approved": False, "reason": "over the refund limit"}
            kind = "approval_rejected"
        else:
            response = {"approved": True}
            kind = "approval_granted"
        try:
            respond(interaction.pk, response, actor=APPROVER)
        except AgentOpsError:
            return  # its run was cancelled meanwhile
        if kind == "question_answered":
            self.report.answers += 1
        elif kind == "approval_granted":
            self.report.approvals += 1
        else:
            self.report.rejections += 1
        self.actions.append(
            Action(kind, str(interaction.run_id), APPROVER, {"interaction": str(interaction.pk)})
        )

    def _reconcile(self, run: Any) -> None:
        """Check the service for the blocked call: resolve with its receipt, or cancel."""
        from django.utils import timezone

        from runtime import AgentOpsError, cancel, resolve

        blocked_for = (timezone.now() - run.updated_at).total_seconds()
        if blocked_for < self.size.reconcile_after:
            return
        key = run.blocked_operation
        operation_id = f"{run.pk}:{key}"
        landed = self.cluster.records().effects[operation_id]
        try:
            if landed:
                receipt = receipt_of(operation_id)
                evidence = f"receipt {receipt} in the service's log for {operation_id}"
                resolve(run.pk, key, {"receipt_id": receipt}, evidence=evidence, actor=RECONCILER)
                self.report.reconciled += 1
                self.actions.append(
                    Action(
                        "operation_resolved",
                        str(run.pk),
                        RECONCILER,
                        {"key": key, "evidence": evidence},
                    )
                )
            else:
                reason = f"checked the service: {operation_id} never happened"
                cancel(run.pk, actor=RECONCILER, reason=reason)
                self.report.cancelled_unapplied += 1
                self.actions.append(
                    Action("cancelled", str(run.pk), RECONCILER, {"reason": reason})
                )
        except AgentOpsError:
            pass  # it changed meanwhile; looked at again on the next round

    # --- the loop --------------------------------------------------------------------------

    def _in_flight(self) -> int:
        from runtime.models import TERMINAL_STATUSES, Run

        return Run.objects.filter(pk__in=self.run_ids).exclude(status__in=TERMINAL_STATUSES).count()

    def run(self) -> Report:
        from django.db import close_old_connections

        started = time.monotonic()
        for _ in range(self.size.workers):
            self._start_worker(wait=False)
        self.cluster.wait_ready(*self.workers)
        next_fault = started + self.rng.uniform(*self.size.fault_every)
        fault_until = started + self.size.min_fault_seconds
        while len(self.run_ids) < self.size.runs or time.monotonic() < fault_until:
            close_old_connections()
            free = self.size.window - self._in_flight()
            for _ in range(max(0, min(free, self.size.runs - len(self.run_ids)))):
                self._submit()
            self._operate()
            self._resume_paused()
            if time.monotonic() >= next_fault:
                self._fault()
                next_fault = time.monotonic() + self.rng.uniform(*self.size.fault_every)
            time.sleep(0.1)
        # The faults stop: every paused worker resumes; the broker and the workers are up.
        self._resume_paused(every=True)
        if self.redis.popen is None:
            self.redis.start()
        calm = time.monotonic()
        deadline = calm + self.size.settle_timeout
        while self._in_flight() and time.monotonic() < deadline:
            self._operate()
            time.sleep(0.1)
        self.report.settle_seconds = time.monotonic() - calm
        self.report.elapsed = time.monotonic() - started
        check(self)
        return self.report


# --- the invariants ------------------------------------------------------------------------------


def check(soak: Soak) -> None:
    """Check every invariant; violations go to `soak.report.problems`, counts to the report."""
    from runtime.models import (
        TERMINAL_STATUSES,
        Event,
        Interaction,
        Operation,
        OperationStatus,
        Run,
        RunStatus,
    )
    from tests.reliability.agents import Records
    from tests.reliability.harness import holds, overlapping_spans

    report, problems = soak.report, soak.report.problems
    records = soak.cluster.records()
    runs = {str(r.pk): r for r in Run.objects.filter(pk__in=soak.run_ids)}
    report.runs = len(runs)
    report.statuses = Counter(r.status for r in runs.values())
    person = (RunStatus.WAITING, RunStatus.NEEDS_ATTENTION)
    lost = [pk for pk, r in runs.items() if r.status not in (*TERMINAL_STATUSES, *person)]
    report.lost = len(lost)
    for pk in lost:
        problems.append(f"run {pk} is {runs[pk].status} after the faults stopped and settled")

    # Effects: a manual call at most once, an idempotent one exactly once when it completed.
    ops = list(Operation.objects.filter(run_id__in=soak.run_ids, kind="tool"))
    for op in ops:
        effects = records.effects[op.operation_id]
        if op.name in (*MANUAL_TOOLS, *IDEMPOTENT_TOOLS) and effects > 1:
            report.duplicates += effects - 1
            problems.append(f"{op.name} {op.operation_id} took effect {effects} times")
        if op.name in IDEMPOTENT_TOOLS and op.status == OperationStatus.COMPLETED and effects != 1:
            problems.append(f"completed {op.name} {op.operation_id} took effect {effects} times")
        if op.name == "lookup" and effects > 1:
            report.safe_reruns += effects - 1
    known = {op.operation_id for op in ops}
    strays = [op_id for op_id in records.effects if op_id not in known]
    if strays:
        problems.append(f"effects of operations with no intent in the log: {strays[:5]}")

    # One worker at a time, by the event log and by the service's clock.
    for pk in runs:
        problems.extend(holds(pk)[1])
    # A worker frozen inside a call finishes that call when it resumes, after its run was taken
    # over (it then writes nothing: the fence). Its call overlaps the new owner's by design;
    # every other pair of calls of one run must not overlap.
    frozen = [
        span
        for span in records.spans
        if any(
            pid == span[1] and span[2] < cont and stop < span[3] for pid, stop, cont in soak.pauses
        )
    ]
    report.zombie_calls = len(frozen)
    awake = Records(spans=[span for span in records.spans if span not in frozen])
    problems.extend(overlapping_spans(awake))
    report.takeovers = Event.objects.filter(
        run_id__in=soak.run_ids, kind=EventKind.LEASE_EXPIRED
    ).count()
    report.refused_writes = sum(
        w.count("lease lost, stopping without further writes") for w in soak.cluster.processes
    )
    report.orphans = Event.objects.filter(
        run_id__in=soak.run_ids, kind=EventKind.BLOCKED, data__reason="uncertain_operation"
    ).count()

    # Accepted approvals: applied exactly once when the call completed; a call left uncertain
    # was reconciled (it had landed once) or cancelled (it had not landed at all).
    refunds = {(op.run_id, op.key): op for op in ops if op.name == "refund"}
    for interaction in Interaction.objects.filter(run_id__in=soak.run_ids, kind="tool_approval"):
        granted = Event.objects.filter(
            kind__in=["approval_granted", "approval_rejected"],
            data__interaction=str(interaction.pk),
        ).count()
        if interaction.status == "answered" and granted != 1:
            problems.append(f"interaction {interaction.pk} has {granted} approval events")
        op = refunds.get((interaction.run_id, interaction.operation_key))
        effects = records.effects[op.operation_id] if op else 0
        approved = interaction.status == "answered" and interaction.response["approved"]
        if not approved and effects:
            problems.append(f"refund {interaction.pk} took effect without an approval")
        if approved and op is not None and op.status == OperationStatus.COMPLETED and effects != 1:
            problems.append(f"approved refund {op.operation_id} took effect {effects} times")
        run = runs[str(interaction.run_id)]
        if approved and run.status == RunStatus.COMPLETED and effects != 1:
            problems.append(f"approved refund of completed run {run.pk} took effect {effects}x")

    # Every operator action has its audit event, with its actor and its data; and no event
    # claims an operator action the test did not make.
    _check_audit(soak, problems)


def _check_audit(soak: Soak, problems: list[str]) -> None:
    from runtime.models import Event

    events = list(Event.objects.filter(run_id__in=soak.run_ids).exclude(actor="runtime"))
    unmatched = {e.pk: e for e in events}
    for action in soak.actions:
        found = [
            e
            for e in unmatched.values()
            if str(e.run_id) == action.run_id and e.kind == action.kind and e.actor == action.actor
        ]
        if action.kind.startswith(("approval", "question")):
            found = [e for e in found if e.data.get("interaction") == action.data["interaction"]]
        if len(found) != 1:
            problems.append(f"{action.kind} of run {action.run_id} by {action.actor}: {found}")
            continue
        event = found[0]
        del unmatched[event.pk]
        required = {
            "approval_granted": ("interaction", "response", "tool"),
            "approval_rejected": ("interaction", "response", "tool"),
            "question_answered": ("interaction", "response"),
            "operation_resolved": ("evidence", "result", "operation_id"),
            "cancelled": ("reason", "previous_status"),
            "submitted": ("agent", "version"),
        }[action.kind]
        missing = [name for name in required if not event.data.get(name)]
        if event.created_at is None or missing:
            problems.append(f"audit event {event.pk} ({event.kind}) lacks {missing}")
        if action.kind == "operation_resolved" and (
            event.operation_key != action.data["key"]
            or event.data.get("evidence") != action.data["evidence"]
        ):
            problems.append(f"audit event {event.pk} does not record the resolve as made")
        if action.kind == "cancelled" and event.data.get("reason") != action.data["reason"]:
            problems.append(f"audit event {event.pk} does not record the cancel reason")
    for event in unmatched.values():
        problems.append(f"operator event {event.pk} ({event.kind} by {event.actor}) was not made")
    soak.report.operator_actions = len(soak.actions)
