"""Login lockout after repeated failures (django-axes), and sessions that expire."""

from __future__ import annotations

import datetime as dt

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.sessions.models import Session
from django.test import Client
from django.utils import timezone

PASSWORD = "correct horse battery staple"


@pytest.fixture(autouse=True)
def _quick_hashes(settings):
    # Dozens of logins: a fast hasher keeps them quick (what is tested is the lockout).
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def alice(users):
    user = users["operator"]
    user.set_password(PASSWORD)
    user.save()
    return user


def attempt(client: Client, password: str, path: str = "/accounts/login/") -> int:
    return client.post(path, {"username": "operator", "password": password}).status_code


def logged_in(client: Client) -> bool:
    return client.get("/").status_code == 200


@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/"])
def test_it_locks_a_username_out_after_repeated_failures(alice, path):
    client = Client(REMOTE_ADDR="203.0.113.7")
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert attempt(client, "wrong", path) == 200  # the form again, with its error
    # The limit is reached: locked out, even with the right password now.
    assert attempt(client, "wrong", path) == 429
    response = client.post(path, {"username": "operator", "password": PASSWORD})
    assert response.status_code == 429
    assert "too many login attempts" in response.content.decode().lower()
    assert not logged_in(client)


def test_the_lockout_is_for_that_username_from_that_address(alice):
    attacker = Client(REMOTE_ADDR="203.0.113.7")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        attempt(attacker, "wrong")
    assert attempt(attacker, PASSWORD) == 429
    colleague = Client(REMOTE_ADDR="198.51.100.2")  # the real operator, at their desk
    assert attempt(colleague, PASSWORD) == 302
    assert logged_in(colleague)


def test_the_lockout_ends_after_the_cooloff(alice):
    client = Client(REMOTE_ADDR="203.0.113.7")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        attempt(client, "wrong")
    assert attempt(client, PASSWORD) == 429
    # The cool-off passes (the attempts are that old now).
    past = timezone.now() - settings.AXES_COOLOFF_TIME - dt.timedelta(seconds=1)
    AccessAttempt.objects.update(attempt_time=past)
    assert attempt(client, PASSWORD) == 302
    assert logged_in(client)


def test_an_overlong_username_is_refused_and_counted(alice):
    """Longer than any username and than axes' column (a 500 on PostgreSQL before the fix)."""
    client = Client(REMOTE_ADDR="203.0.113.7")
    long_name = "o" * 300
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        response = client.post("/accounts/login/", {"username": long_name, "password": "x"})
        assert response.status_code == 200
    response = client.post("/accounts/login/", {"username": long_name, "password": "x"})
    assert response.status_code == 429
    assert AccessAttempt.objects.get().username == long_name[:150]


def test_a_success_resets_the_failure_count(alice):
    client = Client(REMOTE_ADDR="203.0.113.7")
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        attempt(client, "wrong")
    assert attempt(client, PASSWORD) == 302
    client.post("/accounts/logout/")
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert attempt(client, "wrong") == 200  # counted from zero again


def test_a_session_expires_after_its_age(alice, world):
    failed = world.run("failed")
    client = Client()
    assert attempt(client, PASSWORD) == 302
    session = Session.objects.get()
    lifetime = session.expire_date - timezone.now()
    assert dt.timedelta(seconds=settings.SESSION_COOKIE_AGE - 60) < lifetime
    assert lifetime <= dt.timedelta(seconds=settings.SESSION_COOKIE_AGE)
    assert logged_in(client)
    # The shift is over: the session's time has run out.
    Session.objects.update(expire_date=timezone.now() - dt.timedelta(seconds=1))
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
    retry = client.post(f"/runs/{failed.pk}/retry/")
    assert retry.status_code == 302  # to the login page; the run is not retried
    assert retry["Location"].startswith("/accounts/login/")
    failed.refresh_from_db()
    assert failed.status == "failed"


def test_the_session_cookie_is_http_only_and_bounded(alice):
    client = Client()
    attempt(client, PASSWORD)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME]
    assert cookie["httponly"] is True
    assert int(cookie["max-age"]) == settings.SESSION_COOKIE_AGE
    assert cookie["samesite"] == "Lax"
