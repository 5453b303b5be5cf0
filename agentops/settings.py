"""Settings from the environment, with embedded defaults that need no server.

Embedded default: SQLite file, in-process Celery worker (in-memory transport) and the
in-memory channel layer. Production: set DATABASE_URL (PostgreSQL), CELERY_BROKER_URL and
REDIS_URL (Redis for the broker and the channel layer).
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from django.core.exceptions import ImproperlyConfigured

from agentops.env import env_bool, env_float, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DJANGO_DEBUG", default=False)
SECRET_KEY = env_str("DJANGO_SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG and env_bool("AGENTOPS_PRODUCTION", default=False):
        raise ImproperlyConfigured("DJANGO_SECRET_KEY must be set in production")
    # Embedded and test use only: never used when AGENTOPS_PRODUCTION is on.
    SECRET_KEY = "insecure-embedded-key-set-DJANGO_SECRET_KEY-in-production"
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
    "template_partials",
    "channels",
    # Login lockout after repeated failures (settings under "Security" below).
    "axes",
    "agentops",
]
# The refund desk demo (its payments tables and agent); AGENTOPS_DEMO=0 leaves it out.
AGENTOPS_DEMO = env_bool("AGENTOPS_DEMO", default=True)
if AGENTOPS_DEMO:
    INSTALLED_APPS.append("demo")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
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
            ],
        },
    },
]


def _database_from_url(url: str) -> dict[str, object]:
    parsed = urlparse(url)
    if parsed.scheme not in {"postgres", "postgresql"}:
        raise ImproperlyConfigured(
            f"DATABASE_URL must be postgres://…, got scheme {parsed.scheme!r}"
        )
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parsed.path.lstrip("/")) or "agentops",
        "USER": unquote(parsed.username or ""),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": parsed.hostname or "",
        "PORT": str(parsed.port or ""),
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
        "TEST": {"NAME": env_str("AGENTOPS_TEST_DATABASE", "") or None},
    }


DATABASE_URL = env_str("DATABASE_URL")
if DATABASE_URL:
    DATABASES = {"default": _database_from_url(DATABASE_URL)}
else:
    (BASE_DIR / "var").mkdir(exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": env_str("AGENTOPS_SQLITE_PATH", str(BASE_DIR / "var" / "agentops.sqlite3")),
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
AGENTOPS_LEASE_SECONDS = env_float("AGENTOPS_LEASE_SECONDS", 30.0)
# Renew the lease from a thread during long calls (fenced writes renew it as well).
AGENTOPS_HEARTBEAT = env_bool("AGENTOPS_HEARTBEAT", default=True)
# Largest JSON document (bytes) accepted from a person or a tool.
AGENTOPS_MAX_JSON_BYTES = int(env_float("AGENTOPS_MAX_JSON_BYTES", 256 * 1024))
# The store prepares its statements once per connection; turn off behind a pooler that cannot
# hold prepared statements (PgBouncer in transaction mode before 1.21).
AGENTOPS_PREPARED_STATEMENTS = env_bool("AGENTOPS_PREPARED_STATEMENTS", default=True)
# Callable that pushes a committed event to live subscribers ("" = nobody).
AGENTOPS_PUBLISH = env_str("AGENTOPS_PUBLISH", "agentops.live.publish")

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
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "memory://")
EMBEDDED_BROKER = CELERY_BROKER_URL.startswith("memory://")
# A named queue, so several apps can share one Redis.
CELERY_TASK_DEFAULT_QUEUE = env_str("AGENTOPS_QUEUE", "agentops")
CELERY_TASK_IGNORE_RESULT = True
# At-least-once: a task is acknowledged after it ran, and redelivered if its worker died.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# On a lost broker connection keep running tasks: their redelivery finds the run claimed.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
# Redis: a message taken by a worker that died unacknowledged goes back to the queue after this
# many seconds. Recovery does not wait for it (the sweep re-enqueues expired leases); it only
# bounds how long a redelivery of the lost message takes.
AGENTOPS_BROKER_VISIBILITY_TIMEOUT = env_float("AGENTOPS_BROKER_VISIBILITY_TIMEOUT", 3600.0)
# Redis scans for abandoned messages about four times per visibility timeout (at most every
# 100 s, kombu's default): every `interval` seconds, one tick in `throttle` scans.
_restore_period = max(1, min(100, int(AGENTOPS_BROKER_VISIBILITY_TIMEOUT / 4)))
_restore_interval = min(10, _restore_period)
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, float | int] = (
    # The in-memory transport polls; a tenth of a second keeps the console live.
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
# How often every worker's sweep re-enqueues lost, expired and due runs, in seconds.
AGENTOPS_SWEEP_SECONDS = env_float("AGENTOPS_SWEEP_SECONDS", 5.0)
if AGENTOPS_SWEEP_SECONDS <= 0 or AGENTOPS_LEASE_SECONDS <= 0:
    raise ImproperlyConfigured("AGENTOPS_SWEEP_SECONDS and AGENTOPS_LEASE_SECONDS must be > 0")
# Task threads of the worker embedded in `manage.py serve`.
AGENTOPS_EMBEDDED_CONCURRENCY = int(env_float("AGENTOPS_EMBEDDED_CONCURRENCY", 4))

# --- Live updates: Channels ---------------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL")
CHANNEL_LAYERS = {
    "default": (
        {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [REDIS_URL]}}
        if REDIS_URL
        else {"BACKEND": "channels.layers.InMemoryChannelLayer"}
    )
}

# --- Security: login lockout, sessions, production mode ------------------------------------------
AUTHENTICATION_BACKENDS = [
    # First: a locked-out client is refused before its password is even checked.
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_ENABLED = env_bool("AGENTOPS_LOGIN_LOCKOUT", default=True)
# After this many failed logins of one username from one address, that pair is locked out...
AXES_FAILURE_LIMIT = int(env_float("AGENTOPS_LOGIN_FAILURE_LIMIT", 5))
# ...for this long (the lockout answers 429 with a message; an admin can also reset it).
AXES_COOLOFF_TIME = _dt.timedelta(minutes=env_float("AGENTOPS_LOGIN_COOLOFF_MINUTES", 15))
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
SESSION_COOKIE_AGE = int(env_float("AGENTOPS_SESSION_SECONDS", 8 * 3600))
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
    SECURE_HSTS_SECONDS = int(env_float("AGENTOPS_HSTS_SECONDS", 365 * 24 * 3600))
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
