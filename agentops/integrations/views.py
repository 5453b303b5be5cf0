"""/metrics, for Prometheus: a bearer token or an allowed address, no login session."""

from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from agentops.integrations import metrics


def _allowed(request: HttpRequest) -> bool:
    token = settings.AGENTOPS_METRICS_TOKEN
    if token:
        given = request.headers.get("Authorization", "")
        if hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return True
    networks = settings.AGENTOPS_METRICS_ALLOWED_NETWORKS
    if networks:
        # REMOTE_ADDR: the peer of this process. Behind a proxy that is the proxy, so allow
        # the scraper by token there, or scrape the processes directly.
        try:
            address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
        except ValueError:
            return False
        return any(address in ipaddress.ip_network(n, strict=False) for n in networks)
    return False


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    if not _allowed(request):
        response = HttpResponse(
            "metrics need a bearer token (AGENTOPS_METRICS_TOKEN) or an allowed address "
            "(AGENTOPS_METRICS_ALLOWED_NETWORKS)\n",
            status=401 if settings.AGENTOPS_METRICS_TOKEN else 403,
            content_type="text/plain",
        )
        if settings.AGENTOPS_METRICS_TOKEN:
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(metrics.exposition(), content_type=CONTENT_TYPE_LATEST)
