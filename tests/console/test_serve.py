"""`manage.py serve`: what it asks of daphne."""

from __future__ import annotations

from typing import Any

from daphne.management.commands.runserver import Command as DaphneRunserver
from django.core.management import call_command

from agentops.management.commands.serve import WEBSOCKET_OPEN_SECONDS


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
