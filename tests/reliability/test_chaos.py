"""The chaos soak: refund-desk runs on real workers under random kills, pauses, dropped database
connections, broker restarts and outages, a poison run and a model server answering every stop
reason and error; operators approving under a quorum rule with expiries, reconciling, pausing,
forking and running bulk jobs meanwhile; then the invariants (see chaos_support).

`make test` runs the bounded soak with a fresh seed each time; `make soak` runs the long one
(AGENTOPS_SOAK=1, `soak` marker; AGENTOPS_SOAK_RUNS sets its size), which also makes half the
answers and cancels through the HTTP API of a live server, has the workers deliver webhooks
to a receiver that fails and hangs and, run on a PostgreSQL server of its own (`make soak` does:
tests/reliability/own_postgres.py), crashes and restarts that server. AGENTOPS_CHAOS_SEED replays
a seed's schedule (the process timings differ from run to run, so a seed reproduces the faults
and the runs, not every interleaving). A seed that failed goes into REGRESSION_SEEDS.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime import register
from tests.reliability.chaos_support import (
    AGENT_MODULES,
    APPROVER,
    APPROVERS_GROUP,
    CHAOS_AGENT,
    EXPIRY_REASON,
    FAULTS,
    MODEL_ERRORS,
    MODEL_KEY,
    MODEL_KEY_ENV,
    MODEL_URL_ENV,
    POSTGRES_RESTART,
    SECOND_APPROVER,
    STOP_REASONS,
    WEBHOOK_OUTBOX_ENV,
    ApiOperator,
    ModelServer,
    OwnRedis,
    Report,
    Settings,
    Soak,
    Webhooks,
    chaos_desk,
    claude_desk,
)
from tests.reliability.conftest import STRICT
from tests.reliability.harness import Cluster
from tests.reliability.own_postgres import OwnPostgres

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

SOAK = os.environ.get("AGENTOPS_SOAK") == "1"
# Seeds that once found a violation, replayed (smaller) on every `make test`:
# 1978510267 showed a worker paused inside a tool call finishing that call after the takeover;
# the check now tells such calls (their writes refused by the fence) from two live owners.
REGRESSION_SEEDS: list[int] = [1978510267]
# `make test`: short Redis outages and expiries, so that it keeps to about a minute.
BOUNDED = Settings(runs=80, min_fault_seconds=25.0, redis_outage=4.0, expires_after=3.0)
REGRESSION = Settings(runs=40, min_fault_seconds=15.0, redis_outage=3.0, expires_after=3.0)


class ChaosCluster(Cluster):
    """The harness's cluster, with the chaos agents in the workers' code registry, the
    address of the fake Messages API and, when webhooks are delivered, the outbox's clocks."""

    def __init__(
        self, folder: Path, *, broker_url: str, model_url: str, outbox: dict[str, str]
    ) -> None:
        super().__init__(folder, broker_url=broker_url)
        self.model_url = model_url
        self.outbox = outbox

    def _env(self, extra: dict[str, str]) -> dict[str, str]:
        env = super()._env(extra)
        env["AGENTOPS_AGENT_MODULES"] = AGENT_MODULES
        env[MODEL_URL_ENV] = self.model_url
        env[MODEL_KEY_ENV] = MODEL_KEY
        env.update(self.outbox)
        return env


def approval_rule(size: Settings) -> None:
    """Refunds need two approvers of the group, and expire when nobody decides in time."""
    from django.contrib.auth.models import Group, User

    from runtime.models import ApprovalRule

    group = Group.objects.create(name=APPROVERS_GROUP)
    for name in (APPROVER, SECOND_APPROVER):
        User.objects.create(username=name).groups.add(group)
    ApprovalRule.objects.create(
        name="refunds: two approvers",
        agent=CHAOS_AGENT,
        tool="refund",
        approver_group=group,
        quorum=2,
        expires_after=dt.timedelta(seconds=size.expires_after),
        expiry_reason=EXPIRY_REASON,
    )


