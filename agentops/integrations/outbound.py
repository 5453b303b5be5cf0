"""Outbound HTTP for webhooks and Slack: one POST, to a vetted address, no redirects.

A destination is checked on the address it resolves to at send time, and the connection goes to
that very address (the Host header and TLS name stay the URL's): a name that resolves to a
public address when saved and to 127.0.0.1 later (DNS rebinding) is refused, not followed.
Private, loopback, link-local, shared, reserved and multicast addresses are refused unless they
fall in AGENTOPS_OUTBOUND_ALLOWED_NETWORKS. A redirect is an answer like any other: it is
recorded, never followed.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

# Enough of a response to tell what went wrong; the rest is not read.
_READ_LIMIT = 4096


class DestinationRefused(Exception):
    """The URL may not be called: bad scheme, or an address that is not allowed."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: str
    retry_after: float | None


def allowed_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [
        ipaddress.ip_network(n, strict=False) for n in settings.AGENTOPS_OUTBOUND_ALLOWED_NETWORKS
    ]


def check_address(address: str) -> None:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if any(ip in network for network in allowed_networks()):
        return
    if not ip.is_global or ip.is_multicast:
        raise DestinationRefused(
            f"{address} is a private, loopback, link-local or reserved address "
            "(AGENTOPS_OUTBOUND_ALLOWED_NETWORKS can allow it)"
        )


def resolve(host: str, port: int) -> str:
    """The address to connect to, after checking every address the name resolves to."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ConnectionError(f"cannot resolve {host}: {exc}") from None
    addresses = [str(info[4][0]) for info in infos]
    # Every one, not only the first: the resolver may hand out another next time.
    for address in addresses:
        check_address(address)
    return addresses[0]


class _PinnedHTTP(http.client.HTTPConnection):
    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


class _PinnedHTTPS(http.client.HTTPSConnection):
    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self._address = address

    def connect(self) -> None:
        raw = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(raw, server_hostname=self.host)  # type: ignore[attr-defined]


def post(url: str, body: bytes, headers: dict[str, str], *, read_limit: int = _READ_LIMIT) -> Reply:
    """POST `body` to `url`; the first `read_limit` bytes of the answer are read. Raises
    DestinationRefused, or OSError/HTTPException on failure."""
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise DestinationRefused(f"only http and https URLs can be called, not {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    address = resolve(parts.hostname, port)
    timeout = settings.AGENTOPS_OUTBOUND_TIMEOUT_SECONDS
    kind = _PinnedHTTPS if parts.scheme == "https" else _PinnedHTTP
    connection = kind(parts.hostname, port, address, timeout)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    try:
        connection.request(
            "POST", path, body=body, headers={"Content-Type": "application/json", **headers}
        )
        response = connection.getresponse()
        text = response.read(read_limit).decode("utf-8", errors="replace")
        return Reply(response.status, text, _retry_after(response.getheader("Retry-After")))
    finally:
        connection.close()


def _retry_after(value: str | None) -> float | None:
    # The seconds form only; an HTTP date falls back to the backoff schedule.
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None
