"""A loopback HTTP receiver for webhook and Slack tests, written from the providers' documents.

It records every request (path, headers, body) and answers what the test tells it to: 200 by
default; a status code (e.g. Slack's 404 "channel_not_found" or 429 with Retry-After), a redirect,
or no answer at all while it is "down" (the port closed, so connections are refused).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Answer:
    status: int = 200
    body: bytes = b"ok"
    headers: dict[str, str] = field(default_factory=dict)


class Receiver:
    def __init__(self, answer: Callable[[Received], Answer] | None = None) -> None:
        self.received: list[Received] = []
        self.answer = answer or (lambda _: Answer())
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def up(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                got = Received(self.path, dict(self.headers.items()), self.rfile.read(length))
                with receiver._lock:
                    receiver.received.append(got)
                answer = receiver.answer(got)
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def down(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
