"""The deployment the browser tests drive: the console server and its workers, as processes.

Production form: `manage.py serve` (daphne, ASGI, so websockets work; it serves the console only
when a broker is configured) and `celery -A agentops worker` processes on Redis (the broker and
the Channels layer each on a DB index of their own), all on the test's database. Embedded form:
`manage.py serve` alone, with its in-process worker, the in-memory broker and channel layer.

Every process runs in its own process group, dies with the test process, and is killed when
the stack stops, pass or fail. A "deploy" restarts the processes with other environment (the
code the agents module defines depends on it), as a real deploy restarts them with new code.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
from pathlib import Path
from typing import Any

from django.conf import settings

from tests.reliability.harness import database_env
from tests.support.processes import (
    SERVER_READY,
    WORKER_READY,
    Process,
    free_port,
    serve_command,
    wait_until,
    worker_command,
)

REPO = Path(__file__).resolve().parents[2]
# A Redis DB index for the broker and one for the Channels layer, apart from other suites'.
BROKER_URL = os.environ.get("AGENTOPS_BROWSER_BROKER_URL", "redis://127.0.0.1:6379/3")
LAYER_URL = os.environ.get("AGENTOPS_BROWSER_REDIS_URL", "redis://127.0.0.1:6379/4")
AGENT_MODULES = ["demo.agents", "tests.browser.agents"]
# A short lease makes a killed worker's run recoverable within seconds; long enough that a
# machine busy with a browser does not turn a slow heartbeat into a takeover.
LEASE_SECONDS = 4.0
SWEEP_SECONDS = 0.5
STARTUP_TIMEOUT = 60.0
# Environment of the test process that must not leak into the deployment it starts.
_NOT_INHERITED = ("AGENTOPS_", "CELERY_", "DJANGO_")
_NOT_INHERITED_NAMES = {"DATABASE_URL", "REDIS_URL", "ANTHROPIC_API_KEY"}


# Every stack started in this test process, so that one can keep the others' workers away from
# its runs (they all work on the same test database).
STARTED: list[Stack] = []


def enqueue(run_id: str) -> None:
    """The test process's AGENTOPS_DISPATCH hook: hand a committed run to the stack's workers.

    The same message `agentops.tasks.enqueue` sends, on the stack's broker, whatever broker the
    test process's own Celery app was configured with.
    """
    from agentops.celery import app
    from agentops.tasks import advance_run

    with app.connection_for_write(BROKER_URL) as conn:
        advance_run.apply_async(
            args=[str(run_id)], connection=conn, queue=settings.CELERY_TASK_DEFAULT_QUEUE
        )


class Stack:
    """The console server and its worker(s) on the test database, at one address."""

    def __init__(self, folder: Path, *, embedded: bool = False) -> None:
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.embedded = embedded
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        # The environment of the current deploy (on top of the base environment).
        self.deployed: dict[str, str] = {}
        self.server: Process | None = None
        self.worker: Process | None = None
        self.processes: list[Process] = []
        self._serial = itertools.count(1)

    def url(self, path: str) -> str:
        return self.base_url + path

    # --- processes ---------------------------------------------------------------------------

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(_NOT_INHERITED) and key not in _NOT_INHERITED_NAMES
        }
        env.update(
            {
                "DJANGO_SETTINGS_MODULE": "agentops.settings",
                "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
                "PYTHONUNBUFFERED": "1",
                "AGENTOPS_AGENT_MODULES": ",".join(AGENT_MODULES),
                "AGENTOPS_LEASE_SECONDS": str(LEASE_SECONDS),
                "AGENTOPS_SWEEP_SECONDS": str(SWEEP_SECONDS),
                "AGENTOPS_LOG_LEVEL": "INFO",
                # Every frame checks its socket's login: a check that closed a socket whose
                # login holds would fail the browser tests that watch pages live.
                "AGENTOPS_LIVE_LOGIN_CHECK_SECONDS": "0",
                **database_env(),
            }
        )
        if not self.embedded:
            env.update(
                {
                    "CELERY_BROKER_URL": BROKER_URL,
                    "REDIS_URL": LAYER_URL,
                    # A message held by a killed worker comes back soon.
                    "AGENTOPS_BROKER_VISIBILITY_TIMEOUT": "2",
                }
            )
        env.update(self.deployed)
        env.update(extra or {})
        return env

    def _start(self, name: str, command: list[str], env: dict[str, str]) -> Process:
        log = self.folder / f"{next(self._serial):02d}-{name}.log"
        process = Process.start(name, command, env, log)
        self.processes.append(process)
        return process

    def start_server(self, *, wait: bool = True) -> Process:
        """`manage.py serve` on the stack's port (static files served: no proxy in front)."""
        command = serve_command(f"127.0.0.1:{self.port}", "--insecure")
        self.server = self._start("server", command, self.env())
        if wait:
            self.server.wait_for_log(SERVER_READY, timeout=STARTUP_TIMEOUT)
        return self.server

    def start_worker(self, *, crash_at: str | None = None, wait: bool = True) -> Process:
        """A `celery -A agentops worker`; with `crash_at`, one that kills itself there."""
        assert not self.embedded, "the embedded stack runs its worker inside the server"
        name = "crashing-worker" if crash_at else "worker"
        command = worker_command(f"{name}-{next(self._serial)}")
        extra = {"AGENTOPS_CRASH_AT": crash_at} if crash_at else {}
        process = self._start(name, command, self.env(extra))
        if wait:
            process.wait_for_log(WORKER_READY, timeout=STARTUP_TIMEOUT)
        if not crash_at:
            self.worker = process
        return process

    def start(self) -> None:
        """Start the server and (with a broker) a worker, side by side."""
        if self not in STARTED:
            STARTED.append(self)
        server = self.start_server(wait=False)
        worker = None if self.embedded else self.start_worker(wait=False)
        server.wait_for_log(SERVER_READY, timeout=STARTUP_TIMEOUT)
        if worker is not None:
            worker.wait_for_log(WORKER_READY, timeout=STARTUP_TIMEOUT)

    @staticmethod
    def stop_process(process: Process | None, *, graceful: bool = True) -> None:
        """Stop a process: a warm shutdown (SIGTERM) first when `graceful`, then SIGKILL."""
        if process is None or not process.alive():
            return
        if graceful:
            with contextlib.suppress(ProcessLookupError):
                process.send(signal.SIGTERM)
            with contextlib.suppress(AssertionError):
                process.wait_exit(15)
        process.kill()

    def stop_server(self) -> None:
        """The server goes away at once (SIGKILL): every open websocket drops."""
        self.stop_process(self.server, graceful=False)

    def stop_worker(self) -> None:
        self.stop_process(self.worker)
        self.worker = None

    def deploy(self, **env: str) -> None:
        """Restart the server and the worker with `env` on top of the base environment."""
        self.stop_server()
        if not self.embedded:
            self.stop_worker()
        self.deployed = dict(env)
        self.start()

    def ensure_running(self) -> None:
        """Back to the original deploy with a live server and worker (a failed test may have
        left a crashed worker or an edited deploy behind)."""
        if self.deployed:
            self.deploy()
            return
        if self.server is None or not self.server.alive():
            self.start_server()
        if not self.embedded and (self.worker is None or not self.worker.alive()):
            self.start_worker()

    def crash_worker(self, crash_at: str) -> Process:
        """Replace the worker with one that SIGKILLs itself at `crash_at` (a crash window)."""
        self.stop_worker()
        return self.start_worker(crash_at=crash_at)

    def stop(self) -> None:
        for process in self.processes:
            process.kill()
        if self in STARTED:
            STARTED.remove(self)

    def stop_other_workers(self) -> None:
        """Stop the workers of every other stack: the runs of this test are this stack's.

        (A stack's next test starts its worker again: see `ensure_running`.)
        """
        for other in STARTED:
            if other is not self:
                other.stop_worker()

    # --- diagnostics ---------------------------------------------------------------------------

    def logs(self, chars: int = 2500) -> str:
        """The end of each process's log, for a failure message."""
        return "\n".join(
            f"--- {p.log.name} ({'running' if p.alive() else p.popen.returncode}) ---\n"
            + p.text()[-chars:]
            for p in self.processes
        )


def wait_for(predicate: Any, *, timeout: float, what: str, stack: Stack | None = None) -> Any:
    """wait_until, with the stack's logs in the failure message."""
    try:
        return wait_until(predicate, timeout=timeout, what=what, interval=0.05)
    except AssertionError as exc:
        if stack is None:
            raise
        raise AssertionError(f"{exc}\n{stack.logs()}") from None
