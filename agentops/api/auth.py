"""Bearer-token authentication, the per-token rate limit, and the scope + permission check."""

from __future__ import annotations

import datetime as dt
import math

from django.conf import settings
from django.core.cache import caches
from django.db.models import Q
from django.http import HttpRequest
from ninja.security import HttpBearer

from agentops.api.errors import ApiError
from agentops.api.models import SCOPE_PERMISSIONS, ApiToken, token_digest
from runtime import clock

RATE_WINDOW_SECONDS = 60
# last_used_at is written at most this often per token: a write per request would double the
# database load of a busy client for a figure people read to the minute.
LAST_USED_RESOLUTION = dt.timedelta(seconds=60)


class TokenAuth(HttpBearer):
    """`Authorization: Bearer <token>`: an active token of an active account, within its rate."""

    def authenticate(self, request: HttpRequest, token: str) -> ApiToken | None:
        found = (
            ApiToken.objects.select_related("account__user")
            .filter(digest=token_digest(token), revoked_at__isnull=True)
            .first()
        )
        if found is None or not found.account.user.is_active:
            return None
        check_rate(found)
        _touch(found)
        return found


def _touch(token: ApiToken) -> None:
    now = clock.now()
    stale = Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
    ApiToken.objects.filter(stale, pk=token.pk).update(last_used_at=now)


def check_rate(token: ApiToken) -> None:
    """A fixed window per token per minute, counted in the shared cache.

    The count lives in `AGENTOPS_API_CACHE` (Redis, or the database cache table), so every web
    process draws on the same allowance. `add` then `incr` never loses the window's first
    request to a race; Redis increments atomically, the database cache may miss a few
    increments of simultaneous requests (it reads, then writes).
    """
    limit = int(settings.AGENTOPS_API_RATE_LIMIT)
    if limit <= 0:
        return
    now = clock.now().timestamp()
    window = int(now // RATE_WINDOW_SECONDS)
    cache = caches[settings.AGENTOPS_API_CACHE]
    # By the token's digest, not its row id: ids come back after a database is emptied (a test
    # run, a restore), and the cache, shared with that database's predecessor, must not count
    # another token's requests against this one.
    key = f"agentops-api-rate:{token.digest[:32]}:{window}"
    # Kept past the window's end, so that a slow request still finds its own window's count.
    cache.add(key, 0, timeout=2 * RATE_WINDOW_SECONDS)
    try:
        count = cache.incr(key)
    except ValueError:  # expired between add and incr: this request opens the window again
        cache.add(key, 1, timeout=2 * RATE_WINDOW_SECONDS)
        count = 1
    if count > limit:
        wait = max(1, math.ceil((window + 1) * RATE_WINDOW_SECONDS - now))
        raise ApiError(
            "rate_limited",
            f"more than {limit} requests in a minute for this token; retry in {wait} s",
            headers={"Retry-After": str(wait)},
        )


def token_of(request: HttpRequest) -> ApiToken:
    token = request.auth  # type: ignore[attr-defined]
    assert isinstance(token, ApiToken)
    return token


def allow(request: HttpRequest, scope: str) -> str:
    """Check the token's scope and the account's console permission; return the actor name.

    Both must hold: the scope is what this token may do, the permission is what the account
    (like any operator) is allowed to do — so a token never grants more than its account has.
    """
    token = token_of(request)
    if scope not in token.scopes:
        raise ApiError("scope_missing", f"this token does not have the {scope!r} scope")
    permission = SCOPE_PERMISSIONS[scope]
    if not token.account.user.has_perm(permission):
        raise ApiError(
            "permission_denied",
            f"service account {token.account.name!r} lacks the permission {permission!r}",
        )
    return token.account.actor
