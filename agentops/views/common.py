"""What every console view shares: the decorators, the error statuses and the two replies.

A view's shape: decorator -> fetch and authorize -> form -> one runtime call -> the affected
fragment (htmx) or a redirect (plain POST); on an error, the same page or fragment again with
the runtime's message and a 4xx status, and nothing changed.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

from django.conf import settings
from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_POST, require_safe
from django_htmx.middleware import HtmxDetails

from runtime import store
from runtime.errors import AgentOpsError, InvalidInput, NotFound
from runtime.models import Permission

VIEW = Permission.VIEW
RESPOND = Permission.RESPOND
RESOLVE = Permission.RESOLVE
CONTROL = Permission.CONTROL

NOTICE_EVENT = "agentops:notice"


class HtmxRequest(HttpRequest):
    """A request as django-htmx's middleware leaves it: with its `htmx` details."""

    htmx: HtmxDetails


# The session key of the last password check, in seconds since the epoch.
REAUTH_KEY = "agentops_reauthenticated_at"

V = TypeVar("V", bound=Callable[..., HttpResponse])


def page(view: V) -> V:
    """A page: login, then the permission to see the console (403 without it)."""
    return login_required(require_safe(permission_required(VIEW, raise_exception=True)(view)))  # type: ignore[return-value]


# Where a live page's view finds the cursor that `live_view` read for it.
_LIVE_CURSOR = "agentops_live_cursor"


def live_view(view: V) -> V:
    """A page that stays live over its socket: `page`, with its cursor read before the view
    reads anything it shows (see `live`)."""

    @functools.wraps(view)
    def cursor_first(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        setattr(request, _LIVE_CURSOR, store.committed_through())
        return view(request, *args, **kwargs)

    return page(cast(V, cursor_first))


def action(permission: str) -> Callable[[V], V]:
    """A POST-only action: login, then `permission` (403 without it)."""

    def decorate(view: V) -> V:
        guarded = permission_required(permission, raise_exception=True)(view)
        return login_required(require_POST(guarded))  # type: ignore[return-value]

    return decorate


def error_status(exc: AgentOpsError) -> int:
    """400 for invalid input, 404 for unknown ids, 409 for everything the state refuses."""
    if isinstance(exc, InvalidInput):
        return 400
    if isinstance(exc, NotFound):
        return 404
    return 409


def actor(request: HttpRequest) -> str:
    return request.user.get_username()


def reauth_fresh(request: HttpRequest) -> bool:
    """Whether this session entered the password within AGENTOPS_REAUTH_SECONDS."""
    session = getattr(request, "session", None)
    at = session.get(REAUTH_KEY) if session is not None else None
    return isinstance(at, float) and time.time() - at < float(settings.AGENTOPS_REAUTH_SECONDS)


def live(request: HttpRequest, path: str) -> dict[str, Any]:
    """What a live page needs: its websocket path and its cursor, the event it has seen.

    Its socket asks for what committed after the cursor, so the page must show every event up
    to it: `live_view` reads it before the view reads anything, and an event that commits while
    the page renders is sent again when the socket opens. (Read after the page's data, it passed
    over such an event for good: a run that finished as its page rendered stayed `running`
    there.) An action's answer reads it here: for htmx, a fragment whose page keeps its own
    cursor (console.js); without JavaScript, a whole page that opens no socket."""
    cursor = getattr(request, _LIVE_CURSOR, None)
    if cursor is None and request.method in ("GET", "HEAD"):
        raise ImproperlyConfigured(f"{request.path}: a live page's view is a @live_view")
    return {"live_url": path, "cursor": store.committed_through() if cursor is None else cursor}


def reply(
    request: HttpRequest,
    *,
    page_template: str,
    fragment: str,
    context: dict[str, Any],
    oob: Iterable[str] = (),
    status: int = 200,
) -> HttpResponse:
    """The fragment (and `oob` fragments, swapped out of band) for htmx, else the whole page.

    An action's notice is in the fragment, and also in an event (HX-Trigger-After-Settle) that
    console.js turns into the page's notice area: the live push that follows the action
    re-renders the fragment, and would take a notice inside it away at once. (Not an
    out-of-band swap: when that push lands first, htmx looks the target up from the replaced
    form, outside the document, and finds none.)
    """
    # Every request has its htmx details (django-htmx's middleware sets them).
    if cast(HtmxRequest, request).htmx:
        html = str(render_to_string(fragment, context, request))
        html += "".join(render_to_string(name, {**context, "oob": True}, request) for name in oob)
        response = HttpResponse(html, status=status)
        # ASCII JSON (json.dumps escapes the rest): a header carries no raw non-ASCII text.
        response["HX-Trigger-After-Settle"] = json.dumps({NOTICE_EVENT: context.get("notice", "")})
    else:
        response = render(request, page_template, context, status=status)
    patch_vary_headers(response, ["HX-Request"])
    return response
