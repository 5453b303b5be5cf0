"""Fixtures of the browser tests: Chromium, the deployment, the refund desk's data, the people.

The production-form stack (console server + Celery worker on Redis, PostgreSQL) is started once
for the whole package and shared by its tests; the embedded smoke test starts its own
`manage.py serve`. Each test gets a clean database (transactional), the demo orders, the
registered agents and three people: alice and bob (operators) and ada (an agent admin).

Missing pieces (Playwright, Chromium, Redis) skip these tests with the reason, and fail them in
the strict (CI) form, AGENTOPS_STRICT=1.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.stack import AGENT_MODULES, BROKER_URL, LAYER_URL, STARTED, Stack, wait_for
from tests.support.redis_db import flush_redis

STRICT = os.environ.get("AGENTOPS_STRICT") == "1"
CHROMIUM = os.environ.get("AGENTOPS_CHROMIUM", "/usr/bin/chromium")
OPERATOR_PERMISSIONS = [
    "view_run",
    "view_session",
    "view_operation",
    "view_interaction",
    "view_event",
    "respond_run",
    "resolve_run",
    "control_run",
]
_password_hash: list[str] = []
UNSAFE = "DJANGO_ALLOW_ASYNC_UNSAFE"


def pytest_configure(config: pytest.Config) -> None:
    """Put the SQLite test database in a file: the server process must share it.

    (An in-memory SQLite database is private to one process.) The same rule as the
    reliability tests', so whichever conftest runs first, the file is the same.
    """
    del config
    from django.conf import settings

    database = settings.DATABASES["default"]
    test = database.setdefault("TEST", {})
    if database["ENGINE"].endswith("sqlite3") and not test.get("NAME"):
        test["NAME"] = str(Path(tempfile.gettempdir()) / f"agentops-test-{os.getpid()}.sqlite3")


def _missing(message: str) -> None:
    if STRICT:
        pytest.fail(message + " (AGENTOPS_STRICT=1 requires it)")
    pytest.skip(message)


# --- the browser -----------------------------------------------------------------------------


@pytest.fixture(scope="package")
def chromium() -> Iterator[Any]:
    """Debian's Chromium driven by Playwright (its own browser download is never used).

    Playwright's sync API keeps an event loop running in this thread while it is started, and
    Django refuses ORM calls under a running loop unless DJANGO_ALLOW_ASYNC_UNSAFE is set: it is
    set for as long as the browser is (this package's tests), and Playwright is stopped after
    them, so the rest of the suite runs without either.
    """
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        _missing(f"Playwright is not installed ({exc}): pip install -e '.[test]'")
    if not os.access(CHROMIUM, os.X_OK):
        _missing(f"Chromium is not installed at {CHROMIUM}: apt-get install chromium")

    from tests.browser.browsing import CHROMIUM_ARGS

    previous = os.environ.get(UNSAFE)
    os.environ[UNSAFE] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                yield browser
            finally:
                browser.close()
    finally:
        if previous is None:
            os.environ.pop(UNSAFE, None)
        else:
            os.environ[UNSAFE] = previous


@pytest.fixture
def shots(request: pytest.FixtureRequest) -> Any:
    from tests.browser.browsing import Shots

    return Shots(request.node.name)


# --- the deployments ----------------------------------------------------------------------------


@pytest.fixture(scope="package")
def stack(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """The production form, shared by the package: a console server and a worker on Redis."""
    import redis

    for url in (BROKER_URL, LAYER_URL):
        try:
            redis.Redis.from_url(url, socket_connect_timeout=3).ping()
        except redis.RedisError as exc:
            _missing(f"Redis at {url} is unreachable: {exc}")
    flush_redis(BROKER_URL, LAYER_URL)
    deployment = Stack(tmp_path_factory.mktemp("browser-stack"))
    try:
        deployment.start()
        yield deployment
    finally:
        deployment.stop()
        flush_redis(BROKER_URL, LAYER_URL)


class Desk:
    """The refund desk's world in the test database, and the runs the test submits."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack

    def submit(
        self, message: str, *, agent: str = "refund-desk", actor: str = "support-inbox"
    ) -> Any:
        from runtime import submit

        return submit(agent, message, actor=actor)

    def wait_status(self, run: Any, *statuses: str, timeout: float = 30.0) -> Any:
        from runtime.models import Run

        def reached() -> Any:
            found = Run.objects.get(pk=run.pk)
            return found if found.status in statuses else None

        try:
            return wait_for(
                reached,
                timeout=timeout,
                what=f"run {run.pk} to be {' or '.join(statuses)}",
                stack=self.stack,
            )
        except AssertionError as exc:
            now = Run.objects.get(pk=run.pk)
            raise AssertionError(
                f"{exc}\nrun is {now.status} ({now.attention_reason}): {now.error}"
            ) from None

    def pending(self, run: Any) -> Any:
        from runtime.models import Interaction, InteractionStatus

        return Interaction.objects.get(run=run, status=InteractionStatus.PENDING)

    def refunds(self, order: str | None = None) -> int:
        from demo.models import Refund

        found = Refund.objects.all()
        return found.filter(order__number=order).count() if order else found.count()


def _world() -> None:
    """Orders, agent registrations and people, in a fresh database."""
    from django.contrib.auth.hashers import make_password
    from django.utils import timezone

    from demo.agents import refund_desk_v2
    from demo.models import Customer, Order
    from demo.seed import CUSTOMERS
    from runtime import register
    from tests.browser.agents import AGENTS
    from tests.browser.browsing import PASSWORD
    from tests.support import personas

    placed = timezone.now() - dt.timedelta(days=9)
    for name, email, number, item, total in CUSTOMERS:
        customer = Customer.objects.create(name=name, email=email)
        Order.objects.create(
            number=number, customer=customer, item=item, total_cents=total, placed_at=placed
        )
    register([refund_desk_v2, *AGENTS], actor="deploy")

    if not _password_hash:  # hashing is slow on purpose: once per session
        _password_hash.append(make_password(PASSWORD))
    for username in ("alice", "bob"):
        user = personas.user_with(username, *OPERATOR_PERMISSIONS)
        assert user.user_permissions.count() == len(OPERATOR_PERMISSIONS)
        personas.with_password(user, _password_hash[0])
    personas.with_password(personas.superuser("ada"), _password_hash[0])


def _settle(stack: Stack) -> None:
    """Let the worker finish what it holds before the tables are emptied under it."""
    from runtime.models import Run, RunStatus

    wait_for(
        lambda: not Run.objects.filter(status=RunStatus.RUNNING).exists(),
        timeout=15,
        what="no run to be running at the end of the test",
        stack=stack,
    )


@pytest.fixture
def desk(transactional_db: None, settings: Any, stack: Stack) -> Iterator[Desk]:
    """The production form's world: runs submitted here go to the stack's worker."""
    settings.AGENTOPS_AGENT_MODULES = AGENT_MODULES
    settings.AGENTOPS_DISPATCH = "tests.browser.stack.enqueue"
    settings.AGENTOPS_PUBLISH = "agentops.live.publish"
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [LAYER_URL]},
        }
    }
    stack.ensure_running()
    _world()
    yield Desk(stack)
    _settle(stack)


