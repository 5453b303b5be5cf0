"""Settings from the environment, with embedded defaults that need no server.

Embedded default: SQLite file, in-process Celery worker (in-memory transport) and the
in-memory channel layer. Production: set DATABASE_URL (PostgreSQL), CELERY_BROKER_URL and
REDIS_URL (Redis for the broker and the channel layer).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import re
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from django.core.exceptions import ImproperlyConfigured

from agentops.env import env_bool, env_float, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
# The embedded setup's own files: the SQLite database, the secret key, the demo's passwords.
VAR_DIR = Path(env_str("AGENTOPS_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DJANGO_DEBUG", default=False)
# Passwords and secrets posted to a view that fails stay masked, DEBUG or not.
DEFAULT_EXCEPTION_REPORTER_FILTER = "agentops.reporting.AlwaysSafeExceptionReporterFilter"


def _embedded_secret_key(path: Path) -> str:
    """A key generated on first start and kept in var/, readable by its owner only.

    Kept, so that restarting the embedded setup keeps everyone logged in; generated, so that no
    two installations share a key.
    """
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        draft = path.with_name(f"{path.name}.{os.getpid()}")
        draft.touch(mode=0o600)
        draft.write_text(secrets.token_urlsafe(50))
        # A link appears whole, and only once: of two processes starting together, one wins and
        # both read its key.
        with contextlib.suppress(FileExistsError):
            path.hardlink_to(draft)
        draft.unlink()
    return path.read_text().strip()


SECRET_KEY = env_str("DJANGO_SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG and env_bool("AGENTOPS_PRODUCTION", default=False):
        raise ImproperlyConfigured("DJANGO_SECRET_KEY must be set in production")
    # Embedded and test use only: never used when AGENTOPS_PRODUCTION is on.
    SECRET_KEY = _embedded_secret_key(VAR_DIR / "secret-key")
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "channels",
    # Login lockout after repeated failures (settings under "Security" below).
    "axes",
    # The runtime's models (app label "agentops"), then the console on top of them.
    "runtime",
    "agentops",
    # The HTTP API at /api/v1/, its service accounts and tokens (docs/api.md).
    "agentops.api",
    "agentops.integrations",
]
# The refund desk demo (its payments tables and agent); AGENTOPS_DEMO=0 leaves it out.
AGENTOPS_DEMO = env_bool("AGENTOPS_DEMO", default=True)
if AGENTOPS_DEMO:
    INSTALLED_APPS.append("demo")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Before the NUL refusal, so that its answers carry the headers too.
    "agentops.middleware.PrivacyHeadersMiddleware",
    "agentops.middleware.RefuseNulMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "csp.middleware.CSPMiddleware",
    # Last, as django-axes requires: it turns a lockout raised during login into its response.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "agentops.urls"
WSGI_APPLICATION = "agentops.wsgi.application"
ASGI_APPLICATION = "agentops.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "agentops.context.operator",
                "agentops.context.vocabulary",
            ],
        },
    },
]


# The database connections of one process (PostgreSQL only): see _database_from_url.
DB_POOL: dict[str, Any] = {
    "min_size": env_int("AGENTOPS_DB_POOL_MIN_SIZE", 1, at_least=0),
    "max_size": env_int("AGENTOPS_DB_POOL_MAX_SIZE", 10, at_least=0),
    "timeout": env_float("AGENTOPS_DB_POOL_TIMEOUT", 10.0, above=0),
}
if DB_POOL["max_size"] and DB_POOL["min_size"] > DB_POOL["max_size"]:
    raise ImproperlyConfigured("AGENTOPS_DB_POOL_MIN_SIZE must be between 0 and the max size")


def _database_from_url(url: str) -> dict[str, object]:
    """Django's settings for a libpq connection URL, parsed by libpq itself: a socket folder as
    the host (percent-encoded, or `?host=/run/postgresql`), several hosts, and every libpq
    parameter of the query (`sslmode`, `sslrootcert`, `connect_timeout`, `application_name`…),
    which goes to the connection as it is. A parameter libpq does not know is an error here,
    not something dropped: a misspelt `sslmode` would connect without the TLS it asked for."""
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    scheme = urlparse(url).scheme
    if scheme not in {"postgres", "postgresql"}:
        raise ImproperlyConfigured(f"DATABASE_URL must be postgres://…, got scheme {scheme!r}")
    try:
        params = {name: str(value) for name, value in conninfo_to_dict(url).items()}
    except ProgrammingError as exc:
        raise ImproperlyConfigured(
            f"DATABASE_URL is not a PostgreSQL URL libpq accepts: {_without_secret(exc, url)}"
        ) from None
    # An unencoded "@" or "/" in the password ends it early for libpq (where Python's urlparse
    # took the last "@"): the rest would become the host, or the port and the database, and
    # be shown by the connection's error. Refused here, without showing either.
    if "@" in params.get("host", "") or not re.fullmatch(r"(\d*)(,\d*)*", params.get("port", "")):
        raise ImproperlyConfigured(
            "DATABASE_URL does not read as user:password@host:port/database: percent-encode "
            'each "@" and "/" of the password as %40 and %2F'
        )
    named = {
        setting: params.pop(parameter, "")
        for setting, parameter in (
            ("NAME", "dbname"),
            ("USER", "user"),
            ("PASSWORD", "password"),
            ("HOST", "host"),
            ("PORT", "port"),
        )
    }
    return {
        # Django's, its pool's check made to hold up when faults cut many connections at once.
        "ENGINE": "agentops.postgres",
        **named,
        "NAME": named["NAME"] or "agentops",
        # One pool per process (psycopg_pool, through Django): daphne runs each synchronous
        # view on a thread of its own, and a connection per thread grew with the requests
        # until PostgreSQL refused more. The pool bounds the process to max_size connections;
        # a request that finds them all busy waits up to the timeout for one; a Celery worker
        # gives its connections back after each task (agentops/celery.py) and takes them from
        # the pool again for the next. AGENTOPS_DB_POOL_MAX_SIZE=0: a connection per thread.
        "OPTIONS": {**params, **({"pool": DB_POOL} if DB_POOL["max_size"] else {})},
        "CONN_MAX_AGE": 0 if DB_POOL["max_size"] else 60,
        "CONN_HEALTH_CHECKS": True,
        "TEST": {"NAME": env_str("AGENTOPS_TEST_DATABASE", "") or None},
    }


def _without_secret(error: Exception, url: str) -> str:
    """libpq's message, with any quoted part of the URL's user and password masked: it quotes
    the token it could not read, and a malformed password would be shown in full."""
    userinfo = urlparse(url).netloc.rpartition("@")[0]

    def masked(quoted: re.Match[str]) -> str:
        return '"…"' if quoted[1] and quoted[1] in userinfo else quoted[0]

    return re.sub(r'"([^"]*)"', masked, str(error).strip())


DATABASE_URL = env_str("DATABASE_URL")
if DATABASE_URL:
    DATABASES = {"default": _database_from_url(DATABASE_URL)}
else:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": env_str("AGENTOPS_SQLITE_PATH", str(VAR_DIR / "agentops.sqlite3")),
            # WAL lets the console read while a worker writes; IMMEDIATE takes the write lock
            # at BEGIN so two writers queue on busy_timeout instead of failing mid-transaction.
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
                "init_command": (
                    "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;"
                ),
            },
            "TEST": {"NAME": env_str("AGENTOPS_SQLITE_TEST_PATH", "") or None},
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "var" / "static"

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"

# --- AgentOps runtime -------------------------------------------------------------------------
# Modules whose Agent definitions form the code registry.
AGENTOPS_AGENT_MODULES = env_list(
    "AGENTOPS_AGENT_MODULES", ["demo.agents"] if AGENTOPS_DEMO else []
)
# How long a claim holds a run without a heartbeat, in seconds.
AGENTOPS_LEASE_SECONDS = env_float("AGENTOPS_LEASE_SECONDS", 30.0, above=0)
# Renew the lease from a thread during long calls (fenced writes renew it as well).
AGENTOPS_HEARTBEAT = env_bool("AGENTOPS_HEARTBEAT", default=True)
# Largest JSON document (bytes) accepted from a person or a tool.
AGENTOPS_MAX_JSON_BYTES = env_int("AGENTOPS_MAX_JSON_BYTES", 256 * 1024, at_least=1)
# Claims in a row that may end in a crash (a dead worker, an unexpected exception) before the
# run goes to needs_attention as a crash loop.
AGENTOPS_CRASH_LOOP_CLAIMS = env_int("AGENTOPS_CRASH_LOOP_CLAIMS", 3, at_least=1)
# Attempts of one operation re-run after crashes (safe and idempotent tools; model requests of
# agents without a ModelRetry) before the run goes to needs_attention.
AGENTOPS_OPERATION_ATTEMPTS = env_int("AGENTOPS_OPERATION_ATTEMPTS", 3, at_least=1)
# The Anthropic adapter (docs/model-adapter.md): short in-process retries of transient errors
# within one attempt, the longest provider wait slept through in-process (longer ones go to the
# persisted backoff), and the default timeout of one request.
AGENTOPS_MODEL_RETRIES = env_int("AGENTOPS_MODEL_RETRIES", 2, at_least=0)
AGENTOPS_MODEL_RETRY_MAX_WAIT = env_float("AGENTOPS_MODEL_RETRY_MAX_WAIT", 10.0, at_least=0)
AGENTOPS_MODEL_TIMEOUT = env_float("AGENTOPS_MODEL_TIMEOUT", 600.0, above=0)
# The store prepares its statements once per connection; turn off behind a pooler that cannot
# hold prepared statements (PgBouncer in transaction mode before 1.21).
AGENTOPS_PREPARED_STATEMENTS = env_bool("AGENTOPS_PREPARED_STATEMENTS", default=True)
# The work queue: a claim ("alice is on it") lapses after this many seconds.
AGENTOPS_CLAIM_SECONDS = env_float("AGENTOPS_CLAIM_SECONDS", 15 * 60.0, above=0)
# An approval under a rule with an expiry warns (approval_expiring) this long before it expires.
AGENTOPS_APPROVAL_EXPIRING_SECONDS = env_float(
    "AGENTOPS_APPROVAL_EXPIRING_SECONDS", 15 * 60.0, above=0
)
# A high-risk approval in the console needs a password entered this recently.
AGENTOPS_REAUTH_SECONDS = env_float("AGENTOPS_REAUTH_SECONDS", 5 * 60.0, above=0)
# Callable that pushes a committed event to live subscribers ("" = nobody).
AGENTOPS_PUBLISH = env_str("AGENTOPS_PUBLISH", "agentops.live.publish")
# An open console socket checks its login again before a frame, at most this often (0: every
# frame); one whose login ended is closed.
AGENTOPS_LIVE_LOGIN_CHECK_SECONDS = env_float("AGENTOPS_LIVE_LOGIN_CHECK_SECONDS", 60.0, at_least=0)


def _redis_url(name: str) -> str:
    """The Redis URL in `name` ("" when unset), read at start as redis-py will read it: a
    scheme it does not know, a port or a database that is not a number, which redis-py would
    refuse at the first websocket or silently read as database 0, stops the process here. The
    URL is not shown: it may hold a password."""
    url = env_str(name)
    if not url:
        return ""
    from redis.connection import parse_url

    parsed = urlparse(url)
    database = parsed.path.strip("/") if parsed.scheme in {"redis", "rediss"} else ""
    try:
        parse_url(url)
        readable = database == "" or database.isdigit()
    except ValueError:
        readable = False
    if not readable:
        raise ImproperlyConfigured(
            f"{name} must read as redis://[:password@]host:port/database (rediss:// for TLS, "
            "unix://path?db=N for a socket), the port and the database numbers"
        )
    return url


# Redis for the live updates' channel layer and the API's shared cache ("": neither; the
# embedded setup's in-memory layer and a database table instead).
REDIS_URL = _redis_url("REDIS_URL")

# --- HTTP API (docs/api.md) ---------------------------------------------------------------------
# Requests per minute per token (0: no limit); counted in the cache below, shared by processes.
AGENTOPS_API_RATE_LIMIT = env_int("AGENTOPS_API_RATE_LIMIT", 120, at_least=0)
AGENTOPS_API_CACHE = "api"
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    # Redis where there is one; else a table in the database (made by the api app's migration).
    AGENTOPS_API_CACHE: (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
        if REDIS_URL
        else {
            "BACKEND": "django.core.cache.backends.db.DatabaseCache",
            "LOCATION": "agentops_api_cache",
        }
    ),
}

# --- Content-Security-Policy (django-csp 4) ------------------------------------------------------
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "frame-ancestors": ["'none'"],
        "form-action": ["'self'"],
    }
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("AGENTOPS_LOG_LEVEL", "WARNING")},
}

# --- Execution: Celery (owned by agentops/celery.py and agentops/tasks.py) ----------------------
# Embedded default: kombu's in-memory transport, consumed by the worker that `manage.py serve`
# runs inside the web process. Production: Redis, consumed by `celery -A agentops worker`s.
# The in-memory transport ignores the host, but kombu warns about a URL without one.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "memory://localhost/")
EMBEDDED_BROKER = CELERY_BROKER_URL.startswith("memory://")
# A named queue, so several apps can share one Redis.
CELERY_TASK_DEFAULT_QUEUE = env_str("AGENTOPS_QUEUE", "agentops")
CELERY_TASK_IGNORE_RESULT = True
# At-least-once: a task is acknowledged after it ran, and redelivered if its worker died.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Celery's Django fixup closes the database connections before and after every task unless
# this is set, and then every this many tasks. Each run's claim paid a new PostgreSQL
# connection and a new backend's slow first statements (20 ms p50 in bench.live, see
# docs/performance.md, section 4). A worker's connections live as a web process's do instead
# (CONN_MAX_AGE, CONN_HEALTH_CHECKS): the obsolete and the broken are closed around each task
# (agentops/celery.py).
CELERY_DB_REUSE_MAX = 2**31
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# On a lost broker connection keep running tasks: their redelivery finds the run claimed.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
# Redis: a message taken by a worker that died unacknowledged goes back to the queue after this
# many seconds. Recovery does not wait for it (the sweep re-enqueues expired leases); it only
# bounds how long a redelivery of the lost message takes.
AGENTOPS_BROKER_VISIBILITY_TIMEOUT = env_float(
    "AGENTOPS_BROKER_VISIBILITY_TIMEOUT", 3600.0, above=0
)
# Redis scans for abandoned messages about four times per visibility timeout (at most every
# 100 s, kombu's default): every `interval` seconds, one tick in `throttle` scans.
_restore_period = max(1, min(100, int(AGENTOPS_BROKER_VISIBILITY_TIMEOUT / 4)))
_restore_interval = min(10, _restore_period)
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, float | int] = (
    # The in-memory transport's consumer is woken by a message or an acknowledgement; it also
    # looks every tenth of a second.
    {"polling_interval": 0.1}
    if EMBEDDED_BROKER
    else {
        "visibility_timeout": AGENTOPS_BROKER_VISIBILITY_TIMEOUT,
        "unacked_restore_interval": _restore_interval,
        "unacked_restore_throttle": _restore_period // _restore_interval,
    }
)
# Hand committed runs to the workers (tests set "" and advance runs by hand).
AGENTOPS_DISPATCH = env_str("AGENTOPS_DISPATCH", "agentops.tasks.enqueue")
# Hands a submitted bulk job (runs list: act on every run a filter matches) to the workers.
AGENTOPS_BULK_DISPATCH = env_str("AGENTOPS_BULK_DISPATCH", "agentops.tasks.enqueue_bulk_job")
# How often every worker's sweep re-enqueues lost, expired and due runs, in seconds.
AGENTOPS_SWEEP_SECONDS = env_float("AGENTOPS_SWEEP_SECONDS", 5.0, above=0)
# Task threads of the worker embedded in `manage.py serve`.
AGENTOPS_EMBEDDED_CONCURRENCY = env_int("AGENTOPS_EMBEDDED_CONCURRENCY", 4, at_least=1)

# --- Live updates: Channels ---------------------------------------------------------------------
# A websocket's consumer waits for its next message with a blocking pop of 5 s (channels_redis).
# redis-py 8 gives every read a 5 s timeout by default, which cut that wait short: the consumer
# died and its page reconnected after every 5 s of quiet. A read here outlasts the pop.
CHANNEL_LAYER_READ_TIMEOUT = 15.0
# The messages a process may have waiting, unread, before the layer drops the next ones (for
# channels_redis, all of a process's sockets share one such queue). The layers' default, 100, is
# less than one batch of a bulk action's events (200 runs): a process busy for a moment while
# they came lost the rest. A message is an event's id, run and kind.
CHANNEL_CAPACITY = 1000
CHANNEL_LAYERS = {
    "default": (
        {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [{"address": REDIS_URL, "socket_timeout": CHANNEL_LAYER_READ_TIMEOUT}],
                "capacity": CHANNEL_CAPACITY,
            },
        }
        if REDIS_URL
        else {
            "BACKEND": "channels.layers.InMemoryChannelLayer",
            "CONFIG": {"capacity": CHANNEL_CAPACITY},
        }
    )
}

# --- Security: login lockout, sessions, production mode ------------------------------------------
AUTHENTICATION_BACKENDS = [
    # First: a locked-out client is refused before its password is even checked.
    "axes.backends.AxesStandaloneBackend",
    # Permissions in one query per request, for ModelBackend too (it logs nobody in).
    "agentops.backends.PermissionsBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_ENABLED = env_bool("AGENTOPS_LOGIN_LOCKOUT", default=True)
# After this many failed logins of one username from one address, that pair is locked out...
AXES_FAILURE_LIMIT = env_int("AGENTOPS_LOGIN_FAILURE_LIMIT", 5, at_least=1)
# ...for this long (the lockout answers 429 with a message; an admin can also reset it).
AXES_COOLOFF_TIME = _dt.timedelta(minutes=env_float("AGENTOPS_LOGIN_COOLOFF_MINUTES", 15, above=0))
# The pair, not the username alone: nobody can lock a colleague out from another machine.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# The lockout page: styled like the console, and saying for how long.
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"


def _lockout_username(request: Any, credentials: dict[str, Any] | None) -> Any:
    """The username a failed login is recorded under: as typed, cut to the longest username
    there can be. The login form does not enforce that length before authenticating, and axes
    stores the name in a 255-character column that PostgreSQL enforces (a longer name was a 500).
    """
    source = credentials or getattr(request, "POST", None) or {}
    name = source.get("username")
    return name[:150] if isinstance(name, str) else name


AXES_USERNAME_CALLABLE = _lockout_username
# Sessions end this long after login (8 hours: one shift); a websocket needs a live session too.
SESSION_COOKIE_AGE = env_int("AGENTOPS_SESSION_SECONDS", 8 * 3600, at_least=1)
SESSION_COOKIE_HTTPONLY = True

# AGENTOPS_PRODUCTION=1: served over HTTPS only (`manage.py check --deploy` passes).
AGENTOPS_PRODUCTION = env_bool("AGENTOPS_PRODUCTION", default=False)
if AGENTOPS_PRODUCTION:
    if DEBUG:
        raise ImproperlyConfigured("DJANGO_DEBUG must be off when AGENTOPS_PRODUCTION=1")
    SECURE_SSL_REDIRECT = env_bool("AGENTOPS_SSL_REDIRECT", default=True)
    # Behind a TLS-terminating proxy that sets X-Forwarded-Proto (and strips it from clients).
    if env_bool("AGENTOPS_BEHIND_PROXY", default=False):
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = env_int("AGENTOPS_HSTS_SECONDS", 365 * 24 * 3600, at_least=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("AGENTOPS_HSTS_INCLUDE_SUBDOMAINS", default=True)
    SECURE_HSTS_PRELOAD = env_bool("AGENTOPS_HSTS_PRELOAD", default=False)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])
    SILENCED_SYSTEM_CHECKS = (
        # security.W021 (HSTS preload off): entering the browsers' preload list binds every
        # subdomain of the operator's domain to HTTPS for good, and is hard to undo; it is the
        # domain owner's decision, so it is opt-in (AGENTOPS_HSTS_PRELOAD=1), not a default.
        [] if SECURE_HSTS_PRELOAD else ["security.W021"]
    )

# --- Integrations: webhooks, notifications, metrics, traces, cost (docs/integrations.md) ---------
# Key that encrypts stored webhook secrets and Slack URLs (default: derived from SECRET_KEY).
AGENTOPS_INTEGRATIONS_KEY = env_str("AGENTOPS_INTEGRATIONS_KEY")
# Base of the links in notifications (the console's address as people reach it).
AGENTOPS_CONSOLE_URL = env_str("AGENTOPS_CONSOLE_URL", "http://localhost:8000")
# Every worker's outbox sweep: fold metrics, make deliveries and notifications, hand out sends.
AGENTOPS_OUTBOX_SECONDS = env_float("AGENTOPS_OUTBOX_SECONDS", 2.0, above=0)
AGENTOPS_OUTBOX_BATCH = env_int("AGENTOPS_OUTBOX_BATCH", 500, at_least=1)
# A hole in the event ids older than this is a rolled-back insert, not a commit still to come.
AGENTOPS_OUTBOX_GAP_SECONDS = env_float("AGENTOPS_OUTBOX_GAP_SECONDS", 60.0, above=0)
# How long a sender holds a claimed message before another may send it again.
AGENTOPS_OUTBOX_CLAIM_SECONDS = env_float("AGENTOPS_OUTBOX_CLAIM_SECONDS", 60.0, above=0)
# Retries: BACKOFF * 2**(attempt-1) seconds, capped; after MAX_ATTEMPTS a message has failed
# (and a webhook subscription is disabled and flagged). The defaults span about a day.
AGENTOPS_OUTBOX_BACKOFF_SECONDS = env_float("AGENTOPS_OUTBOX_BACKOFF_SECONDS", 5.0, above=0)
AGENTOPS_OUTBOX_BACKOFF_MAX_SECONDS = env_float(
    "AGENTOPS_OUTBOX_BACKOFF_MAX_SECONDS", 3600.0, above=0
)
AGENTOPS_OUTBOX_MAX_ATTEMPTS = env_int("AGENTOPS_OUTBOX_MAX_ATTEMPTS", 30, at_least=1)
AGENTOPS_RESPONSE_EXCERPT_CHARS = env_int("AGENTOPS_RESPONSE_EXCERPT_CHARS", 500, at_least=0)
# Webhook and Slack destinations: private, loopback and link-local addresses are refused unless
# inside one of these networks (CIDR, comma-separated), e.g. "10.0.0.0/8".
AGENTOPS_OUTBOUND_ALLOWED_NETWORKS = env_list("AGENTOPS_OUTBOUND_ALLOWED_NETWORKS", [])
AGENTOPS_OUTBOUND_TIMEOUT_SECONDS = env_float("AGENTOPS_OUTBOUND_TIMEOUT_SECONDS", 10.0, above=0)
# Slack's Web API, for routes with a bot token (chat.postMessage is posted under it).
AGENTOPS_SLACK_API_URL = env_str("AGENTOPS_SLACK_API_URL", "https://slack.com/api")
# /metrics: a bearer token, or the networks (CIDR) a scraper may come from; neither = refused.
AGENTOPS_METRICS_TOKEN = env_str("AGENTOPS_METRICS_TOKEN")
AGENTOPS_METRICS_ALLOWED_NETWORKS = env_list("AGENTOPS_METRICS_ALLOWED_NETWORKS", [])
# Events folded into the counters per scrape (the sweeps fold too).
AGENTOPS_METRICS_FOLD_BATCH = env_int("AGENTOPS_METRICS_FOLD_BATCH", 5000, at_least=1)
# Traces: OTLP over HTTP to this endpoint (e.g. http://collector:4318/v1/traces); empty = off.
AGENTOPS_OTLP_ENDPOINT = env_str("AGENTOPS_OTLP_ENDPOINT")
AGENTOPS_OTEL_SERVICE_NAME = env_str("OTEL_SERVICE_NAME", "agentops")
# Dollars per million tokens, per model id. A model missing here has an unknown cost (never 0).
# From Anthropic's published prices, read 2026-11-30: the pricing page
# (https://platform.claude.com/docs/en/about-claude/pricing, "Model pricing") and each model's
# overview page (https://platform.claude.com/docs/en/models/<model>/overview, "Pricing").
# cache_write is the 5-minute cache write (the cache the Anthropic adapter asks for), and
# cache_write_1h the 1-hour one; cache_read is "cache hits and refreshes". Haiku 5.5 is left
# out: its price depends on the prompt's length, which one rate per token type cannot say.
# AGENTOPS_MODEL_PRICES_JSON replaces the table.
# Each row's rates in the pricing table's column order: input, 5m and 1h cache writes, cache
# hits, output.
AGENTOPS_MODEL_PRICES: dict[str, dict[str, float]] = {
    model: dict(
        zip(("input", "cache_write", "cache_write_1h", "cache_read", "output"), rates, strict=True)
    )
    for models, rates in (
        (("claude-opus-5-5",), (4.0, 5.0, 8.0, 0.2, 20.0)),
        (
            (
                "claude-opus-5",
                "claude-opus-4-8",
                "claude-opus-4-7",
                "claude-opus-4-6",
                "claude-opus-4-5",
            ),
            (5.0, 6.25, 10.0, 0.5, 25.0),
        ),
        (("claude-opus-4-1", "claude-opus-4"), (15.0, 18.75, 30.0, 1.5, 75.0)),
        (("claude-sonnet-5-5", "claude-sonnet-5"), (2.0, 2.5, 4.0, 0.2, 10.0)),
        (
            ("claude-sonnet-4-6", "claude-sonnet-4-5", "claude-sonnet-4"),
            (3.0, 3.75, 6.0, 0.3, 15.0),
        ),
        (("claude-haiku-4-5",), (1.0, 1.25, 2.0, 0.1, 5.0)),
        (("claude-3-5-haiku",), (0.8, 1.0, 1.6, 0.08, 4.0)),
        (("claude-3-haiku",), (0.25, 0.3, 0.5, 0.03, 1.25)),
    )
    for model in models
}
if env_str("AGENTOPS_MODEL_PRICES_JSON"):
    try:
        AGENTOPS_MODEL_PRICES = json.loads(env_str("AGENTOPS_MODEL_PRICES_JSON"))
    except ValueError as exc:
        raise ImproperlyConfigured(f"AGENTOPS_MODEL_PRICES_JSON is not JSON: {exc}") from None
# Email notifications: Django's email settings (SMTP by default).
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, at_least=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", default=False)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "agentops@localhost")
