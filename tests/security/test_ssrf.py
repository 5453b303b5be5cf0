"""Webhook and Slack destinations, attacked: no spelling of a private address gets a request out.

Every outbound POST (webhooks and Slack alike) goes through `outbound.post`. Each attack below is
aimed at a real receiver on this machine's loopback; where the address can reach it, the same
request with the network allowed does arrive, so a refusal here is the check at work and not a
connection that failed anyway.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from agentops.integrations import outbound
from tests.integrations.receiver import Answer, Receiver

EVERYWHERE = ["0.0.0.0/0", "::/0"]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver().up()
    yield running
    running.down()


@pytest.fixture(autouse=True)
def _nothing_allowed(settings: Any) -> None:
    settings.AGENTOPS_OUTBOUND_ALLOWED_NETWORKS = []
    settings.AGENTOPS_OUTBOUND_TIMEOUT_SECONDS = 5.0


# Spellings of this machine that the resolver turns into a loopback or "this host" address.
LOOPBACK_SPELLINGS = [
    "127.0.0.1",
    "localhost",
    "127.1",  # the short form
    "2130706433",  # decimal
    "0x7f000001",  # hexadecimal
    "0x7f.0.0.1",
    "017700000001",  # octal
    "0177.0.0.1",
    "127.000.000.001",
    "0.0.0.0",  # "this host": Linux connects it to loopback
    "[::ffff:127.0.0.1]",  # IPv4-mapped IPv6
    "[::ffff:7f00:1]",
]


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS)
def test_every_spelling_of_loopback_is_refused_and_nothing_arrives(host, receiver, settings):
    url = f"http://{host}:{receiver.port}/hook"
    with pytest.raises(outbound.DestinationRefused, match="private, loopback"):
        outbound.post(url, b"{}", {})
    assert receiver.received == []
    # The same URL with every network allowed reaches the receiver: the spelling is an attack.
    settings.AGENTOPS_OUTBOUND_ALLOWED_NETWORKS = EVERYWHERE
    assert outbound.post(url, b"{}", {}).status == 200
    assert len(receiver.received) == 1


@pytest.mark.parametrize(
    "address",
    [
        "10.0.0.1",
        "172.16.0.1",
        "172.31.255.255",
        "192.168.1.1",
        "100.64.0.1",  # shared address space (carrier-grade NAT)
        "169.254.169.254",  # link-local: the cloud metadata service
        "198.18.0.1",  # benchmarking
        "192.0.2.1",  # documentation
        "224.0.0.1",  # multicast
        "255.255.255.255",
        "::1",
        "::",
        "fe80::1",  # link-local IPv6
        "fd00::1",  # unique-local IPv6
        "fc00::1",
        "ff02::1",  # multicast IPv6
        "::ffff:10.0.0.1",  # IPv4-mapped
        "::ffff:169.254.169.254",
        "::ffff:0:a00:1",  # SIIT-translated 10.0.0.1
        "::a9fe:a9fe",  # IPv4-compatible 169.254.169.254
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
        "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
        "64:ff9b:1::1",  # NAT64 local-use prefix
        "2002:7f00:1::1",  # 6to4 of 127.0.0.1
        "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo
    ],
)
def test_private_link_local_and_translated_addresses_are_refused(address):
    with pytest.raises(outbound.DestinationRefused, match="AGENTOPS_OUTBOUND_ALLOWED_NETWORKS"):
        outbound.check_address(address)


@pytest.mark.parametrize("address", ["93.184.215.14", "2606:4700::1111", "64:ff9b::5db8:d70e"])
def test_public_addresses_pass(address):
    outbound.check_address(address)  # the check can say yes: the refusals above are its own


def test_the_allow_setting_permits_exactly_its_networks(settings, receiver):
    settings.AGENTOPS_OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    outbound.check_address("127.0.0.1")
    outbound.check_address("::ffff:127.0.0.1")  # the mapped form of an allowed address
    for address in ("10.0.0.1", "169.254.169.254", "::1"):
        with pytest.raises(outbound.DestinationRefused):
            outbound.check_address(address)
    assert outbound.post(receiver.url, b"{}", {}).status == 200


def test_a_name_that_resolves_to_a_private_address_is_refused(monkeypatch, receiver):
    private = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", receiver.port))]
    monkeypatch.setattr(outbound.socket, "getaddrinfo", lambda *a, **k: private)
    with pytest.raises(outbound.DestinationRefused, match=r"127\.0\.0\.1"):
        outbound.post(f"http://hooks.example.test:{receiver.port}/hook", b"{}", {})
    assert receiver.received == []


def test_dns_rebinding_the_address_checked_is_the_address_connected_to(monkeypatch, receiver):
    """The name answers a public address to the check and loopback to anyone asking later."""
    answers = iter(["93.184.215.14", "127.0.0.1", "127.0.0.1"])
    asked: list[str] = []
    connected: list[tuple[str, int]] = []

    def rebinding(host: str, port: int, *args: Any, **kwargs: Any) -> list[Any]:
        asked.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), port))]

    def connect(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
        connected.append(address)
        raise ConnectionRefusedError("not leaving this machine in a test")

    monkeypatch.setattr(outbound.socket, "getaddrinfo", rebinding)
    monkeypatch.setattr(outbound.socket, "create_connection", connect)
    with pytest.raises(ConnectionRefusedError):
        outbound.post(f"http://rebind.example.test:{receiver.port}/hook", b"{}", {})
    assert asked == ["rebind.example.test"]  # resolved once: no second answer to follow
    assert connected == [("93.184.215.14", receiver.port)]
    assert receiver.received == []


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("where", ["target", "http://169.254.169.254/latest/meta-data/"])
def test_a_redirect_is_never_followed(settings, status, where):
    # The redirecting server is on loopback, so loopback is allowed: the redirect's target would
    # be reachable if it were followed.
    settings.AGENTOPS_OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    target = Receiver().up()
    location = target.url if where == "target" else where
    redirecting = Receiver(lambda _: Answer(status, b"moved", {"Location": location})).up()
    try:
        reply = outbound.post(redirecting.url, b'{"n": 1}', {"X-Test": "1"})
    finally:
        redirecting.down()
        target.down()
    assert reply.status == status  # recorded as the answer, as any other status
    assert len(redirecting.received) == 1
    assert target.received == []


@pytest.mark.parametrize(
    "url",
    ["file:///etc/passwd", "gopher://127.0.0.1:70/", "ftp://example.com/", "http:///nohost", "//x"],
)
def test_other_schemes_and_hostless_urls_are_refused(url):
    with pytest.raises(outbound.DestinationRefused, match="only http and https"):
        outbound.post(url, b"{}", {})
