"""`manage.py serve`: what it asks of daphne."""

from __future__ import annotations

import contextlib
import os
import signal
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from daphne.management.commands.runserver import Command as DaphneRunserver
from django.core.management import CommandError, call_command

from agentops.management.commands.serve import WEBSOCKET_OPEN_SECONDS
from tests.reliability.harness import BROKER_URL, Cluster
from tests.support.processes import (
    SERVER_READY,
    Process,
    children,
    free_port,
    serve_command,
    wait_until,
)

# The live updates' Redis database of these processes (no test reads it).
SERVE_REDIS_URL = os.environ.get("AGENTOPS_TEST_SERVE_REDIS_URL", "redis://127.0.0.1:6379/6")


def test_a_websocket_may_take_as_long_to_open_as_a_page_on_a_busy_process(monkeypatch) -> None:
    """Daphne's own limits, 5 s for the handshake and 20 s for the accept, reset the live
    sockets of a loaded console whose pages it still served."""
    asked: dict[str, Any] = {}

    def serve(self: Any, *args: Any, **options: Any) -> None:
        asked.update(server=self.server_cls.keywords, handshake=self.websocket_handshake_timeout)

    monkeypatch.setattr(DaphneRunserver, "inner_run", serve)
    call_command("serve", "--no-worker", "127.0.0.1:0")
    assert asked == {
        "server": {"websocket_connect_timeout": WEBSOCKET_OPEN_SECONDS},
        "handshake": WEBSOCKET_OPEN_SECONDS,
    }


def test_serving_from_several_processes_refuses_the_embedded_setup_and_fewer_than_one(
    settings,
) -> None:
    settings.EMBEDDED_BROKER = True
    with pytest.raises(CommandError, match="--processes needs CELERY_BROKER_URL and REDIS_URL"):
        call_command("serve", "--processes=2", "127.0.0.1:0")
    with pytest.raises(CommandError, match="--processes must be at least 1"):
        call_command("serve", "--processes=0", "127.0.0.1:0")


def _sockets(pid: int) -> set[str]:
    held = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            held.add(str(fd.readlink()))
    return {target for target in held if target.startswith("socket:")}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("ended_by", ["SIGTERM", "SIGKILL"])
def test_processes_serve_one_socket_and_end_with_the_first(tmp_path, ended_by: str) -> None:
    """`serve --processes 3`: three processes on the one port; stopping the first stops them
    all, and killing it leaves none behind (they ask the kernel to end them with it)."""
    port = free_port()
    cluster = Cluster(tmp_path)
    env = cluster._env({"CELERY_BROKER_URL": BROKER_URL, "REDIS_URL": SERVE_REDIS_URL})
    first = Process.start(
        "serve", serve_command(f"127.0.0.1:{port}", "--processes=3"), env, tmp_path / "serve.log"
    )
    try:
        wait_until(
            lambda: first.count(SERVER_READY) == 3, timeout=60, what="three processes listening"
        )
        others = children(first.pid)
        assert len(others) == 2
        shared = _sockets(first.pid)
        assert all(shared & _sockets(pid) for pid in others)  # the one listening socket
        for _ in range(20):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/") as page:
                assert page.status == 200
        os.kill(first.pid, getattr(signal, ended_by))
        first.wait_exit(timeout=30)
        wait_until(
            lambda: not any(_alive(pid) for pid in others), timeout=30, what="the others to end"
        )
    finally:
        first.kill()
