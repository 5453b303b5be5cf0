"""The per-token rate limit: a clear 429 with Retry-After, counted across processes."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import uuid
from typing import Any

import pytest
from django.core.cache import caches
from django.db import connection

from agentops.api.models import ApiToken, ServiceAccount
from runtime import clock
from runtime.models import Run
from tests.api.conftest import Api, error_of, make_token

# A minute's window starts on the minute: 12:00:15 leaves 45 s of it.
AT = dt.datetime(2026, 1, 5, 12, 0, 15, tzinfo=dt.UTC)
REDIS_URL = os.environ.get("AGENTOPS_BROWSER_REDIS_URL", "redis://127.0.0.1:6379/4")


@pytest.fixture
def limit(settings: Any) -> int:
    settings.AGENTOPS_API_RATE_LIMIT = 3
    caches[settings.AGENTOPS_API_CACHE].clear()
    return 3


def test_it_answers_429_with_retry_after_past_the_limit(
    world: Any, ci: ServiceAccount, limit: int
) -> None:
    client = Api(make_token(ci))
    with clock.frozen(AT) as frozen:
        assert [client.get("/runs").status_code for _ in range(limit)] == [200] * limit
        refused = client.post("/runs", {"agent": "chatty", "message": "hi"})
        assert refused.status_code == 429
        assert error_of(refused) == "rate_limited"
        assert refused["Retry-After"] == "45"
        assert Run.objects.count() == 0
        frozen.advance(44)
        assert client.get("/runs").status_code == 429
        frozen.advance(1)  # a new minute: a new allowance
        assert client.get("/runs").status_code == 200


def test_each_token_has_its_own_allowance(ci: ServiceAccount, limit: int) -> None:
    busy, quiet = Api(make_token(ci)), Api(make_token(ci))
    with clock.frozen(AT):
        for _ in range(limit + 2):
            busy.get("/runs")
        assert busy.get("/runs").status_code == 429
        assert quiet.get("/runs").status_code == 200


def test_unknown_tokens_are_401_not_counted(ci: ServiceAccount, limit: int) -> None:
    with clock.frozen(AT):
        for _ in range(limit + 2):
            assert Api("aot_guess").get("/runs").status_code == 401


def test_a_limit_of_zero_turns_it_off(ci: ServiceAccount, settings: Any) -> None:
    settings.AGENTOPS_API_RATE_LIMIT = 0
    client = Api(make_token(ci))
    assert all(client.get("/runs").status_code == 200 for _ in range(5))


SPEND = """
import django, sys
django.setup()
from agentops.api.auth import check_rate
from agentops.api.models import ApiToken
from runtime import clock
import datetime as dt
with clock.frozen(dt.datetime.fromisoformat(sys.argv[2])):
    for _ in range(int(sys.argv[3])):
        check_rate(ApiToken.objects.get(pk=int(sys.argv[1])))
print("spent")
"""


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("backend", ["database", "redis"])
def test_the_count_is_shared_by_processes(ci: ServiceAccount, settings: Any, backend: str) -> None:
    """Another process spends the allowance; this one then refuses the token."""
    # A minute of its own: counts left in Redis by an earlier run of this test cannot mix in.
    at = AT + dt.timedelta(minutes=uuid.uuid4().int % 10**6)
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "agentops.settings"}
    db = connection.settings_dict
    env["DATABASE_URL"] = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"
    env.pop("REDIS_URL", None)
    # Both processes on the backend under test, whatever this pass's REDIS_URL says.
    if backend == "redis":
        env["REDIS_URL"] = REDIS_URL
        api_cache = {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
        }
    else:
        api_cache = {
            "BACKEND": "django.core.cache.backends.db.DatabaseCache",
            "LOCATION": "agentops_api_cache",
        }
    settings.CACHES = {**settings.CACHES, "api": api_cache}
    settings.AGENTOPS_API_RATE_LIMIT = 5
    secret = make_token(ci)
    token = ApiToken.objects.get()
    done = subprocess.run(
        [sys.executable, "-c", SPEND, str(token.pk), at.isoformat(), "5"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    with clock.frozen(at + dt.timedelta(seconds=10)):
        response = Api(secret).get("/runs")
    assert response.status_code == 429
    assert error_of(response) == "rate_limited"
