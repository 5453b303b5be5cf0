"""Start the project's processes for tests and benchmarks: Celery workers and `manage.py serve`.

The one place that knows their command lines. Every process runs in its own session (process
group), asks the kernel to kill it when the starting process dies, and writes to a log file the
tests read (`wait_for_log`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT = 60.0
# What each process logs once it can take work.
WORKER_READY = " ready."
SERVER_READY = "Listening on TCP address"

# Linux: a child asks for SIGKILL when its parent dies, so no process outlives a killed test run.
# Looked up here, before any fork: the child only makes the call.
_PR_SET_PDEATHSIG = 1
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def _die_with_parent() -> None:
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def wait_until(
    predicate: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.05
) -> Any:
    """Poll `predicate` until it returns something truthy; fail naming `what` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


# The ports this process's tests may listen on, "first-last" (scripts/suite.sh gives each of its
# two passes its own range, below the kernel's range for outgoing connections). A port probed free
# is bound by its server a moment later: in a range of its own, no other pass, and no client's
# outgoing connection, is handed it meanwhile. Unset: any port the kernel picks.
PORTS = "AGENTOPS_TEST_PORTS"
_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback port nothing listens on, not handed out before by this process."""
    span = os.environ.get(PORTS, "")
    if not span:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])
    first, last = (int(end) for end in span.split("-"))
    for port in random.sample(range(first, last + 1), last + 1 - first):
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port left in {PORTS}={span}")


def children(pid: int) -> list[int]:
    """The processes `pid` started that are still there (Linux: the parent in /proc/*/stat)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # ended meanwhile
        # The parent's pid is the second field after the command's name (in parentheses).
        if int(text[text.rindex(")") + 2 :].split()[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def worker_command(
    hostname: str, *, pool: str = "solo", concurrency: int = 1, options: tuple[str, ...] = ()
) -> list[str]:
    """`celery -A agentops worker` as production runs it, minus the cluster chatter a test or
    a benchmark does not need (mingle, gossip and heartbeats between workers)."""
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "agentops",
        "worker",
        f"--pool={pool}",
        f"--concurrency={concurrency}",
        f"--hostname={hostname}@%h",
        "--loglevel=INFO",
        "--without-mingle",
        "--without-gossip",
        "--without-heartbeat",
        *options,
    ]


def serve_command(address: str, *options: str) -> list[str]:
    """`manage.py serve` (the console; with the memory:// broker, its worker too)."""
    return [sys.executable, "manage.py", "serve", *options, address]


@dataclass
class Process:
    """One started process (a worker, or `manage.py serve`) and its log."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @classmethod
    def start(cls, name: str, command: list[str], env: dict[str, str], log: Path) -> Process:
        """Start `command` in its own session, output to `log`; it dies with this process."""
        with log.open("ab") as out:
            popen = subprocess.Popen(
                command,
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - one libc call, no locks
            )
        return cls(name, popen, log)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait_for_log(self, needle: str, *, timeout: float = STARTUP_TIMEOUT) -> None:
        def seen() -> bool:
            if needle in self.text():
                return True
            if not self.alive():
                raise AssertionError(
                    f"{self.name} exited ({self.popen.returncode}) before logging {needle!r}:\n"
                    + self.text()[-3000:]
                )
            return False

        wait_until(seen, timeout=timeout, what=f"{self.name} to log {needle!r}")

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} still running after {timeout:.0f}s:\n{self.text()[-3000:]}"
            ) from None

    def send(self, sig: int) -> None:
        os.killpg(self.popen.pid, sig)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (a warm shutdown), then SIGKILL if it is still there after `timeout`."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        """SIGKILL the whole process group and reap it."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(10)

    def count(self, needle: str) -> int:
        return self.text().count(needle)
