"""The chaos soak: its refund-desk agent, a Redis of its own, the fault scheduler, the invariants.

Worker processes import this module through AGENTOPS_AGENT_MODULES (for `chaos_desk`), so
everything else here is imported lazily, inside the functions the test process calls.

A soak (`Soak.run`) keeps a window of refund-desk runs in flight on real `celery worker`
processes while a seeded scheduler SIGKILLs workers (and starts replacements), pauses them with
SIGSTOP past their lease (then SIGCONT), terminates their PostgreSQL connections, restarts the
Redis broker and takes it down for a long outage; when the whole soak runs on a PostgreSQL server of
its own (`make soak`: tests/reliability/own_postgres.py), it also crashes that server now and
then (an immediate stop: every connection of every process is cut, the WAL is replayed on
start), sometimes leaving it down past the lease. Some runs talk to Claude through the real
Anthropic adapter, over HTTP to the fake Messages API (tests/fakes), which answers each with one
of the stop reasons and first fails with one of the API's errors; a poison run's tool kills the
worker that calls it, every time, until the run is contained as a crash loop.

Meanwhile the test plays the operators: refunds ask for two approvers (an approval rule with a
quorum and an expiry; some are left to expire), questions are answered, runs blocked on an
uncertain call are reconciled from the fake service's records (its result, or that it did not
happen), runs are paused and resumed one by one and by bulk jobs, finished runs are forked, a
few are cancelled. When the faults stop it waits for every run to settle and checks the
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
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from runtime import Agent, AnthropicModel, ModelRetry, ToolContext, ask_operator, tool
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
CLAUDE_AGENT = "chaos-claude"
AGENT_MODULES = "tests.reliability.agents,tests.reliability.chaos_support"
MANUAL_TOOLS = ("charge", "refund")
IDEMPOTENT_TOOLS = ("ticket",)
# Operators, as the test plays them (each action is checked against its audit event).
APPROVER, RECONCILER, OPERATOR, SUBMITTER = "ann-approver", "rex-reconciler", "olga-operator", "sam"
SECOND_APPROVER, BULK_OPERATOR = "ben-approver", "bea-bulk"
APPROVERS_GROUP = "chaos-approvers"
EXPIRY_REASON = "nobody decided in time"
# The key the workers send to the fake Messages API (it refuses any other).
MODEL_KEY_ENV = "ANTHROPIC_API_KEY"
MODEL_URL_ENV = "ANTHROPIC_BASE_URL"
MODEL_KEY = "chaos-model-key"


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


class Poison(BaseModel):
    order_id: str


@tool(recovery="safe")
def poison(args: Poison, ctx: ToolContext) -> Receipt:
    """A tool with a fatal bug: it kills the worker process that calls it, every time."""
    _span(ctx, time.time())
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable: the process is gone")


chaos_desk = Agent(
    name=CHAOS_AGENT,
    version="1",
    model="claude-test",
    instructions="Follow the plan: look the order up, refund it if approved, open a ticket.",
    tools=[lookup, charge, ticket, refund, poison, ask_operator],
    # Short timers, so that runs whose model fails wait and come back within the soak.
    model_retry=ModelRetry(max_attempts=4, initial_delay=0.3, max_delay=0.6),
    llm=PlanModel(),
)

# The same desk on Claude: the real adapter, over HTTP to the fake Messages API whose address
# and key the workers get in ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY. No in-process retries:
# every error the server answers reaches the runtime.
claude_desk = Agent(
    name=CLAUDE_AGENT,
    version="1",
    model="claude-test-model",
    instructions="Look the order up, then answer.",
    tools=[lookup, ticket],
    model_retry=ModelRetry(max_attempts=4, initial_delay=0.3, max_delay=0.6),
    llm=AnthropicModel(max_retries=0, timeout=20.0),
)


def receipt_of(operation_id: str) -> str:
    """The receipt the fake service gives for an operation id (as `apply` computes it)."""
    import hashlib

    return "rcpt-" + hashlib.sha256(operation_id.encode()).hexdigest()[:10]


# --- plans ---------------------------------------------------------------------------------------

KINDS = ("refund", "charge", "question", "flaky")
FAULTS = ("kill", "pause", "db_drop", "redis_restart", "redis_outage")
# Only on a server of the soak's own (OwnPostgres.attached), on a timer of its own.
POSTGRES_RESTART = "postgres_restart"
CLAUDE_EVERY = 4  # one run in so many talks to the model server
# Every stop reason of the Messages API (tool_use is the first answer of every Claude run; the
# others end its second), and the errors it documents plus a dropped connection, met first
# (None: no error). Each Claude run gets the next case; a prompt too long stops the run before
# its stop reason, so it comes with a stop reason met elsewhere.
MODEL_CASES = (
    ("end_turn", None),
    ("max_tokens", "overloaded"),
    ("stop_sequence", "rate_limit"),
    ("pause_turn", "api_error"),
    ("refusal", "reset"),
    ("model_context_window_exceeded", None),
    ("end_turn", "prompt_too_long"),
)
STOP_REASONS = ("tool_use", *sorted({stop for stop, _ in MODEL_CASES}))
MODEL_ERRORS = tuple(sorted({error for _, error in MODEL_CASES if error}))


def make_plan(kind: str, rng: random.Random, n: int) -> str:
    """A run input for PlanModel: a refund desk conversation of the given kind."""

    def order(**extra: Any) -> dict[str, Any]:
        return {"order_id": f"O{n}", "seconds": round(rng.uniform(0.05, 0.5), 3), **extra}

    if kind == "poison":
        steps = [[("lookup", order())], [("poison", {"order_id": f"O{n}"})]]
    elif kind == "refund":
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


def claude_plan(n: int, i: int) -> str:
    """The input of the i-th Claude run: the stop reason and the error it meets."""
    stop, error = MODEL_CASES[i % len(MODEL_CASES)]
    return json.dumps({"order": f"O{n}", "stop": stop, "error": error})


# --- the Messages API the Claude runs talk to -----------------------------------------------------


class ModelServer:
    """The fake Messages API (tests/fakes), answering each request from the run's input.

    A run's first request fails once with its error (if any); then the model asks for
    `lookup`; after the result it ends with the run's stop reason (a `pause_turn` is followed
    by an `end_turn` when the runtime continues the turn). The answers depend only on the
    conversation, so any worker may ask again after a crash and get the same answer.
    """

    def __init__(self) -> None:
        import threading

        from tests.fakes.anthropic_server import FakeAnthropicServer

        server = self

        class Answering(FakeAnthropicServer):
            def record(self, request: Any) -> None:  # keeps none: a soak sends thousands
                server.local.body = request.body

            def next_reply(self) -> Any:
                return server.answer(server.local.body)

        self.fake = Answering(api_key=MODEL_KEY)
        self.local = threading.local()
        self.lock = threading.Lock()
        self.failed: set[str] = set()
        self.served: Counter[str] = Counter()

    @property
    def url(self) -> str:
        return self.fake.url

    def start(self) -> None:
        self.fake.start()

    def stop(self) -> None:
        self.fake.stop()

    def answer(self, body: dict[str, Any]) -> Any:
        from tests.fakes.anthropic_server import (
            ScriptedReply,
            error_body,
            message_body,
            text_block,
            tool_use_block,
        )

        first = body["messages"][0]["content"]
        text = first if isinstance(first, str) else first[0]["text"]
        plan = json.loads(text)
        turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
        error = plan["error"]
        with self.lock:
            fail = error is not None and plan["order"] not in self.failed
            self.failed.add(plan["order"])
            if fail:
                self.served[error] += 1
        if fail:
            errors = {
                "overloaded": (529, "overloaded_error", "Overloaded"),
                "rate_limit": (429, "rate_limit_error", "Number of requests has exceeded"),
                "api_error": (500, "api_error", "Internal server error"),
                "prompt_too_long": (400, "invalid_request_error", "prompt is too long: 2 > 1"),
            }
            if error == "reset":
                return ScriptedReply(0, None, reset=True)
            status, kind, message = errors[error]
            return ScriptedReply(status, error_body(kind, message))
        if turns == 0:
            use = tool_use_block(f"toolu_{plan['order']}", "lookup", {"order_id": plan["order"]})
            with self.lock:
                self.served["tool_use"] += 1
            return ScriptedReply(200, message_body([use], stop_reason="tool_use"))
        stop = plan["stop"] if turns == 1 else "end_turn"
        with self.lock:
            self.served[stop] += 1
        return ScriptedReply(
            200, message_body([text_block(f"{plan['order']}: {stop}")], stop_reason=stop)
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


def _pairs(counts: Counter[str]) -> str:
    return " ".join(f"{kind}={n}" for kind, n in sorted(counts.items()))


# --- webhook deliveries --------------------------------------------------------------------------

# The kinds the soak's subscription asks for: a run's start, its waits for people and their
# answers, and its ends (the rest of the log is filtered out by the subscription).
WEBHOOK_KINDS = [
    EventKind.SUBMITTED,
    EventKind.TOOL_APPROVAL_REQUESTED,
    EventKind.APPROVAL_GRANTED,
    EventKind.APPROVAL_REJECTED,
    EventKind.APPROVAL_EXPIRED,
    EventKind.QUESTION_ANSWERED,
    EventKind.CANCELLED,
    EventKind.COMPLETED,
    EventKind.FAILED,
]
# The workers' outbox, as production runs it but with short clocks: a delivery times out after
# 1.5 s (the receiver hangs 2.5 s), a claim runs out after 3 s, retries start at 0.2 s; a hole
# in the event ids is a rolled-back insert after 10 s (longer than a worker is ever paused).
WEBHOOK_OUTBOX_ENV = {
    "AGENTOPS_OUTBOX_SECONDS": "0.5",
    "AGENTOPS_OUTBOX_CLAIM_SECONDS": "3",
    "AGENTOPS_OUTBOX_BACKOFF_SECONDS": "0.2",
    "AGENTOPS_OUTBOX_BACKOFF_MAX_SECONDS": "2",
    "AGENTOPS_OUTBOX_GAP_SECONDS": "10",
    "AGENTOPS_OUTBOUND_ALLOWED_NETWORKS": "127.0.0.0/8",
    "AGENTOPS_OUTBOUND_TIMEOUT_SECONDS": "1.5",
}
WEBHOOK_HANG_SECONDS = 2.5


class FlakyReceiver:
    """A webhook receiver that verifies each request on arrival (Standard Webhooks: signature
    and a timestamp within five minutes), then answers 500 to one request in ten and hangs past
    the delivery timeout on one in twenty (its own random draws: the soak's schedule stays the
    seed's). `arrivals` lists (webhook-id, event id, run id) of the verified requests in order of
    arrival, `refused` why the others were; `accepted` the webhook-ids answered 204 in time."""

    def __init__(self, seed: int) -> None:
        from tests.integrations.receiver import Receiver

        self.rng = random.Random(seed)
        self.secret = ""
        self.arrivals: list[tuple[str, int, str]] = []
        self.refused: list[str] = []
        self.accepted: set[str] = set()
        self.failed = self.hung = 0
        self.receiver = Receiver(self._answer)

    def _answer(self, got: Any) -> Any:
        from standardwebhooks import Webhook, WebhookVerificationError

        from tests.integrations.receiver import Answer

        webhook_id = got.headers.get("webhook-id", "")
        try:
            data = Webhook(self.secret).verify(got.body, got.headers)["data"]
        except WebhookVerificationError as error:
            with self.receiver._lock:
                self.refused.append(f"webhook {webhook_id}: {error}")
            return Answer(400, b"bad signature")
        with self.receiver._lock:
            self.arrivals.append((webhook_id, data["event_id"], str(data["run_id"])))
            draw = self.rng.random()
            self.failed += draw < 0.1
            self.hung += 0.1 <= draw < 0.15
        if draw < 0.1:
            return Answer(500, b"receiver failed")
        if draw < 0.15:
            time.sleep(WEBHOOK_HANG_SECONDS)  # the sender has given up by now
            return Answer(504, b"too late")
        with self.receiver._lock:
            self.accepted.add(webhook_id)
        return Answer(204, b"")


class Webhooks:
    """A subscription to WEBHOOK_KINDS, delivered by the workers to a FlakyReceiver."""

    def __init__(self, seed: int) -> None:
        self.flaky = FlakyReceiver(seed)
        self.cursor = 0

    def start(self) -> None:
        from agentops.integrations import webhooks

        self.flaky.receiver.up()
        subscription, self.flaky.secret = webhooks.create_subscription(
            name="chaos", url=self.flaky.receiver.url, event_kinds=WEBHOOK_KINDS, actor="admin"
        )
        self.cursor = subscription.cursor

    def stop(self) -> None:
        self.flaky.receiver.down()

    def expected(self, run_ids: list[str]) -> dict[str, list[int]]:
        """Each run's committed events of the subscribed kinds, in order."""
        from runtime.models import Event

        events = Event.objects.filter(
            run_id__in=run_ids, kind__in=WEBHOOK_KINDS, pk__gt=self.cursor
        ).order_by("pk")
        expected: dict[str, list[int]] = {}
        for pk, run_id in events.values_list("pk", "run_id"):
            expected.setdefault(str(run_id), []).append(pk)
        return expected

    def wait_delivered(self, run_ids: list[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            wanted = {str(pk) for ids in self.expected(run_ids).values() for pk in ids}
            with self.flaky.receiver._lock:
                if wanted <= self.flaky.accepted:
                    return
            time.sleep(0.5)

    def check(self, run_ids: list[str], report: Report) -> None:
        """Every committed event of the subscribed kinds accepted at least once, every request
        verified and carrying its event id as webhook-id, and each run's events first seen in
        order (a later repeat is an at-least-once retry)."""
        expected = self.expected(run_ids)
        first_seen: dict[str, list[int]] = {}
        seen: set[int] = set()
        with self.flaky.receiver._lock:
            received = len(self.flaky.receiver.received)
            arrivals = list(self.flaky.arrivals)
            accepted = set(self.flaky.accepted)
            report.problems.extend(self.flaky.refused)
        for webhook_id, event_id, run_id in arrivals:
            if webhook_id != str(event_id):
                report.problems.append(f"webhook-id {webhook_id} is not its event's {event_id}")
            if event_id not in seen:
                seen.add(event_id)
                first_seen.setdefault(run_id, []).append(event_id)
        for run_id, ids in expected.items():
            missing = [pk for pk in ids if str(pk) not in accepted]
            if missing:
                report.problems.append(f"run {run_id}: events {missing[:5]} never delivered")
            if first_seen.get(run_id, []) != ids:
                report.problems.append(
                    f"run {run_id}: webhooks first seen {first_seen.get(run_id)}, events {ids}"
                )
        report.webhook_events = sum(len(ids) for ids in expected.values())
        report.webhook_requests = received
        report.webhook_failed, report.webhook_hung = self.flaky.failed, self.flaky.hung


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
    reconciled_not_run: int = 0
    cancelled_unapplied: int = 0
    approvals: int = 0
    rejections: int = 0
    answers: int = 0
    cancels: int = 0
    approvals_counted: int = 0
    left_to_expire: int = 0
    expiries: int = 0
    pauses: int = 0
    pauses_missed: int = 0  # the run had finished (or was paused already) when its pause came
    resumes: int = 0
    forks: int = 0
    bulk_jobs: int = 0
    bulk_touched: int = 0
    bulk_skipped: int = 0
    worker_crashes: int = 0
    contained: Counter[str] = field(default_factory=Counter)
    model_answers: Counter[str] = field(default_factory=Counter)
    lost: int = 0
    operator_actions: int = 0
    api_actions: int = 0  # operator actions made through the HTTP API
    api_retries: int = 0  # requests sent again after a 5xx or a lost answer
    webhook_events: int = 0  # events of the subscribed kinds, each to be delivered
    webhook_requests: int = 0  # requests the receiver got (retries and repeats included)
    webhook_failed: int = 0  # answered 500
    webhook_hung: int = 0  # answered after the delivery timeout
    postgres_recoveries: int = 0  # starts after a crash, each with WAL replay (server's log)
    settle_seconds: float = 0.0
    elapsed: float = 0.0
    problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        faults, statuses = _pairs(self.faults), _pairs(self.statuses)
        return (
            f"seed={self.seed} runs={self.runs} ({statuses}) faults: {faults} "
            f"(total {sum(self.faults.values())}) | duplicates={self.duplicates} "
            f"fenced writes refused={self.refused_writes} takeovers={self.takeovers} "
            f"calls finished by paused workers after a takeover={self.zombie_calls} "
            f"orphans routed to needs_attention={self.orphans} (reconciled {self.reconciled}, "
            f"found not to have happened {self.reconciled_not_run}, "
            f"cancelled as never applied {self.cancelled_unapplied}) lost runs={self.lost} | "
            f"approvals={self.approvals} rejections={self.rejections} answers={self.answers} "
            f"cancels={self.cancels} quorum votes counted={self.approvals_counted} "
            f"left to expire={self.left_to_expire} expiries fired={self.expiries} "
            f"pauses={self.pauses} (missed {self.pauses_missed}) resumes={self.resumes} "
            f"forks={self.forks} "
            f"bulk jobs={self.bulk_jobs} (runs touched {self.bulk_touched}, skipped "
            f"{self.bulk_skipped}) workers killed by the poison tool={self.worker_crashes} "
            f"contained: {_pairs(self.contained)} | model answers: {_pairs(self.model_answers)} | "
            f"operator actions audited={self.operator_actions} "
            f"(through the HTTP API {self.api_actions}, requests sent again "
            f"{self.api_retries}) | webhook events={self.webhook_events} "
            f"requests={self.webhook_requests} (500s {self.webhook_failed}, hung "
            f"{self.webhook_hung}) postgres crash recoveries={self.postgres_recoveries} "
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
    redis_outage: float = 60.0  # seconds the broker is down in a `redis_outage`
    expires_after: float = 5.0  # the approval rule's expiry
    expire_share: float = 0.08  # approvals nobody decides: they expire
    pause_share: float = 0.06
    fork_share: float = 0.04
    bulk_every: float = 4.0  # seconds between two bulk jobs (pause, then resume)
    poison_every: int = 200  # one poison run in so many (the first early)
    api_share: float = 0.0  # answers and cancels made through the HTTP API (needs an ApiOperator)
    postgres_restart_every: tuple[float, float] = (50.0, 100.0)  # seconds, on an own server


class ApiOperator:
    """An operator's service account calling the HTTP API of a live server with its token."""

    def __init__(self, url: str, name: str, token: str) -> None:
        self.url = url
        self.actor = f"api:{name}"  # how the API audits what the account does
        self.token = token

    def post(self, path: str, body: dict[str, Any]) -> int:
        """The HTTP status of POST /api/v1{path}; 0 when no answer came (connection lost)."""
        request = urllib.request.Request(
            f"{self.url}/api/v1{path}",
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return int(response.status)
        except urllib.error.HTTPError as error:
            return error.code
        except OSError:
            return 0


class Soak:
    """One soak against a cluster of workers; see the module docstring."""

    def __init__(
        self,
        cluster: Any,
        redis_server: OwnRedis,
        model: ModelServer,
        seed: int,
        size: Settings,
        *,
        api: ApiOperator | None = None,
        webhooks: Webhooks | None = None,
        postgres: Any = None,
    ) -> None:
        self.cluster = cluster
        self.postgres = postgres  # an OwnPostgres the soak runs on, which it may crash
        # Its restarts draw from a generator of their own, so that a seed's other faults and
        # runs replay the same with or without them.
        self.postgres_rng = random.Random(seed)
        self.api = api
        self.webhooks = webhooks
        self.redis = redis_server
        self.model = model
        self.redis_back_at = 0.0  # when a `redis_outage` ends
        self.rng = random.Random(seed)
        self.size = size
        self.report = Report(seed=seed)
        self.workers: list[Any] = []
        self.paused: dict[int, tuple[Any, float]] = {}  # pid -> (process, resume at)
        self.pauses: list[tuple[int, float, float]] = []  # (pid, stopped, resumed), wall clock
        self.stopped_at: dict[int, float] = {}
        self.run_ids: list[str] = []
        self.cancel_at: dict[str, float] = {}
        self.pause_at: dict[str, float] = {}
        self.resume_at: dict[str, float] = {}
        self.to_fork: set[str] = set()
        self.parents: dict[str, str] = {}  # fork -> the run it was forked from
        self.decisions: dict[str, str] = {}  # interaction -> approve, reject or expire
        self.voted: set[str] = set()  # approvals the first approver counted
        self.bulk_jobs: list[uuid.UUID] = []
        self.next_bulk = 0.0
        self.claude_runs = 0
        self.submitted = 0  # runs submitted (forks are added to run_ids too)
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

    def _replace_dead(self) -> None:
        """Workers the soak did not kill died by the poison tool: start one for each."""
        for worker in [w for w in self.workers if not w.alive()]:
            self.workers.remove(worker)
            self.report.worker_crashes += 1
            self._start_worker(wait=False)

    # --- faults ----------------------------------------------------------------------------

    def _fault(self) -> None:
        from tests.reliability.harness import LEASE_SECONDS

        # One of each kind first (in a seeded order), then kills and pauses twice as often.
        weighted = ["kill", "kill", "pause", "pause", "db_drop", "redis_restart"]
        planned = self.opening[0] if self.opening else self.rng.choice(weighted)
        kind = planned
        if kind.startswith("redis") and self.redis.popen is None:
            kind = "db_drop"  # it is down already
        candidates = self._live_workers()
        if kind in ("kill", "pause") and len(candidates) < 2:
            kind = "db_drop"  # keep one worker running at least
        if self.opening and kind == planned:
            # An opening kind that cannot be made now (a Redis restart during the outage) is
            # tried again at the next fault, so that each kind is survived every time.
            self.opening.pop(0)
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
        elif kind == "redis_restart":
            self.redis.restart(self.rng.uniform(0.2, 1.5))
        else:  # down for long: the loop starts it again when the outage ends
            self.redis.stop()
            self.redis_back_at = time.monotonic() + self.size.redis_outage
        self.report.faults[kind] += 1

    def _restart_postgres(self) -> None:
        """Crash the server every process runs on, this one's included, and start it again.

        The soak waits meanwhile, so none of its own actions is cut halfway (an API request of
        a live server's thread may be: the operator sends it again). Half the time the server
        stays down past the lease, so that the runs held at the crash are taken over.
        """
        from django.db import connections

        from tests.reliability.harness import LEASE_SECONDS

        rng = self.postgres_rng
        long = rng.random() < 0.5
        down = LEASE_SECONDS + rng.uniform(0.5, 2.0) if long else rng.uniform(0.1, 1.0)
        self.postgres.restart(down)
        connections.close_all()  # the crash cut them; the next query opens a new one
        self.report.faults[POSTGRES_RESTART] += 1

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

        n = self.submitted
        self.submitted += 1
        if n and n % 100 == 0:  # a long soak says how far it is
            print(
                f"chaos: {n} runs submitted, faults so far: {_pairs(self.report.faults)}",
                flush=True,
            )
        if n % self.size.poison_every == len(KINDS):
            kind = "poison"
        elif n % CLAUDE_EVERY == CLAUDE_EVERY - 1:
            kind = "claude"
        else:
            kind = KINDS[n % len(KINDS)] if n < len(KINDS) else self.rng.choice(KINDS)
        if kind == "claude":
            agent, text = CLAUDE_AGENT, claude_plan(n, self.claude_runs)
            self.claude_runs += 1
        else:
            agent, text = CHAOS_AGENT, make_plan(kind, self.rng, n)
        run = submit(agent, text, actor=SUBMITTER)
        run_id = str(run.pk)
        self.run_ids.append(run_id)
        self.actions.append(Action("submitted", run_id, SUBMITTER, {"agent": agent}))
        now = time.monotonic()
        if kind == "poison":  # left alone: it must be contained by itself
            self._publish(run_id)
            return
        # The first Claude run of each model case is never cancelled: a cancel before its first
        # request would leave that stop reason or error unmet by the whole soak.
        first_of_case = kind == "claude" and self.claude_runs <= len(MODEL_CASES)
        if self.rng.random() < self.size.cancel_share and not first_of_case:
            self.cancel_at[run_id] = now + self.rng.uniform(0.2, 3.0)
        # The first runs meet a pause and a fork for sure; then by their shares.
        if n == 1 or self.rng.random() < self.size.pause_share:
            self.pause_at[run_id] = now + self.rng.uniform(0.2, 3.0)
        elif self.report.pauses_missed and not self.report.pauses:
            # Every pause so far came after its run had finished: the next runs are paused
            # soon after they start, until one lands (a fixed delay: the seed's draws stay
            # as they were, so a seed replays the same schedule whenever the first one lands).
            self.pause_at[run_id] = now + 0.2
        if agent == CHAOS_AGENT and (n in (0, 2) or self.rng.random() < self.size.fork_share):
            self.to_fork.add(run_id)
        self._publish(run_id)

    def _publish(self, run_id: str) -> None:
        """What the dispatch hook does; a broker that is down loses it to the sweep."""
        if self.redis.popen is None:
            self.report.faults["publish_lost"] += 1
            return
        try:
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
        contained = Run.objects.filter(pk__in=self.run_ids, status=RunStatus.NEEDS_ATTENTION)
        for run in contained.exclude(attention_reason="uncertain_operation"):
            self._dismiss(run)
        self._pause_and_resume()
        self._fork_finished()
        now = time.monotonic()
        for run_id, due in list(self.cancel_at.items()):
            if now < due:
                continue
            del self.cancel_at[run_id]
            reason = "customer withdrew the request"
            if self._through_api():
                body, path = {"reason": reason}, f"/runs/{run_id}/cancel"
                if not self._api_call(path, body, done=partial(self._audited, run_id, "cancelled")):
                    continue  # it finished first
                actor = self._api_actor()
            else:
                try:
                    cancel(run_id, actor=OPERATOR, reason=reason)
                except AgentOpsError:
                    continue  # it finished first
                actor = OPERATOR
            self.report.cancels += 1
            self.actions.append(Action("cancelled", run_id, actor, {"reason": reason}))

    def _through_api(self) -> bool:
        """Whether this action goes through the HTTP API (drawn only when there is one, so
        that a seed without it keeps its schedule)."""
        return self.api is not None and self.rng.random() < self.size.api_share

    def _audited(self, run_id: str, kind: str, **data: str) -> bool:
        """Whether the API's account has an event of this kind (and data) on the run."""
        from runtime.models import Event

        assert self.api is not None
        events = Event.objects.filter(run_id=run_id, kind=kind, actor=self.api.actor)
        return any(all(e.data.get(k) == v for k, v in data.items()) for e in events)

    def _api_actor(self) -> str:
        assert self.api is not None
        self.report.api_actions += 1
        return self.api.actor

    def _api_call(self, path: str, body: dict[str, Any], *, done: Callable[[], bool]) -> bool:
        """True when the API did it; False when it refused it as the verb would have (409: the
        run finished or was cancelled meanwhile). A request whose connection to the database was
        dropped under it may fail (5xx, or no answer): the operator sends it again, and when a
        retry is refused, `done()` (from the database) says whether an earlier try did it.
        Anything else (a 4xx other than 409, or failing every try) is a violation."""
        assert self.api is not None
        for attempt in range(5):
            status = self.api.post(path, body)
            if status == 200:
                return True
            if status == 409:
                return attempt > 0 and done()
            if status and status < 500:
                break
            self.report.api_retries += 1
            time.sleep(0.5)
        self.report.problems.append(f"the API answered {status} to POST {path}")
        return False

    def _respond(self, interaction: Any, respond: Any) -> None:
        """Answer a question; an approval takes two approvers (the rule's quorum), one
        rejection decides, and some are left alone until they expire."""
        from runtime import AgentOpsError

        pk, run_id = str(interaction.pk), str(interaction.run_id)
        data = {"interaction": pk}
        if interaction.kind == "question":
            answer = {"answer": f"order {run_id}"}
            if self._through_api():
                path = f"/interactions/{pk}/respond"
                if not self._api_call(
                    path,
                    answer,
                    done=partial(self._audited, run_id, "question_answered", interaction=pk),
                ):
                    return  # its run was cancelled meanwhile
                actor = self._api_actor()
            else:
                try:
                    respond(pk, answer, actor=APPROVER)
                except AgentOpsError:
                    return  # its run was cancelled meanwhile
                actor = APPROVER
            self.report.answers += 1
            self.actions.append(Action("question_answered", run_id, actor, data))
            return
        if pk not in self.decisions:
            # The first approval is left to expire, the second rejected; then by their shares.
            opening = (0.0, self.size.expire_share)
            n = len(self.decisions)
            draw = opening[n] if n < len(opening) else self.rng.random()
            expire, reject = self.size.expire_share, self.size.expire_share + self.size.reject_share
            decision = "expire" if draw < expire else "reject" if draw < reject else "approve"
            self.decisions[pk] = decision
            self.report.left_to_expire += decision == "expire"
        decision = self.decisions[pk]
        try:
            if decision == "reject":
                response = {"approved": False, "reason": "over the refund limit"}
                respond(pk, response, actor=APPROVER)
                self.report.rejections += 1
                self.actions.append(Action("approval_rejected", run_id, APPROVER, data))
            elif decision == "approve":
                if pk not in self.voted:
                    respond(pk, {"approved": True}, actor=APPROVER)
                    self.voted.add(pk)
                    self.report.approvals_counted += 1
                    self.actions.append(Action("approval_counted", run_id, APPROVER, data))
                respond(pk, {"approved": True}, actor=SECOND_APPROVER)
                self.report.approvals += 1
                self.actions.append(Action("approval_granted", run_id, SECOND_APPROVER, data))
        except AgentOpsError:
            return  # its run was cancelled, or the approval expired, meanwhile

    def _dismiss(self, run: Any) -> None:
        """A run stopped for a person that the soak cannot fix (a crash loop, a model's answer
        that cannot be used): counted by its reason, then cancelled."""
        from runtime import AgentOpsError, cancel

        reason = f"contained: {run.attention_reason}"
        try:
            cancel(run.pk, actor=OPERATOR, reason=reason)
        except AgentOpsError:
            return
        self.report.contained[run.attention_reason] += 1
        self.report.cancels += 1
        self.actions.append(Action("cancelled", str(run.pk), OPERATOR, {"reason": reason}))

    def _pause_and_resume(self) -> None:
        from runtime import AgentOpsError, pause
        from runtime.surgery import resume_run

        now = time.monotonic()
        for run_id, due in list(self.pause_at.items()):
            if now < due:
                continue
            del self.pause_at[run_id]
            try:
                pause(run_id, actor=OPERATOR, reason="checking with the customer")
            except AgentOpsError:
                self.report.pauses_missed += 1  # it finished first
                continue
            self.report.pauses += 1
            self.actions.append(Action("paused|pause_requested", run_id, OPERATOR, {}))
            self.resume_at[run_id] = now + self.rng.uniform(0.5, 3.0)
        for run_id, due in list(self.resume_at.items()):
            if now < due:
                continue
            del self.resume_at[run_id]
            try:
                resume_run(run_id, actor=OPERATOR)
            except AgentOpsError:
                continue  # a bulk job resumed it, or its pause was dropped as it finished
            self.report.resumes += 1
            self.actions.append(Action("resumed|pause_withdrawn", run_id, OPERATOR, {}))

    def _resume_every_paused(self) -> None:
        """Once the faults stop: whatever a person or a bulk job paused is resumed."""
        from django.db.models import Q

        from runtime.models import Run, RunStatus

        held = Run.objects.filter(pk__in=self.run_ids).filter(
            Q(status=RunStatus.PAUSED) | ~Q(pause_requested_by="")
        )
        for pk in held.values_list("pk", flat=True):
            self.resume_at.setdefault(str(pk), 0.0)

    def _fork_finished(self) -> None:
        """Fork the completed runs chosen for it, from one of their model requests."""
        from runtime import AgentOpsError, fork, fork_preview
        from runtime.models import Operation, Run, RunStatus

        for run in Run.objects.filter(pk__in=self.to_fork, status=RunStatus.COMPLETED):
            parent = str(run.pk)
            self.to_fork.discard(parent)
            keys = sorted(
                Operation.objects.filter(run=run, kind="model").values_list("key", flat=True)
            )
            key = self.rng.choice(keys)
            try:
                needed = fork_preview(parent, key).acknowledgements_needed
                child = str(fork(parent, key, actor=OPERATOR, acknowledge=needed).pk)
            except AgentOpsError:
                continue
            self.report.forks += 1
            self.run_ids.append(child)
            self.parents[child] = parent
            self.actions.append(Action("forked", child, OPERATOR, {}))
            self.actions.append(Action("fork_created", parent, OPERATOR, {}))
            self._publish(child)

    def _bulk(self) -> None:
        """Every so often a bulk job: pause what is queued or waits, then resume what
        is paused."""
        from runtime import bulk

        now = time.monotonic()
        if now < self.next_bulk:
            return
        self.next_bulk = now + self.size.bulk_every
        pausing = len(self.bulk_jobs) % 2 == 0
        statuses = ["queued", "waiting", "retry_wait"] if pausing else ["paused"]
        job = bulk.submit(
            "pause" if pausing else "resume",
            {"agent": CHAOS_AGENT, "status": statuses},
            actor=BULK_OPERATOR,
            reason="end of shift",
        )
        self.bulk_jobs.append(job.pk)

    def _reconcile(self, run: Any) -> None:
        """Check the service for the blocked call: resolve with its receipt; or, when it did not
        happen, run a charge again (same operation id), tell the model about a refund, or cancel
        (one run in four)."""
        from django.utils import timezone

        from runtime import AgentOpsError, cancel, resolve
        from runtime.control import NOT_RUN_AGAIN, NOT_RUN_TELL_MODEL
        from runtime.models import Operation

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
            elif self.rng.random() < 0.75:
                name = Operation.objects.get(run=run, key=key).name
                outcome = NOT_RUN_AGAIN if name == "charge" else NOT_RUN_TELL_MODEL
                evidence = f"no record of {operation_id} in the service's log"
                resolve(run.pk, key, evidence=evidence, actor=RECONCILER, outcome=outcome)
                self.report.reconciled_not_run += 1
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

    def _bulk_running(self) -> bool:
        from runtime.models import BulkJob, BulkJobStatus

        return BulkJob.objects.filter(pk__in=self.bulk_jobs, status=BulkJobStatus.RUNNING).exists()

    def run(self) -> Report:
        from django.db import close_old_connections

        started = time.monotonic()
        for _ in range(self.size.workers):
            self._start_worker(wait=False)
        self.cluster.wait_ready(*self.workers)
        next_fault = started + self.rng.uniform(*self.size.fault_every)
        next_restart = started + self.postgres_rng.uniform(*self.size.postgres_restart_every) / 2
        fault_until = started + self.size.min_fault_seconds
        while self.submitted < self.size.runs or time.monotonic() < fault_until:
            close_old_connections()
            free = self.size.window - self._in_flight()
            for _ in range(max(0, min(free, self.size.runs - self.submitted))):
                self._submit()
            self._operate()
            self._bulk()
            self._resume_paused()
            self._replace_dead()
            if self.redis.popen is None and time.monotonic() >= self.redis_back_at:
                self.redis.start()
            if time.monotonic() >= next_fault:
                self._fault()
                next_fault = time.monotonic() + self.rng.uniform(*self.size.fault_every)
            if self.postgres is not None and time.monotonic() >= next_restart:
                self._restart_postgres()
                every = self.size.postgres_restart_every
                next_restart = time.monotonic() + self.postgres_rng.uniform(*every)
            time.sleep(0.1)
        # The faults stop: every paused worker resumes; the broker and the workers are up.
        self._resume_paused(every=True)
        if self.redis.popen is None:
            self.redis.start()
        calm = time.monotonic()
        deadline = calm + self.size.settle_timeout
        while (self._in_flight() or self._bulk_running()) and time.monotonic() < deadline:
            close_old_connections()
            self._resume_every_paused()
            self._operate()
            self._replace_dead()
            time.sleep(0.1)
        if self.webhooks is not None:
            self.webhooks.wait_delivered(self.run_ids, self.size.settle_timeout)
        self.report.settle_seconds = time.monotonic() - calm
        if self.postgres is not None:
            self.report.postgres_recoveries = self.postgres.crash_recoveries()
        self.report.elapsed = time.monotonic() - started
        check(self)
        if self.webhooks is not None:
            self.webhooks.check(self.run_ids, self.report)
        return self.report


# --- the invariants ------------------------------------------------------------------------------


def check(soak: Soak) -> None:
    """Check every invariant; violations go to `soak.report.problems`, counts to the report."""
    from runtime.models import (
        TERMINAL_STATUSES,
        Event,
        Interaction,
        InteractionStatus,
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
    waiting_for = set(
        Interaction.objects.filter(
            run_id__in=soak.run_ids, status=InteractionStatus.PENDING
        ).values_list("run_id", flat=True)
    )

    def at_rest(run: Run) -> bool:
        """Ended, or waiting for a person with the reason recorded."""
        if run.status == RunStatus.WAITING:
            return run.pk in waiting_for
        if run.status == RunStatus.NEEDS_ATTENTION:
            return bool(run.attention_reason)
        return run.status in TERMINAL_STATUSES

    lost = [pk for pk, r in runs.items() if not at_rest(r)]
    report.lost = len(lost)
    for pk in lost:
        problems.append(f"run {pk} is {runs[pk].status} after the faults stopped and settled")
    soak.report.model_answers = soak.model.served

    # Effects: a manual call at most once, an idempotent one exactly once when it completed.
    # A fork starts with copies of its parent's outcomes before the fork point (same key and
    # intent time, the fork's operation id): the parent's call is the one counted.
    every_op = list(Operation.objects.filter(run_id__in=soak.run_ids, kind="tool"))
    intents = {(str(op.run_id), op.key): op.intent_at for op in every_op}
    ops = [
        op
        for op in every_op
        if str(op.run_id) not in soak.parents
        or intents.get((soak.parents[str(op.run_id)], op.key)) != op.intent_at
    ]
    for op in ops:
        effects = records.effects[op.operation_id]
        if op.name in (*MANUAL_TOOLS, *IDEMPOTENT_TOOLS) and effects > 1:
            report.duplicates += effects - 1
            problems.append(f"{op.name} {op.operation_id} took effect {effects} times")
        if op.name in IDEMPOTENT_TOOLS and op.status == OperationStatus.COMPLETED and effects != 1:
            problems.append(f"completed {op.name} {op.operation_id} took effect {effects} times")
        if op.name == "lookup" and effects > 1:
            report.safe_reruns += effects - 1
    known = {op.operation_id for op in every_op}
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
    for pk, run in runs.items():
        if run.agent == CHAOS_AGENT and "poison" in run.input and run.status != RunStatus.CANCELLED:
            problems.append(f"poison run {pk} ended {run.status}, not contained")
    report.orphans = Event.objects.filter(
        run_id__in=soak.run_ids, kind=EventKind.BLOCKED, data__reason="uncertain_operation"
    ).count()

    # Accepted approvals: applied exactly once when the call completed; a call left uncertain
    # was reconciled (it had landed once) or cancelled (it had not landed at all).
    _check_approvals(soak, runs, ops, records)

    # Every operator action has its audit event, with its actor and its data; and no event
    # claims an operator action the test did not make.
    _check_audit(soak, problems)


def _check_approvals(soak: Soak, runs: dict[str, Any], ops: list[Any], records: Any) -> None:
    """Under the rule's quorum of two, each approval that went through has one decision
    (granted with both approvers, rejected, or expired), a receipt naming the approvers that
    matches the call made, used by that call alone; an expiry fired at most once."""
    from runtime.models import (
        ApprovalReceipt,
        Event,
        Interaction,
        InteractionStatus,
        OperationStatus,
        RunStatus,
    )

    report, problems = soak.report, soak.report.problems
    refunds = {(op.run_id, op.key): op for op in ops if op.name == "refund"}
    receipts = {
        str(r.interaction_id): r
        for r in ApprovalReceipt.objects.filter(interaction__run_id__in=soak.run_ids)
    }
    decided = Counter(
        (e.data["interaction"], e.kind)
        for e in Event.objects.filter(
            run_id__in=soak.run_ids,
            kind__in=[
                EventKind.APPROVAL_GRANTED,
                EventKind.APPROVAL_REJECTED,
                EventKind.APPROVAL_EXPIRED,
            ],
        )
    )
    not_run = set(
        Event.objects.filter(
            run_id__in=soak.run_ids,
            kind=EventKind.OPERATION_RESOLVED,
            data__outcome="not_run_tell_model",
        ).values_list("data__operation_id", flat=True)
    )
    report.expiries = sum(
        n for (_, kind), n in decided.items() if kind == EventKind.APPROVAL_EXPIRED
    )
    for interaction in Interaction.objects.filter(run_id__in=soak.run_ids, kind="tool_approval"):
        pk = str(interaction.pk)
        decisions = {kind: n for (i, kind), n in decided.items() if i == pk}
        if interaction.status == InteractionStatus.ANSWERED and sum(decisions.values()) != 1:
            problems.append(f"interaction {pk} has decision events {decisions}")
        if decisions.get(EventKind.APPROVAL_EXPIRED, 0) > 1:
            problems.append(f"the expiry of interaction {pk} fired {decisions} times")
        by_expiry = interaction.response == {"approved": False, "reason": EXPIRY_REASON}
        left = soak.decisions.get(pk) == "expire" and interaction.status == "answered"
        if left and not by_expiry:
            problems.append(f"interaction {pk} left to expire ended {interaction.response}")
        op = refunds.get((interaction.run_id, interaction.operation_key))
        receipt = receipts.get(pk)
        granted = decisions.get(EventKind.APPROVAL_GRANTED, 0) == 1
        if granted != (receipt is not None):
            problems.append(f"approval {pk}: granted={granted} but receipt={receipt}")
        if receipt is not None:
            approvers = receipt.contents["approvers"]
            if sorted(approvers) != sorted([APPROVER, SECOND_APPROVER]):
                problems.append(f"receipt of {pk} names approvers {approvers}")
            made = op.input.get("executed_arguments", op.input["arguments"]) if op else None
            if op is not None and receipt.contents["arguments"] != made:
                problems.append(f"receipt of {pk} does not match the call {op.operation_id}")
            if (op is not None) != (receipt.used_at is not None):
                problems.append(f"receipt of {pk} used_at={receipt.used_at}, call made: {op}")
        effects = records.effects[op.operation_id] if op else 0
        if op is not None and op.operation_id in not_run:
            if effects:
                problems.append(f"{op.operation_id}, found not to have happened, took effect")
            continue
        approved = interaction.status == "answered" and (interaction.response or {})["approved"]
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
    from runtime.models import BulkItemStatus, BulkJobItem, Event

    # What the bulk jobs did to each run is audited as the job's actor's, once per run touched.
    done = {"pause": "paused|pause_requested", "resume": "resumed|pause_withdrawn"}
    touched = BulkJobItem.objects.filter(
        job_id__in=soak.bulk_jobs, status=BulkItemStatus.TOUCHED
    ).values_list("run_id", "job__action")
    bulk_actions = [
        Action(done[action], str(run_id), BULK_OPERATOR, {}) for run_id, action in touched
    ]
    soak.report.bulk_jobs = len(soak.bulk_jobs)
    soak.report.bulk_touched = len(bulk_actions)
    soak.report.bulk_skipped = BulkJobItem.objects.filter(
        job_id__in=soak.bulk_jobs, status=BulkItemStatus.SKIPPED
    ).count()
    jobs_submitted = Event.objects.filter(
        kind=EventKind.BULK_JOB_SUBMITTED,
        actor=BULK_OPERATOR,
        data__job__in=[str(pk) for pk in soak.bulk_jobs],
    ).count()
    if jobs_submitted != len(soak.bulk_jobs):
        problems.append(f"{len(soak.bulk_jobs)} bulk jobs, {jobs_submitted} submit events")

    events = list(Event.objects.filter(run_id__in=soak.run_ids).exclude(actor="runtime"))
    unmatched = {e.pk: e for e in events}
    for action in [*soak.actions, *bulk_actions]:
        found = [
            e
            for e in unmatched.values()
            if str(e.run_id) == action.run_id
            and e.kind in action.kind.split("|")
            and e.actor == action.actor
        ]
        if action.kind.startswith(("approval", "question")):
            found = [e for e in found if e.data.get("interaction") == action.data["interaction"]]
        # The same action twice (a bulk job pausing a run again) takes the events in order; an
        # event no action claims is reported below, so an action audited twice is found too.
        if not found:
            problems.append(f"{action.kind} of run {action.run_id} by {action.actor}: no event")
            continue
        event = min(found, key=lambda e: e.pk)
        del unmatched[event.pk]
        required = {
            "approval_counted": ("interaction", "approvers", "quorum"),
            "approval_granted": ("interaction", "response", "tool", "approvers", "receipt"),
            "approval_rejected": ("interaction", "response", "tool"),
            "question_answered": ("interaction", "response"),
            "operation_resolved": ("evidence", "outcome", "operation_id"),
            "cancelled": ("reason", "previous_status"),
            "submitted": ("agent", "version"),
            "paused": ("reason",),
            "pause_requested": ("reason",),
            "resumed": ("status",),
            "pause_withdrawn": (),
            "forked": ("parent", "at"),
            "fork_created": ("fork", "at"),
        }[event.kind]
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
    soak.report.operator_actions = len(soak.actions) + len(bulk_actions)
