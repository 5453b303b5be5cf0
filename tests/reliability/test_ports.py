"""The ports the tests' servers listen on (tests/support/processes.py, free_port)."""

from __future__ import annotations

import socket

import pytest

from tests.support import processes


@pytest.fixture
def own_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes, "_handed_out", set())


def test_a_pass_is_handed_each_port_of_its_range_once(own_range, monkeypatch) -> None:
    """scripts/suite.sh gives each pass its own range: a port probed free is not handed out
    again before its server binds it, nor is one outside the range."""
    monkeypatch.setenv(processes.PORTS, "29900-29909")
    taken = []
    for _ in range(10):
        try:
            taken.append(processes.free_port())
        except RuntimeError:
            break  # the rest were in use on this machine: all of them were tried
    assert len(set(taken)) == len(taken)
    assert all(29900 <= port <= 29909 for port in taken)
    with pytest.raises(RuntimeError, match="no free port left in AGENTOPS_TEST_PORTS=29900-29909"):
        processes.free_port()


def test_a_port_something_listens_on_is_passed_over(own_range, monkeypatch) -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        monkeypatch.setenv(processes.PORTS, f"{port}-{port}")
        with pytest.raises(RuntimeError, match="no free port left"):
            processes.free_port()
        monkeypatch.setenv(processes.PORTS, "")
        assert processes.free_port() != port  # unset: the kernel's pick