@pytest.fixture
def chaos(transactional_db: None, tmp_path: Path, settings: Any) -> Iterator[Callable[..., Soak]]:
    """soak(seed, size) -> a Soak on its own Redis and workers; everything is stopped after."""
    if shutil.which("redis-server") is None:
        message = "redis-server is not installed: the soak starts (and restarts) its own Redis"
        if STRICT:
            pytest.fail(message)
        pytest.skip(message)
    settings.AGENTOPS_AGENT_MODULES = AGENT_MODULES.split(",")
    register([chaos_desk, claude_desk], actor="chaos-test")
    servers: list[OwnRedis] = []
    models: list[ModelServer] = []
    clusters: list[Cluster] = []
    receivers: list[Webhooks] = []

    def make(
        seed: int,
        size: Settings,
        api: ApiOperator | None = None,
        webhooks: bool = False,
        postgres: OwnPostgres | None = None,
    ) -> Soak:
        approval_rule(size)
        hooks = Webhooks(seed) if webhooks else None
        if hooks is not None:
            settings.AGENTOPS_OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]  # the receiver's
            receivers.append(hooks)
            hooks.start()
        server = OwnRedis(tmp_path)
        servers.append(server)
        server.start()
        model = ModelServer()
        models.append(model)
        model.start()
        outbox = WEBHOOK_OUTBOX_ENV if webhooks else {}
        cluster = ChaosCluster(tmp_path, broker_url=server.url, model_url=model.url, outbox=outbox)
        clusters.append(cluster)
        return Soak(cluster, server, model, seed, size, api=api, webhooks=hooks, postgres=postgres)

    try:
        yield make
    finally:
        for cluster in clusters:
            cluster.stop_all()
        for server in servers:
            server.stop()
        for model in models:
            model.stop()
        for hooks in receivers:
            hooks.stop()


def seed_to_use() -> int:
    chosen = os.environ.get("AGENTOPS_CHAOS_SEED")
    return int(chosen) if chosen else random.SystemRandom().randrange(2**31)


def assert_invariants(report: Report) -> None:
    problems = "\n".join(report.problems)
    assert not report.problems, f"seed {report.seed} (add it to REGRESSION_SEEDS):\n{problems}"
    assert report.lost == 0
    assert report.duplicates == 0
    # The schedule starts with one fault of each kind, so that each is survived every time.
    assert set(FAULTS) <= set(report.faults)
    # The poison run killed its workers until it was contained, and was.
    assert report.worker_crashes >= 1
    assert report.contained["crash_loop"] + report.contained["attempts_exhausted"] >= 1
    # Every stop reason and every error of the model server was met by some run.
    served = set(report.model_answers)
    assert set(STOP_REASONS) | {e for e in MODEL_ERRORS if e} <= served, served
    assert report.approvals_counted and report.approvals and report.expiries
    assert report.pauses and report.forks and report.bulk_touched


def test_it_keeps_every_invariant_under_random_faults(chaos, observe) -> None:
    seed = seed_to_use()
    print(f"chaos seed={seed}")
    report = chaos(seed, BOUNDED).run()
    observe(report.line())
    assert_invariants(report)
    assert report.runs == BOUNDED.runs + report.forks


@pytest.mark.parametrize("seed", REGRESSION_SEEDS)
def test_it_keeps_every_invariant_for_the_seeds_that_once_failed(chaos, observe, seed) -> None:
    report = chaos(seed, REGRESSION).run()
    observe(report.line())
    assert_invariants(report)


def api_operator(url: str) -> ApiOperator:
    """A service account of the operators, with a token of every scope, as tests/api makes them;
    the API audits its actions as `api:<name>`."""
    from tests.api.conftest import make_account, make_token

    name = "chaos-desk-bot"
    return ApiOperator(url, name, make_token(make_account(name)))


@pytest.mark.soak
@pytest.mark.timeout(7200)
@pytest.mark.skipif(not SOAK, reason="the long soak: `make soak` (AGENTOPS_SOAK=1)")
def test_the_long_soak_keeps_every_invariant(chaos, observe, live_server, settings) -> None:
    seed = seed_to_use()
    runs = int(os.environ.get("AGENTOPS_SOAK_RUNS", "1000"))
    print(f"chaos seed={seed} runs={runs}")
    # Half the answers and cancels go through the HTTP API of a live server; the soak checks
    # their audit, not the per-token rate limit (tests/api covers it).
    settings.AGENTOPS_API_RATE_LIMIT = 0
    size = Settings(runs=runs, workers=6, window=24, min_fault_seconds=120.0, api_share=0.5)
    # The server every process runs on, when `make soak` started one of its own to crash.
    postgres = OwnPostgres.attached()
    if postgres is None and STRICT:
        pytest.fail("the long soak crashes its PostgreSQL server: run it through `make soak`")
    soak = chaos(seed, size, api_operator(live_server.url), webhooks=True, postgres=postgres)
    report = soak.run()
    observe(report.line())
    assert_invariants(report)
    if postgres is not None:
        assert report.faults[POSTGRES_RESTART] >= 1
        # Each start after an immediate stop replayed the WAL.
        assert report.postgres_recoveries == report.faults[POSTGRES_RESTART]
    assert report.runs == runs + report.forks
    assert report.api_actions
    assert report.webhook_events and report.webhook_failed and report.webhook_hung
