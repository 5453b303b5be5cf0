"""The console's own middleware: NUL characters refused at the door, and the privacy headers.

No URL of ours has a NUL, and PostgreSQL refuses NUL in text: a NUL in a path or a query
parameter would otherwise reach a query as a server error. Form bodies are checked by the
forms themselves (Django's CharField refuses NUL).
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from agentops.api.errors import body


class RefuseNulMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        in_query = any(
            "\x00" in key or any("\x00" in value for value in values)
            for key, values in request.GET.lists()
        )
        if "\x00" in request.path or in_query:
            if request.path.startswith("/api/"):
                # The API's clients read its error body, not a page.
                message = "the address contains a NUL character"
                return JsonResponse(body("invalid_request", message), status=422)
            reason = "The address contains a NUL character, which no page of this console has."
            return render(request, "400.html", {"reason": reason}, status=400)
        return self.get_response(request)


# Browser features the console never uses, denied to it and to anything injected into it.
PERMISSIONS_POLICY = ", ".join(
    f"{feature}=()"
    for feature in (
        "accelerometer",
        "autoplay",
        "bluetooth",
        "camera",
        "display-capture",
        "geolocation",
        "gyroscope",
        "hid",
        "magnetometer",
        "microphone",
        "midi",
        "payment",
        "publickey-credentials-get",
        "screen-wake-lock",
        "serial",
        "usb",
        "xr-spatial-tracking",
    )
)


class PrivacyHeadersMiddleware:
    """Permissions-Policy on every response; `Cache-Control: no-store` on every dynamic one.

    Pages, htmx fragments and API answers carry run data (arguments, customers' words), which
    must not stay in a shared proxy's or the browser's cache after the operator signs out. A
    view that chose its own caching keeps it; static files (never run data) keep theirs.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.setdefault("Permissions-Policy", PERMISSIONS_POLICY)
        if not request.path.startswith("/" + settings.STATIC_URL.lstrip("/")):
            response.setdefault("Cache-Control", "no-store")
        return response
