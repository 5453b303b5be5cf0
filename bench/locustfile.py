"""The operators of the load benchmark (bench/load.py), for Locust: each, on a session of its
own made beforehand, keeps the inbox's websocket open and browses — the inbox, the runs list, a
search, a run page — and decides approvals by posting the real form with its CSRF token.

Run by bench/load.py (`locust -f bench/locustfile.py --headless ...`) with its environment:
LOAD_SESSIONS (a JSON list of the operators' session cookies, one per simulated operator: they
are logged in beforehand), LOAD_FRAMES (a file where every websocket frame's arrival time, newest
event id and socket are written when Locust quits).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import time
from pathlib import Path
from typing import Any

import gevent
import websocket
from locust import HttpUser, between, events, task

INTERACTION = re.compile(r'href="/interactions/([0-9a-f-]{36})/"')
RUN = re.compile(r'href="/runs/([0-9a-f-]{36})/"')
CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
CURSOR = re.compile(r'id="live-cursor" data-event="(\d+)"')
SEARCHES = ("A-1001", "refund", "broken", "completed")

# (arrival time, newest event id, socket) of every frame any operator's socket received.
FRAMES: list[tuple[float, int, int]] = []
_numbers = itertools.count(1)
_sockets = itertools.count(1)


@events.quitting.add_listener
def _write_frames(**_: Any) -> None:
    Path(os.environ["LOAD_FRAMES"]).write_text(json.dumps(FRAMES))


class Operator(HttpUser):
    wait_time = between(1, 3)

    def on_start(self) -> None:
        sessions = json.loads(Path(os.environ["LOAD_SESSIONS"]).read_text())
        self.client.cookies.set("sessionid", sessions[(next(_numbers) - 1) % len(sessions)])
        self.seen_runs: list[str] = []
        self.socket: websocket.WebSocket | None = None
        self.listener = gevent.spawn(self._listen)

    def on_stop(self) -> None:
        self.listener.kill()
        if self.socket is not None:
            self.socket.close()

    def _listen(self) -> None:
        """The inbox's live connection, as a browser keeps it: every frame's arrival is noted."""
        host = str(self.host).removeprefix("http://")
        cookies = "; ".join(f"{c.name}={c.value}" for c in self.client.cookies)
        started = time.perf_counter()
        number = next(_sockets)
        try:
            # A browser checks a frame's UTF-8 natively; websocket-client without wsaccel does
            # it in Python, at some 7 ms per 50 KB inbox frame, which would make this process the
            # bottleneck of any stream of frames.
            self.socket = websocket.create_connection(
                f"ws://{host}/ws/inbox/",
                header=[f"Cookie: {cookies}"],
                origin=f"http://{host}",
                skip_utf8_validation=True,
            )
        except Exception as exc:
            _fire("websocket", "connect", started, exc)
            return
        _fire("websocket", "connect", started, None)
        FRAMES.append((time.time(), 0, number))  # when it opened: no event id is 0
        while True:
            try:
                message = self.socket.recv()
            except Exception as exc:
                _fire("websocket", "frame", time.perf_counter(), exc)
                return
            found = CURSOR.search(str(message))
            if found:
                FRAMES.append((time.time(), int(found.group(1)), number))

    @task(4)
    def inbox(self) -> None:
        page = self.client.get("/", name="inbox")
        self.pending = INTERACTION.findall(page.text)

    @task(3)
    def runs_list(self) -> None:
        page = self.client.get("/runs/", name="runs list")
        self.seen_runs = RUN.findall(page.text) or self.seen_runs

    @task(1)
    def search(self) -> None:
        self.client.get("/runs/", params={"q": random.choice(SEARCHES)}, name="runs search")

    @task(2)
    def run_page(self) -> None:
        if self.seen_runs:
            self.client.get(f"/runs/{random.choice(self.seen_runs)}/", name="run page")

    @task(4)
    def decide(self) -> None:
        """Open a pending approval from the inbox and approve it (another operator may have been
        first: a 409 says so, and is not an error)."""
        pending = getattr(self, "pending", None) or INTERACTION.findall(
            self.client.get("/", name="inbox").text
        )
        if not pending:
            return
        interaction = random.choice(pending)
        self.pending = [p for p in pending if p != interaction]
        page = self.client.get(f"/interactions/{interaction}/", name="approval page")
        token = _csrf(page.text)
        if page.status_code != 200 or not token:
            return  # decided meanwhile: the page says so, with no form
        with self.client.post(
            f"/interactions/{interaction}/respond/",
            {"decision": "approve", "reason": "", "csrfmiddlewaretoken": token},
            name="approve (POST)",
            allow_redirects=False,
            catch_response=True,
        ) as response:
            if response.status_code in (302, 409):
                response.success()
            else:
                response.failure(f"HTTP {response.status_code}")


def _csrf(html: str) -> str:
    found = CSRF.search(html)
    return found.group(1) if found else ""


def _fire(kind: str, name: str, started: float, exc: Exception | None) -> None:
    events.request.fire(
        request_type=kind,
        name=name,
        response_time=(time.perf_counter() - started) * 1000,
        response_length=0,
        exception=exc,
        context={},
    )