@pytest.fixture
def embedded_desk(
    transactional_db: None, settings: Any, tmp_path: Path
) -> Iterator[tuple[Desk, Stack]]:
    """The embedded form: one `manage.py serve` with its in-process worker, nothing else.

    Runs submitted here reach its worker through its sweep (the in-memory broker is private to
    its process).
    """
    settings.AGENTOPS_AGENT_MODULES = AGENT_MODULES
    _world()
    deployment = Stack(tmp_path / "embedded", embedded=True)
    deployment.stop_other_workers()
    try:
        deployment.start()
        yield Desk(deployment), deployment
        _settle(deployment)
    finally:
        deployment.stop()


@pytest.fixture
def people(chromium: Any, shots: Any) -> Iterator[Callable[..., Any]]:
    """people(stack, "alice") -> alice, logged in in her own browser context.

    At the end, every page each person opened must have stayed clean (see browsing.Watch).
    """
    from tests.browser.browsing import Person

    opened: list[Person] = []

    def person(stack: Stack, username: str) -> Person:
        found = Person(chromium, stack.base_url, username, shots)
        opened.append(found)
        return found.login()

    yield person
    problems = [f"{p.username}: {problem}" for p in opened for problem in p.watch.problems()]
    for found in opened:
        found.close()
    assert problems == [], "\n".join(problems)


@pytest.fixture(autouse=True, scope="session")
def _flush_outlasts_a_deadlock() -> Iterator[None]:
    """The stack's worker keeps sweeping while a test's database is emptied between tests, and
    PostgreSQL may pick the flush's TRUNCATE as a deadlock's victim: the flush is then retried,
    as the sweep's transaction has ended by the time the deadlock is reported."""
    from django.core.management.base import CommandError
    from django.core.management.commands import flush

    handle = flush.Command.handle

    def retried(self: flush.Command, **options: Any) -> None:
        for attempt in range(3):
            try:
                return handle(self, **options)
            except CommandError as exc:
                if attempt == 2 or "deadlock detected" not in str(exc.__cause__):
                    raise
        return None

    flush.Command.handle = retried  # type: ignore[method-assign]
    yield
    flush.Command.handle = handle  # type: ignore[method-assign]


# The lines of each server's and worker's log a failed test's report shows: CI keeps the output
# of a failed run, not the test's folder.
LOG_LINES_ON_FAILURE = 80


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call" and report.failed:
        report.sections.append(("the runs, as the test left them", _runs_now()))
        # The stack started last first: a test's own (embedded) stack, before the shared one.
        for stack in reversed(STARTED):
            for process in stack.processes:
                tail = process.text().splitlines()[-LOG_LINES_ON_FAILURE:]
                name = f"{stack.folder.name}/{process.log.name}, its last lines"
                report.sections.append((name, "\n".join(tail)))
    return report


def _runs_now() -> str:
    """Each run of the test's database: its status and why, and its last events."""
    from runtime.models import Event, Run

    try:
        lines = []
        for run in Run.objects.order_by("created_at")[:20]:
            kinds = Event.objects.filter(run=run).order_by("-id").values_list("kind", "actor")
            last = ", ".join(f"{kind} ({actor})" for kind, actor in list(kinds[:12])[::-1])
            lease = f"{run.lease_expires_at:%H:%M:%S.%f}" if run.lease_expires_at else "-"
            reason = run.attention_reason or "-"
            lines.append(f"{run.pk} {run.status} {reason} fence {run.fence} lease {lease}")
            lines.append(f"  {last}")
        return "\n".join(lines) or "no run"
    except Exception as exc:  # the report must not fail over what it cannot read
        return f"could not read them: {exc!r}"
