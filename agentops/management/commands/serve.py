"""`manage.py serve [addr:port]`: the console over ASGI, and in the embedded setup the worker.

With the embedded broker (CELERY_BROKER_URL unset, i.e. memory://) the Celery worker and its
sweep run inside this process, on threads: the in-memory broker and the in-memory channel layer
only reach within one process, so the console, the executor and the live updates must share it.
With a real broker (Redis) this serves the console only; runs are executed by
`celery -A agentops worker` processes, and `--processes N` serves it from N processes sharing
the one listening socket (the kernel hands each connection to one of them), as many as the
machine has cores for: a process's Python runs on one core at a time.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import os
import signal
import socket
import subprocess
import sys
from typing import Any

from daphne.management.commands.runserver import Command as DaphneRunserver
from daphne.server import Server
from django.apps import apps
from django.conf import settings
from django.core.management.base import CommandError
from django.db import connections

from agentops.celery import EmbeddedWorker

# How long a websocket may take to open (its handshake, then the consumer's accept) before daphne
# drops it: as long as a page may take on a busy process. With daphne's 5 s handshake (and 20 s
# accept), a loaded console reset the live sockets of pages it still served.
WEBSOCKET_OPEN_SECONDS = 60


class Command(DaphneRunserver):
    help = (
        "Serve the console over ASGI (daphne). With the embedded broker (memory://), also run "
        "the Celery worker and its sweep inside this process."
    )

    def add_arguments(self, parser: Any) -> None:
        super().add_arguments(parser)
        # One process that stays up: the worker would be restarted with every code reload.
        parser.set_defaults(use_reloader=False, websocket_handshake_timeout=WEBSOCKET_OPEN_SECONDS)
        parser.add_argument(
            "--reload",
            action="store_true",
            dest="use_reloader",
            help="Restart on code changes (development).",
        )
        parser.add_argument(
            "--no-worker",
            action="store_false",
            dest="embedded_worker",
            help="Do not run the embedded worker, even with the memory:// broker.",
        )
        parser.add_argument(
            "--worker-concurrency",
            type=int,
            default=None,
            help="Task threads of the embedded worker (default AGENTOPS_EMBEDDED_CONCURRENCY).",
        )
        parser.add_argument(
            "--processes",
            type=int,
            default=1,
            help="Serve from this many processes on the one port (needs Redis for the broker "
            "and the live updates: the embedded ones reach within one process).",
        )
        # A process started by --processes: it serves the listening socket it inherited.
        parser.add_argument("--fd", type=int, default=None, help=argparse.SUPPRESS)
        parser.add_argument(
            "--demo-login",
            action="store_true",
            help="Once the console listens, print the demo's logins (what `make run` uses).",
        )

    def inner_run(self, *args: Any, **options: Any) -> None:
        processes, fd = options["processes"], options["fd"]
        if processes < 1:
            raise CommandError("--processes must be at least 1")
        if processes > 1 and (settings.EMBEDDED_BROKER or _in_memory_layer()):
            raise CommandError(
                "--processes needs CELERY_BROKER_URL and REDIS_URL: the embedded broker and "
                "channel layer reach within one process"
            )
        server: dict[str, Any] = {"websocket_connect_timeout": WEBSOCKET_OPEN_SECONDS}
        others: list[subprocess.Popen[bytes]] = []
        if processes > 1:
            fd, others = self._start_others(processes - 1)
        elif fd is not None:
            _end_with_parent()
        if fd is not None:
            server["inherited"] = [f"fd:fileno={fd}"]
        if options["demo_login"]:
            if not apps.is_installed("demo"):
                raise CommandError("--demo-login needs the demo (AGENTOPS_DEMO=1)")
            # Printed last, when the port is bound: what a newcomer needs next, not lost above.
            server["ready_callable"] = self._print_demo_logins
        self.server_cls = functools.partial(_server, **server)
        worker = None
        if options["embedded_worker"] and settings.EMBEDDED_BROKER:
            worker = EmbeddedWorker(
                concurrency=options["worker_concurrency"] or settings.AGENTOPS_EMBEDDED_CONCURRENCY
            )
            worker.start()
            self.stdout.write(
                f"Embedded worker ready: {worker.concurrency} task threads, "
                f"sweep every {settings.AGENTOPS_SWEEP_SECONDS:g}s, "
                f"lease {settings.AGENTOPS_LEASE_SECONDS:g}s.\n"
            )
        elif options["embedded_worker"]:
            self.stdout.write(
                "External broker configured: runs are executed by `celery -A agentops worker`.\n"
            )
        self.stdout.flush()
        try:
            super().inner_run(*args, **options)
        finally:
            if worker is not None:
                worker.stop()
            for other in others:
                other.terminate()
            for other in others:
                other.wait()

    def _start_others(self, count: int) -> tuple[int, list[subprocess.Popen[bytes]]]:
        """The listening socket, bound here, and `count` more processes serving it."""
        family = socket.AF_INET6 if self._raw_ipv6 else socket.AF_INET
        listening = socket.create_server((self.addr, int(self.port)), family=family, backlog=1024)
        fd = listening.fileno()
        os.set_inheritable(fd, True)
        self._listening = listening  # kept open (and so bound) while this process serves
        # Nothing of this process's connections may be shared with the others.
        connections.close_all()
        command = [sys.executable, "-m", "django", "serve", "--no-worker", f"--fd={fd}"]
        address = f"[{self.addr}]" if self._raw_ipv6 else self.addr
        others = [
            subprocess.Popen([*command, f"{address}:{self.port}"], pass_fds=(fd,))
            for _ in range(count)
        ]
        self.stdout.write(f"Serving from {count + 1} processes on one socket.\n")
        return fd, others

    def _print_demo_logins(self) -> None:
        from demo.logins import logins

        address = f"[{self.addr}]" if self._raw_ipv6 else self.addr
        lines = [f"The console is up: {self.protocol}://{address}:{self.port}/"]
        lines += [f"  {login.role:<12} {login.username} / {login.password}" for login in logins()]
        lines.append("Stop it with Ctrl-C; `make run` again keeps the data and the logins.")
        width = max(len(line) for line in lines)
        rule = "=" * width
        self.stdout.write("\n".join(["", rule, *lines, rule, ""]))
        self.stdout.flush()

    def get_application(self, options: dict[str, Any]) -> Any:
        # The embedded setup is the one-command install: it serves its own static files.
        if settings.EMBEDDED_BROKER:
            options = {**options, "insecure_serving": True}
        return super().get_application(options)


def _server(*, endpoints: list[str], inherited: list[str] | None = None, **options: Any) -> Server:
    """daphne's Server, listening on the inherited socket instead when there is one."""
    return Server(endpoints=inherited or endpoints, **options)


def _in_memory_layer() -> bool:
    return str(settings.CHANNEL_LAYERS["default"]["BACKEND"]).endswith("InMemoryChannelLayer")


def _end_with_parent() -> None:
    """A process started by --processes ends when the one that started it does (Linux)."""
    if sys.platform == "linux":
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
