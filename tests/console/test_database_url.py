"""DATABASE_URL is read as libpq reads a connection URL: the settings keep every part of it.

A deployment names TLS (`sslmode`, `sslrootcert`), timeouts and a socket folder in the URL;
a part that the settings dropped would connect all the same, without what it asked for.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import OperationalError, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from agentops.settings import DB_POOL, _database_from_url
from tests.console.test_db_pool import settings_of


def test_the_url_names_the_database_its_user_and_server() -> None:
    parsed = _database_from_url("postgres://app:p%40ss%3Aw@db.example:6432/agent%2Dops")

    assert {key: parsed[key] for key in ("NAME", "USER", "PASSWORD", "HOST", "PORT")} == {
        "NAME": "agent-ops",
        "USER": "app",
        "PASSWORD": "p@ss:w",
        "HOST": "db.example",
        "PORT": "6432",
    }
    assert parsed["ENGINE"] == "agentops.postgres"
    assert parsed["OPTIONS"] == {"pool": DB_POOL}
    assert _database_from_url("postgresql://db.example")["NAME"] == "agentops"


def test_every_libpq_parameter_of_the_query_reaches_the_connection() -> None:
    parsed = _database_from_url(
        "postgres://app@db.example/agentops?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem"
        "&connect_timeout=5&application_name=agentops-web&target_session_attrs=read-write"
    )

    assert parsed["OPTIONS"] == {
        "sslmode": "verify-full",
        "sslrootcert": "/etc/ssl/db-ca.pem",
        "connect_timeout": "5",
        "application_name": "agentops-web",
        "target_session_attrs": "read-write",
        "pool": DB_POOL,
    }


@pytest.mark.parametrize(
    "url",
    [
        "postgres://app@%2Fvar%2Frun%2Fpostgresql/agentops",
        "postgresql:///agentops?host=/var/run/postgresql&user=app",
    ],
)
def test_a_socket_folder_is_the_host(url: str) -> None:
    parsed = _database_from_url(url)

    assert (parsed["HOST"], parsed["USER"], parsed["NAME"]) == (
        "/var/run/postgresql",
        "app",
        "agentops",
    )


def test_several_hosts_stay_in_their_order() -> None:
    parsed = _database_from_url("postgres://app@primary:5432,replica:5433/agentops")

    assert (parsed["HOST"], parsed["PORT"]) == ("primary,replica", "5432,5433")


@pytest.mark.parametrize(
    ("url", "error"),
    [
        (
            "postgres://app@db.example/agentops?sslmod=require",
            "DATABASE_URL is not a PostgreSQL URL libpq accepts: "
            'invalid URI query parameter: "sslmod"',
        ),
        (
            "mysql://app@db.example/agentops",
            "DATABASE_URL must be postgres://…, got scheme 'mysql'",
        ),
    ],
)
def test_a_url_libpq_refuses_is_a_clear_error(url: str, error: str) -> None:
    with pytest.raises(ImproperlyConfigured) as refused:
        _database_from_url(url)

    assert str(refused.value) == error


def test_the_error_never_shows_the_password() -> None:
    # libpq quotes the token it could not decode: here, the whole password.
    with pytest.raises(ImproperlyConfigured) as refused:
        _database_from_url("postgres://app:s3cret%zz@db.example/agentops")

    assert str(refused.value) == (
        'DATABASE_URL is not a PostgreSQL URL libpq accepts: invalid percent-encoded token: "…"'
    )
    assert "s3cret" not in str(refused.value)


@pytest.mark.parametrize(
    "url",
    [
        # libpq ends the password at its first "@" (Python's urlparse took the last): the
        # rest, "ss", would be read as part of the host and shown by the connection's error.
        "postgres://app:p@ss@db.example/agentops",
        # And at a "/": the host would be "app", the port "p", the database "ss@db.example/…".
        "postgres://app:p/ss@db.example/agentops",
    ],
)
def test_an_unencoded_at_or_slash_in_the_password_is_refused_without_showing_it(url: str) -> None:
    with pytest.raises(ImproperlyConfigured) as refused:
        _database_from_url(url)

    assert str(refused.value) == (
        "DATABASE_URL does not read as user:password@host:port/database: percent-encode "
        'each "@" and "/" of the password as %40 and %2F'
    )
    assert _database_from_url("postgres://app:p%40s%2Fs@db.example/agentops")["PASSWORD"] == "p@s/s"
    # Characters libpq reads as part of a password need no encoding.
    assert _database_from_url("postgres://app:p:s#s?@db.example/agentops")["PASSWORD"] == "p:s#s?"


def test_a_process_reads_the_url_from_its_environment() -> None:
    read = settings_of(DATABASE_URL="postgres://app@%2Frun%2Fpostgresql/agentops?sslmode=require")
    assert (read["HOST"], read["OPTIONS"]["sslmode"]) == ("/run/postgresql", "require")

    refused = settings_of(DATABASE_URL="postgres://app:s3cret%zz@db.example/agentops")
    assert refused == {
        "error": "django.core.exceptions.ImproperlyConfigured: DATABASE_URL is not a "
        'PostgreSQL URL libpq accepts: invalid percent-encoded token: "…"'
    }


# --- against the server ---------------------------------------------------------------------------


def _connected(url: str) -> BaseDatabaseWrapper:
    """A connection of this process's database backend, made from `url` alone."""
    parsed: dict[str, Any] = _database_from_url(url)
    options = {key: value for key, value in parsed["OPTIONS"].items() if key != "pool"}
    settings_dict = {**connection.settings_dict, **parsed, "OPTIONS": options}
    return type(connections["default"])(settings_dict, alias="from_url")


def _server_url(**query: str) -> str:
    params = connection.get_connection_params()
    host = quote(params.get("host") or "127.0.0.1", safe="")
    port = params.get("port") or 5432
    tail = "&".join(f"{key}={value}" for key, value in query.items())
    return f"postgres://{params['user']}@{host}:{port}/{params['dbname']}?{tail}"


@pytest.mark.postgres
@pytest.mark.django_db
def test_a_url_through_the_servers_socket_connects_over_it() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SHOW unix_socket_directories")
        folders = cursor.fetchone()[0]
    folder = folders.split(",")[0].strip()
    assert folder, "the server listens on no Unix socket"
    params = connection.get_connection_params()
    url = (
        f"postgres://{params['user']}@{quote(folder, safe='')}/{params['dbname']}"
        "?application_name=agentops-over-socket"
    )
    over_socket = _connected(url)
    try:
        with over_socket.cursor() as cursor:
            cursor.execute("SELECT inet_server_addr(), current_setting('application_name')")
            # No server address: the connection is a Unix socket's, not TCP's.
            assert cursor.fetchone() == (None, "agentops-over-socket")
    finally:
        over_socket.close()


@pytest.mark.postgres
@pytest.mark.django_db
def test_the_urls_sslmode_is_what_the_connection_does() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SHOW ssl")
        server_has_tls = cursor.fetchone()[0] == "on"
    over_tls = _connected(_server_url(sslmode="require"))
    try:
        if server_has_tls:
            with over_tls.cursor() as cursor:
                cursor.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
                assert cursor.fetchone() == (True,)
        else:
            # Required and not offered: refused, where a dropped sslmode connected in clear.
            with pytest.raises(OperationalError, match="SSL"):
                over_tls.ensure_connection()
    finally:
        over_tls.close()
