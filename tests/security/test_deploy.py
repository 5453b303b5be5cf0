"""Production mode (AGENTOPS_PRODUCTION=1): `check --deploy` passes, HTTPS-only cookies, HSTS."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHOWN = [
    "DEBUG",
    "SECURE_SSL_REDIRECT",
    "SECURE_HSTS_SECONDS",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS",
    "SECURE_HSTS_PRELOAD",
    "SESSION_COOKIE_SECURE",
    "SESSION_COOKIE_HTTPONLY",
    "SESSION_COOKIE_AGE",
    "CSRF_COOKIE_SECURE",
    "SECURE_CONTENT_TYPE_NOSNIFF",
    "X_FRAME_OPTIONS",
    "SILENCED_SYSTEM_CHECKS",
    "AXES_ENABLED",
    "AXES_FAILURE_LIMIT",
]


def production(**extra: str) -> dict[str, str]:
    """The environment of a production process (no database or broker needed for checks)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AGENTOPS_", "DJANGO_", "CELERY_")) and key != "DATABASE_URL"
    }
    env.update(
        AGENTOPS_PRODUCTION="1",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(64),
        DJANGO_ALLOWED_HOSTS="agentops.example.com",
        DJANGO_SETTINGS_MODULE="agentops.settings",
    )
    env.update(extra)
    return {key: value for key, value in env.items() if value}


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def settings_of(env: dict[str, str]) -> dict[str, object]:
    code = (
        "import json, django; django.setup(); from django.conf import settings; "
        f"print(json.dumps({{name: getattr(settings, name, None) for name in {SHOWN!r}}}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_check_deploy_passes_with_the_production_settings() -> None:
    done = manage("check", "--deploy", "--fail-level", "WARNING", env=production())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues (1 silenced)" in done.stdout
    # The one silenced check (HSTS preload) comes back when preload is chosen: then it passes.
    preload = manage(
        "check", "--deploy", "--fail-level", "WARNING", env=production(AGENTOPS_HSTS_PRELOAD="1")
    )
    assert preload.returncode == 0, preload.stdout + preload.stderr
    assert "no issues (0 silenced)" in preload.stdout


def test_check_deploy_fails_without_them() -> None:
    """The same check against the development defaults: the test above can fail."""
    env = production()
    del env["AGENTOPS_PRODUCTION"]
    done = manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert done.returncode != 0
    for check in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert check in done.stderr + done.stdout


def test_production_turns_on_https_only_cookies_hsts_and_turns_debug_off() -> None:
    shown = settings_of(production())
    assert shown["DEBUG"] is False
    assert shown["SECURE_SSL_REDIRECT"] is True
    assert shown["SECURE_HSTS_SECONDS"] >= 365 * 24 * 3600
    assert shown["SECURE_HSTS_INCLUDE_SUBDOMAINS"] is True
    assert shown["SESSION_COOKIE_SECURE"] is True
    assert shown["CSRF_COOKIE_SECURE"] is True
    assert shown["SESSION_COOKIE_HTTPONLY"] is True
    assert shown["SECURE_CONTENT_TYPE_NOSNIFF"] is True
    assert shown["X_FRAME_OPTIONS"] == "DENY"
    assert shown["SILENCED_SYSTEM_CHECKS"] == ["security.W021"]
    assert shown["AXES_ENABLED"] is True
    assert 0 < shown["SESSION_COOKIE_AGE"] <= 12 * 3600  # a shift, not weeks


@pytest.mark.parametrize(
    "extra, problem",
    [
        ({"DJANGO_DEBUG": "1"}, "DJANGO_DEBUG must be off"),
        ({"DJANGO_SECRET_KEY": ""}, "DJANGO_SECRET_KEY must be set"),
    ],
)
def test_production_refuses_to_start_with_debug_or_without_a_secret(extra, problem) -> None:
    done = manage("check", env=production(**extra))
    assert done.returncode != 0
    assert problem in done.stderr


def test_production_redirects_to_https_and_sends_hsts(settings, client, db) -> None:
    """What the checked settings do to a request (in this process, as production sets them)."""
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_HSTS_SECONDS = 365 * 24 * 3600
    settings.SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    settings.SESSION_COOKIE_SECURE = True
    settings.CSRF_COOKIE_SECURE = True
    plain = client.get("/accounts/login/")
    assert plain.status_code == 301
    assert plain["Location"].startswith("https://")
    secure = client.get("/accounts/login/", secure=True)
    assert secure.status_code == 200
    assert secure["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains"
    assert secure.cookies["csrftoken"]["secure"] is True


@pytest.mark.parametrize(
    ("url", "extra", "warned"),
    [
        ("postgres://app@db.example/agentops", {}, "sslmode=prefer"),
        ("postgres://app@db.example/agentops?sslmode=disable", {}, "sslmode=disable"),
        ("postgres://app@127.0.0.1,db.example/agentops?sslmode=allow", {}, "sslmode=allow"),
        ("postgres://app@db.example/agentops?sslmode=verify-full", {}, None),
        ("postgres://app@db.example/agentops?sslmode=require", {}, None),
        # libpq reads PGSSLMODE where the URL says nothing.
        ("postgres://app@db.example/agentops", {"PGSSLMODE": "verify-ca"}, None),
        # Traffic that never leaves the machine: loopback and a socket folder.
        ("postgres://app@127.0.0.1:5432/agentops", {}, None),
        ("postgres://app@%2Fvar%2Frun%2Fpostgresql/agentops", {}, None),
    ],
)
def test_check_deploy_warns_of_a_remote_database_reached_without_required_tls(
    url: str, extra: dict[str, str], warned: str | None
) -> None:
    done = manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        env=production(DATABASE_URL=url, **{"PGSSLMODE": "", **extra}),
    )
    output = done.stdout + done.stderr

    if warned is None:
        assert done.returncode == 0, output
        assert "agentops.W001" not in output
    else:
        assert done.returncode != 0
        assert "agentops.W001" in output
        assert f"with {warned}: libpq falls back to clear text" in output
        assert "?sslmode=verify-full&sslrootcert=" in output
