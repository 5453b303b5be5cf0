"""/api/v1/: the HTTP API (django-ninja routes it; the schema is at /api/v1/openapi.json)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import URLPattern, URLResolver

from agentops.api.endpoints import api
from agentops.api.errors import body


def _json_405(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """django-ninja answers a method a path lacks in plain text; give it the API's error body."""

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = view(request, *args, **kwargs)
        if response.status_code != 405:
            return response
        allowed = response.get("Allow", "")
        message = f"{request.method} is not allowed here; use {allowed or 'another method'}"
        answer = JsonResponse(body("method_not_allowed", message), status=405)
        answer["Allow"] = allowed
        return answer

    return wrapped


def _patterns() -> list[URLPattern | URLResolver]:
    patterns, _ninja, _namespace = api.urls
    for pattern in patterns:
        # ninja's urls are plain patterns, each with its view.
        assert isinstance(pattern, URLPattern) and pattern.callback is not None
        pattern.callback = _json_405(pattern.callback)
    return patterns


urlpatterns = _patterns()
app_name = api.urls_namespace
