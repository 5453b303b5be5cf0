"""Settings from the environment: a malformed or out-of-range number, or a Redis URL redis-py
cannot read, stops the process at start with the setting's name, instead of failing later or
quietly (agentops/env.py, agentops/settings.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.core.exceptions import ImproperlyConfigured

from agentops.env import env_float, env_int
from tests.console.test_db_pool import settings_of

NAME = "AGENTOPS_TEST_NUMBER"


# A positive number, and a count of at least one: the two kinds of setting.
def positive() -> float:
    return env_float(NAME, 1.0, above=0)


def count() -> float:
    return env_int(NAME, 1, at_least=1)


@pytest.mark.parametrize("raw", [None, ""])
def test_unset_or_empty_is_the_default(monkeypatch: pytest.MonkeyPatch, raw: str | None) -> None:
    if raw is None:
        monkeypatch.delenv(NAME, raising=False)
    else:
        monkeypatch.setenv(NAME, raw)

    assert env_float(NAME, 2.5, above=0) == 2.5
    assert env_int(NAME, 7, at_least=1) == 7


@pytest.mark.parametrize(
    ("read", "raw", "error"),
    [
        (positive, "soon", f"{NAME} must be a number, got 'soon'"),
        (positive, "nan", f"{NAME} must be a finite number, got 'nan'"),
        (positive, "inf", f"{NAME} must be a finite number, got 'inf'"),
        (positive, "-Infinity", f"{NAME} must be a finite number, got '-Infinity'"),
        (positive, "0", f"{NAME} must be more than 0, got '0'"),
        (positive, "-0.5", f"{NAME} must be more than 0, got '-0.5'"),
        (count, "2.5", f"{NAME} must be a whole number, got '2.5'"),
        (count, "two", f"{NAME} must be a whole number, got 'two'"),
        (count, "inf", f"{NAME} must be a whole number, got 'inf'"),
        (count, "nan", f"{NAME} must be a whole number, got 'nan'"),
        (count, "0", f"{NAME} must be at least 1, got '0'"),
        (count, "-3", f"{NAME} must be at least 1, got '-3'"),
    ],
)
def test_a_number_must_be_finite_whole_where_it_counts_and_in_its_range(
    monkeypatch: pytest.MonkeyPatch, read: Callable[[], float], raw: str, error: str
) -> None:
    monkeypatch.setenv(NAME, raw)

    with pytest.raises(ImproperlyConfigured) as refused:
        read()

    assert str(refused.value) == error


def test_the_bounds_themselves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NAME, " 1 ")
    assert env_int(NAME, 5, at_least=1) == 1
    # A count written with no fraction is that count.
    monkeypatch.setenv(NAME, "10.0")
    assert env_int(NAME, 5, at_least=1) == 10
    monkeypatch.setenv(NAME, "1e3")
    assert env_int(NAME, 5, at_least=1) == 1000
    monkeypatch.setenv(NAME, "0")
    assert env_float(NAME, 5.0, at_least=0) == 0.0
    monkeypatch.setenv(NAME, "0.001")
    assert env_float(NAME, 5.0, above=0) == 0.001


@pytest.mark.parametrize(
    ("setting", "raw", "error"),
    [
        # A lease of nan seconds passed the old `<= 0` check and failed at every claim.
        ("AGENTOPS_LEASE_SECONDS", "nan", "must be a finite number, got 'nan'"),
        ("AGENTOPS_SWEEP_SECONDS", "0", "must be more than 0, got '0'"),
        # No task thread: the embedded worker would run nothing, and say nothing.
        ("AGENTOPS_EMBEDDED_CONCURRENCY", "0", "must be at least 1, got '0'"),
        # int(float("2.5")) was 2, silently.
        ("AGENTOPS_DB_POOL_MAX_SIZE", "2.5", "must be a whole number, got '2.5'"),
        ("AGENTOPS_OUTBOX_BACKOFF_SECONDS", "-1", "must be more than 0, got '-1'"),
        ("AGENTOPS_MODEL_RETRIES", "-1", "must be at least 0, got '-1'"),
    ],
)
def test_a_process_refuses_to_start_on_a_bad_setting(setting: str, raw: str, error: str) -> None:
    assert settings_of(**{setting: raw}) == {
        "error": f"django.core.exceptions.ImproperlyConfigured: {setting} {error}"
    }


def test_the_settings_that_mean_off_at_zero_still_take_it() -> None:
    read = settings_of(AGENTOPS_DB_POOL_MAX_SIZE="0", AGENTOPS_DB_POOL_MIN_SIZE="0")

    assert "pool" not in read["OPTIONS"]


REDIS_REFUSED = (
    "django.core.exceptions.ImproperlyConfigured: REDIS_URL must read as "
    "redis://[:password@]host:port/database (rediss:// for TLS, unix://path?db=N for a socket), "
    "the port and the database numbers"
)


@pytest.mark.parametrize(
    "url",
    [
        "http://cache.example:6379/0",
        "redis:/cache.example",
        "redis://:s3cret@cache.example:six/0",
        # redis-py reads a database that is not a number as database 0, silently.
        "redis://:s3cret@cache.example:6379/live",
    ],
)
def test_a_redis_url_redis_py_cannot_read_stops_the_process_without_showing_it(url: str) -> None:
    refused = settings_of(REDIS_URL=url)

    assert refused == {"error": REDIS_REFUSED}


@pytest.mark.parametrize(
    "url",
    [
        "redis://cache.example",
        "redis://cache.example:6379/5",
        "rediss://:p%40ss@cache.example:6380/2",
        "unix:///run/redis/redis.sock?db=1",
    ],
)
def test_the_redis_urls_redis_py_reads_are_taken(url: str) -> None:
    assert "error" not in settings_of(REDIS_URL=url)
