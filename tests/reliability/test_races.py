"""Races at scale: operators acting on the same run at the same moment, on PostgreSQL threads.

Each pair of calls starts at once (a barrier per pair, each side on its own thread and its own
connection). Conflicting answers to one approval or question: exactly one wins, the other gets
the conflict error naming the winner, and the run moves once. Resolve, retry and cancel
combinations, and a bulk job's item against a single-run action, and a fork against a retry: the
outcome is one of the two serial orders, every refusal is a typed conflict error (never a
database error), every success has exactly one audit event, and after the runs finish nothing
was applied twice or lost. Half the runs of each combination are played in a forced order, each
way in turn, so that both serial orders are met and checked.

`make test` runs 200 of each; `make soak` (AGENTOPS_SOAK=1) runs 1,000.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import connection

from runtime import (
    Agent,
    AgentOpsError,
    ModelRetry,
    ToolContext,
    ask_operator,
    bulk,
    cancel,
    resolve,
    respond,
    retry,
    submit,
    tool,
)
from runtime.errors import InvalidTransition
from runtime.llm import ModelRequest, ModelResponse
from runtime.llm.scripted import ScriptedModel, call, say
from runtime.models import (
    BulkItemStatus,
    BulkJob,
    BulkJobItem,
    Event,
    Interaction,
    Operation,
    Run,
    RunStatus,
)
from runtime.surgery import fork
from runtime.testing import SimulatedCrash, recover, run_until_idle
from tests.conftest import EFFECTS, TOOLS, Amount, Receipt, one_call

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

SCALE = 1000 if os.environ.get("AGENTOPS_SOAK") == "1" else 200
GROUPS = 8  # pairs of threads, each pair working through its share of the races
CONFLICTS = {"interaction_conflict", "interaction_closed", "not_blocked", "retry_rejected"}
CONFLICTS |= {"invalid_transition", "fork_refused"}


@tool(recovery="manual")
def charge_and_die(args: Amount, ctx: ToolContext) -> Receipt:
    """Charge, then the worker dies before the outcome is written: the run blocks on recovery."""
    EFFECTS.apply(ctx.operation_id)
    raise SimulatedCrash(f"died inside {ctx.operation_id}")


class FailsOnce:
    """A model whose first request of each run fails once (a provider error)."""

    def __init__(self, turns: list[Any]) -> None:
        self._model = ScriptedModel(turns)
        self._failed: set[str] = set()
        self._lock = threading.Lock()

    def complete(self, request: ModelRequest, *, operation_id: str) -> ModelResponse:
        with self._lock:
            first = operation_id.endswith(":step-1/model") and operation_id not in self._failed
            self._failed.add(operation_id)
        if first:
            raise RuntimeError("provider overloaded")
        return self._model.complete(request, operation_id=operation_id)


def _agent(name: str, llm: Any, **extra: Any) -> Agent:
    return Agent(
        name=name,
        version="1",
        model="claude-test",
        instructions="Race.",
        tools=[*TOOLS.values(), charge_and_die, ask_operator],
        llm=llm,
        **extra,
    )


AGENTS = [
    _agent("race-approval", ScriptedModel(one_call("refund"))),
    _agent(
        "race-question",
        ScriptedModel([call(("ask_operator", {"question": "Which one?"}), step=1), say("ok")]),
    ),
    _agent(
        "race-blocked",
        ScriptedModel(
            [call(("charge_and_die", {"order_id": "A1", "amount_cents": 5}), step=1), say("ok")]
        ),
    ),
    _agent("race-failed", FailsOnce(one_call("open_ticket"))),
    _agent(
        "race-timer",
        FailsOnce(one_call("open_ticket")),
        model_retry=ModelRetry(max_attempts=3, initial_delay=600, max_delay=600),
    ),
]
STATE_OF = {
    "race-approval": RunStatus.WAITING,
    "race-question": RunStatus.WAITING,
    "race-blocked": RunStatus.NEEDS_ATTENTION,
    "race-failed": RunStatus.FAILED,
    "race-timer": RunStatus.RETRY_WAIT,
}


def in_threads(work: Callable[[Any], Any], items: Iterable[Any], threads: int = 4) -> list[Any]:
    """`work` on each item from a few threads, each closing its connection when done."""

    def run(item: Any) -> Any:
        try:
            return work(item)
        finally:
            connection.close()

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(run, items))


def make_run(agent: str) -> Run:
    run = submit(agent, "race", actor="setup")
    try:
        run = run_until_idle(run.pk)
    except SimulatedCrash:
        run = recover(run.pk)
    assert run.status == STATE_OF[agent], (agent, run.status)
    return run


def clash(
    pairs: list[tuple[Callable[[], Any], Callable[[], Any]]],
    leads: list[int | None] | None = None,
) -> list[list[Any]]:
    """Run both calls of each pair at the same moment; each call's value or exception.

    Where `leads[i]` names a side (0 or 1), the other side starts only once that side's call
    has returned: the pair's serial order is forced, however the threads are scheduled.
    """
    outcomes: list[list[Any]] = [[None, None] for _ in pairs]
    order = leads if leads is not None else [None] * len(pairs)
    returned = [threading.Event() for _ in pairs]
    barriers = [threading.Barrier(2, timeout=60) for _ in range(GROUPS)]

    def side(group: int, which: int) -> None:
        try:
            for i in range(group, len(pairs), GROUPS):
                barriers[group].wait()
                if order[i] not in (None, which):
                    returned[i].wait()
                try:
                    outcomes[i][which] = pairs[i][which]()
                except BaseException as exc:  # judged by the test, whatever it is
                    outcomes[i][which] = exc
                finally:
                    returned[i].set()
        finally:
            connection.close()

    threads = [
        threading.Thread(target=side, args=(group, which), name=f"race-{group}-{which}")
        for group in range(GROUPS)
        for which in (0, 1)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def won(outcome: Any) -> bool:
    return not isinstance(outcome, BaseException)


def conflict(outcome: Any) -> bool:
    return isinstance(outcome, AgentOpsError) and outcome.code in CONFLICTS and outcome.message


def unexpected(outcomes: list[list[Any]], labels: list[str]) -> list[str]:
    """Every failure that is not a typed conflict error (a database error, a crash...)."""
    return [
        f"{label}: {type(o).__name__}: {o}"
        for pair, label in zip(outcomes, labels, strict=True)
        for o in pair
        if not won(o) and not conflict(o)
    ]


def operator_events(run_ids: list[Any]) -> Counter[tuple[str, str, str]]:
    """(run, kind, actor) of the events people wrote."""
    return Counter(
        (str(run_id), kind, actor)
        for run_id, kind, actor in Event.objects.filter(run_id__in=run_ids)
        .exclude(actor__in=["runtime", "setup"])
        .values_list("run_id", "kind", "actor")
    )


def test_conflicting_answers_have_exactly_one_winner(define, effects, observe) -> None:
    define(*AGENTS)
    started = time.monotonic()
    runs = in_threads(
        make_run, ["race-approval" if i % 2 else "race-question" for i in range(SCALE)]
    )
    interactions = [Interaction.objects.get(run=run) for run in runs]
    setup = time.monotonic() - started

    def answers(interaction: Interaction) -> tuple[dict[str, Any], dict[str, Any]]:
        if interaction.kind == "question":
            return {"answer": "order 1"}, {"answer": "order 2"}
        return {"approved": True, "reason": ""}, {"approved": False, "reason": "over the limit"}

    pairs = []
    for interaction in interactions:
        first, second = answers(interaction)
        pairs.append(
            (
                lambda i=interaction, r=first: respond(i.pk, r, actor="alice"),
                lambda i=interaction, r=second: respond(i.pk, r, actor="bob"),
            )
        )
    started = time.monotonic()
    outcomes = clash(pairs)
    racing = time.monotonic() - started

    assert unexpected(outcomes, [i.kind for i in interactions]) == []
    events = operator_events([run.pk for run in runs])
    winners: Counter[str] = Counter()
    for interaction, (a, b) in zip(interactions, outcomes, strict=True):
        assert won(a) != won(b), (interaction.pk, a, b)  # exactly one winner...
        loser = b if won(a) else a
        assert isinstance(loser, AgentOpsError)
        assert loser.code == "interaction_conflict"  # ...the loser told who answered and when
        winner, actor = ("alice", 0) if won(a) else ("bob", 1)
        winners[winner] += 1
        assert f"by {winner} at " in loser.message
        interaction.refresh_from_db()
        assert interaction.responded_by == winner
        assert interaction.response == answers(interaction)[actor]
        kinds = [k for (run, k, who), n in events.items() if run == str(interaction.run_id)]
        assert len(kinds) == 1  # one audit event, the winner's, and only once
        assert events[(str(interaction.run_id), kinds[0], winner)] == 1
    assert Run.objects.filter(pk__in=[r.pk for r in runs], status=RunStatus.QUEUED).count() == SCALE

    # The runs go on: each approved refund happens once, each rejected one never.
    finished = in_threads(lambda run: run_until_idle(run.pk), runs)
    assert {run.status for run in finished} == {RunStatus.COMPLETED}
    for interaction in interactions:
        interaction.refresh_from_db()
        operation_id = f"{interaction.run_id}:{interaction.operation_key}"
        applied = interaction.kind == "tool_approval" and interaction.response["approved"]
        assert effects.effects[operation_id] == (1 if applied else 0)
    observe(
        f"conflicting answers: pairs={SCALE} (approve/reject and two answers), winners="
        f"{dict(winners)} losers with the conflict error={SCALE} other errors=0 "
        f"events per interaction=1 effects={effects.total} (= approvals) duplicates=0 lost=0 "
        f"| setup {setup:.1f}s, races {racing:.1f}s on {2 * GROUPS} threads"
    )


@dataclass(frozen=True)
class Combo:
    """Two operator calls on a run in `state`, and the outcomes each serial order allows."""

    name: str
    agent: str
    # (which calls succeed, the run's status afterwards) for the order a-then-b, and b-then-a.
    serial: tuple[tuple[tuple[bool, bool], str], tuple[tuple[bool, bool], str]]


QUEUED, CANCELLED = RunStatus.QUEUED, RunStatus.CANCELLED
EXCLUSIVE = {"resolve/resolve", "retry/retry", "cancel/cancel"}
BLOCKED_KEY = "step-1/tool/toolu_01_0"
COMBOS = [
    Combo("resolve/resolve", "race-blocked", (((True, False), QUEUED), ((False, True), QUEUED))),
    Combo(
        "resolve/cancel", "race-blocked", (((True, True), CANCELLED), ((False, True), CANCELLED))
    ),
    Combo("resolve/retry", "race-blocked", (((True, False), QUEUED), ((True, False), QUEUED))),
    Combo("retry/retry", "race-failed", (((True, False), QUEUED), ((False, True), QUEUED))),
    Combo("retry/cancel", "race-timer", (((True, True), CANCELLED), ((False, True), CANCELLED))),
    Combo(
        "cancel/cancel", "race-approval", (((True, False), CANCELLED), ((False, True), CANCELLED))
    ),
    Combo(
        "respond/cancel",
        "race-approval",
        (((True, True), CANCELLED), ((False, True), CANCELLED)),
    ),
    # A bulk job's item (submitted and worked through as the workers do) against one operator.
    Combo(
        "bulk-pause/cancel",
        "race-approval",
        (((True, True), CANCELLED), ((False, True), CANCELLED)),
    ),
    Combo(
        "bulk-cancel/respond",
        "race-approval",
        (((True, False), CANCELLED), ((True, True), CANCELLED)),
    ),
    Combo("bulk-retry/retry", "race-failed", (((True, False), QUEUED), ((False, True), QUEUED))),
    # A fork reads the parent's log; a retry first leaves nothing to fork (it is queued).
    Combo("fork/retry", "race-failed", (((True, True), QUEUED), ((False, True), QUEUED))),
]
FAILED_MODEL_KEY = "step-1/model"
# Which side of a combination's run goes first, by the run's turn within its combination: half
# race at the barrier; the other half are played a-then-b and b-then-a by construction, since a
# bulk job's batch starts later than a single verb and, left to the race, would never go first.
LEADS: tuple[int | None, ...] = (None, 0, None, 1)


def calls(combo: Combo, run: Run) -> tuple[Callable[[], Any], Callable[[], Any]]:
    key = run.blocked_operation
    receipt = {"receipt_id": f"rcpt-{run.pk}"}

    def resolve_as(actor: str) -> Callable[[], Any]:
        result = {"receipt_id": f"{receipt['receipt_id']}-{actor}"}
        return lambda: resolve(run.pk, key, result, evidence=f"seen by {actor}", actor=actor)

    def retry_as(actor: str) -> Callable[[], Any]:
        return lambda: retry(run.pk, actor=actor)

    def cancel_as(actor: str) -> Callable[[], Any]:
        return lambda: cancel(run.pk, actor=actor, reason=f"{actor} cancelled")

    def respond_as(actor: str) -> Callable[[], Any]:
        interaction = Interaction.objects.get(run=run)
        return lambda: respond(interaction.pk, {"approved": True}, actor=actor)

    def bulk_as(action: str) -> Callable[[str], Callable[[], Any]]:
        """A bulk job submitted before the race, its filter matching this run alone; the race
        is a worker taking its item. The item skipped is a refusal."""

        def as_actor(actor: str) -> Callable[[], Any]:
            alone = {
                "agent": run.agent,
                "created_from": run.created_at.isoformat(),
                "created_to": (run.created_at + dt.timedelta(microseconds=1)).isoformat(),
            }
            job = bulk.submit(action, alone, actor=actor, reason="race")
            assert list(BulkJobItem.objects.filter(job=job).values_list("run_id", flat=True)) == [
                run.pk
            ]

            def work() -> BulkJob:
                bulk.work_batch(job)  # the batch a worker holding the job runs
                item = BulkJobItem.objects.get(job=job)
                if item.status != BulkItemStatus.TOUCHED:
                    raise InvalidTransition(item.detail)
                return job

            return work

        return as_actor

    def fork_as(actor: str) -> Callable[[], Any]:
        return lambda: fork(run.pk, FAILED_MODEL_KEY, actor=actor)

    verbs = {
        "resolve": resolve_as,
        "retry": retry_as,
        "cancel": cancel_as,
        "respond": respond_as,
        "fork": fork_as,
        "bulk-pause": bulk_as("pause"),
        "bulk-cancel": bulk_as("cancel"),
        "bulk-retry": bulk_as("retry"),
    }
    first, second = combo.name.split("/")
    return verbs[first]("alice"), verbs[second]("bob")


def test_resolve_retry_and_cancel_races_end_as_one_serial_order(define, effects, observe) -> None:
    define(*AGENTS)
    started = time.monotonic()
    plan = [COMBOS[i % len(COMBOS)] for i in range(SCALE)]
    leads = [LEADS[i // len(COMBOS) % len(LEADS)] for i in range(SCALE)]
    runs = in_threads(lambda combo: make_run(combo.agent), plan)
    setup = time.monotonic() - started
    charged = effects.total
    started = time.monotonic()
    pairs = [calls(combo, run) for combo, run in zip(plan, runs, strict=True)]
    outcomes = clash(pairs, leads)
    racing = time.monotonic() - started

    assert unexpected(outcomes, [combo.name for combo in plan]) == []
    events = operator_events([run.pk for run in runs])
    orders: Counter[str] = Counter()
    for combo, lead, run, (a, b) in zip(plan, leads, runs, outcomes, strict=True):
        run.refresh_from_db()
        seen = ((won(a), won(b)), run.status)
        assert seen in combo.serial, (combo.name, run.pk, a, b, run.status)
        if lead is not None:
            assert seen == combo.serial[lead], (combo.name, lead, run.pk, a, b, run.status)
        if combo.serial[0] == combo.serial[1]:
            orders[f"{combo.name}: same either way"] += 1
        else:
            orders[f"{combo.name}: {'a' if seen == combo.serial[0] else 'b'} first"] += 1
        if combo.name in EXCLUSIVE:
            assert won(a) != won(b)  # one winner; the loser got the conflict error
        # One audit event for each success, by its actor; none for a refusal.
        mine = Counter({(k, who): n for (r, k, who), n in events.items() if r == str(run.pk)})
        for actor, outcome in (("alice", a), ("bob", b)):
            assert sum(n for (_, who), n in mine.items() if who == actor) == won(outcome)
        if combo.agent == "race-blocked":
            # The winner's verified result is the operation's; the loser's is nowhere.
            op = Operation.objects.get(run=run, key=BLOCKED_KEY)
            winners = [who for (kind, who) in mine if kind == "operation_resolved"]
            assert len(winners) <= 1
            expected = {"receipt_id": f"rcpt-{run.pk}-{winners[0]}"} if winners else None
            assert op.result == expected

    # Both serial orders of each combination were met: a change that made one impossible fails.
    unmet = [
        f"{combo.name}: {side} first"
        for combo in COMBOS
        if combo.serial[0] != combo.serial[1]
        for side in "ab"
        if not orders[f"{combo.name}: {side} first"]
    ]
    assert unmet == []

    # The runs that may go on finish; nothing ran twice and nothing was lost.
    queued = [run for run in runs if Run.objects.get(pk=run.pk).status == RunStatus.QUEUED]
    finished = in_threads(lambda run: run_until_idle(run.pk), queued)
    assert [(r.agent, r.error) for r in finished if r.status != RunStatus.COMPLETED] == []
    blocked = sum(1 for combo in plan if combo.agent == "race-blocked")
    assert charged == blocked  # one charge per blocked run, made before its crash
    assert all(n == 1 for n in effects.effects.values())
    tickets = sum(1 for run in finished if run.agent in ("race-failed", "race-timer"))
    assert effects.total == charged + tickets
    observe(
        f"resolve/retry/cancel races: runs={SCALE} in {len(COMBOS)} combinations, outcomes "
        f"all serializable, other errors=0, events=one per success, effects={effects.total} "
        f"duplicates=0 lost=0 | {dict(sorted(orders.items()))} | setup {setup:.1f}s, "
        f"races {racing:.1f}s on {2 * GROUPS} threads"
    )
