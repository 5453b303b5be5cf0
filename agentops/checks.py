"""`manage.py check --deploy`: what Django's own deployment checks cannot see of this project."""

from __future__ import annotations

import os
from typing import Any, cast

from django.conf import settings
from django.core.checks import CheckMessage, Warning

# Hosts whose traffic never leaves the machine: loopback, and a socket folder (a path).
LOCAL_HOSTS = frozenset({"", "localhost", "127.0.0.1", "::1"})
# The sslmodes under which libpq refuses to talk to PostgreSQL in clear.
TLS_REQUIRED = frozenset({"require", "verify-ca", "verify-full"})


def database_tls(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """A remote PostgreSQL reached without TLS that libpq requires: libpq's default, `prefer`,
    falls back to clear text, so the passwords and every run's data may cross the network in
    clear, and nothing says so."""
    database = settings.DATABASES["default"]
    if "postgres" not in str(database["ENGINE"]):
        return []
    hosts = str(database.get("HOST") or "").split(",")
    remote = [host for host in hosts if host not in LOCAL_HOSTS and not host.startswith("/")]
    # As libpq reads it: the URL's parameter, else the environment's, else its default.
    options = cast(dict[str, Any], database.get("OPTIONS") or {})
    mode = options.get("sslmode") or os.environ.get("PGSSLMODE") or "prefer"
    if not remote or mode in TLS_REQUIRED:
        return []
    return [
        Warning(
            f"DATABASE_URL reaches PostgreSQL at {', '.join(remote)} with sslmode={mode}: "
            "libpq falls back to clear text when the server offers no TLS.",
            hint="Add ?sslmode=verify-full&sslrootcert=<the server's CA file> to DATABASE_URL "
            "(or sslmode=require where the CA cannot be checked).",
            id="agentops.W001",
        )
    ]
