"""Refuse NUL characters in URLs at the door.

No URL of ours has one, and PostgreSQL refuses NUL in text: a NUL in a path or a query
parameter would otherwise reach a query as a server error. Form bodies are checked by the
forms themselves (Django's CharField refuses NUL).
"""

from __future__ import annotations

from collections.abc import Callable

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
