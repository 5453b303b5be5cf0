"""Service accounts, their API tokens, and the idempotency keys of submitted runs.

A service account is linked to a Django user (`api:<name>`): the groups and permissions an
admin gives that user are the same ones an operator's account holds, so an API response is
allowed exactly when a person with those permissions could give it in the console. A token
narrows that further, verb by verb, with its scopes.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import ClassVar

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

from runtime.models import Permission, Run

TOKEN_PREFIX = "aot_"
# The first characters of a token, kept in clear so that a person can tell tokens apart in the
# admin and in a leaked-credentials report; 8 of 43 random characters give nothing away.
SHOWN_CHARS = len(TOKEN_PREFIX) + 8


class Scope(models.TextChoices):
    READ = "read", "Read runs and interactions"
    SUBMIT = "submit", "Submit runs"
    RESPOND = "respond", "Approve, reject and answer"
    # An approval under a rule that marks the call high-risk also needs this scope: the
    # token's holder stands for a person who signed in again (the console asks the password).
    RESPOND_HIGH_RISK = "respond_high_risk", "Approve calls a rule marks high-risk"
    RESOLVE = "resolve", "Reconcile uncertain operations"
    RETRY = "retry", "Retry runs"
    CANCEL = "cancel", "Cancel runs"
    PAUSE = "pause", "Pause and resume runs"
    FORK = "fork", "Fork runs"
    BULK = "bulk", "Act on every run a filter matches"


# The console's permission each scope also needs on the account's user.
SCOPE_PERMISSIONS: dict[str, str] = {
    Scope.READ: Permission.VIEW,
    # The console starts no runs, so submitting has a permission of its own.
    Scope.SUBMIT: "api.submit_run",
    Scope.RESPOND: Permission.RESPOND,
    Scope.RESPOND_HIGH_RISK: Permission.RESPOND,
    Scope.RESOLVE: Permission.RESOLVE,
    Scope.RETRY: Permission.CONTROL,
    Scope.CANCEL: Permission.CONTROL,
    Scope.PAUSE: Permission.CONTROL,
    Scope.FORK: Permission.CONTROL,
    Scope.BULK: Permission.CONTROL,
}

account_name = RegexValidator(
    r"^[a-z0-9][a-z0-9._-]{0,99}\Z",
    "Lowercase letters, digits, '.', '_', '-'; a letter or digit first",
)


def token_digest(token: str) -> str:
    """The stored form of a token.

    A plain SHA-256, not a slow password hash: a token carries 256 random bits, so there is no
    dictionary to try and nothing for key stretching to protect, while every API request must
    look its token up by this digest, fast.
    """
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


class ServiceAccount(models.Model):
    """A program that uses the API; acts as `api:<name>` in every event it causes."""

    name = models.CharField(max_length=100, unique=True, validators=[account_name])
    description = models.CharField(max_length=200, blank=True)
    # Holds the account's groups and permissions; it has no usable password and cannot log in.
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="service_account"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        permissions: ClassVar = [("submit_run", "Can submit runs through the API")]

    def __str__(self) -> str:
        return self.name

    @property
    def actor(self) -> str:
        """The name the runtime records for this account's actions."""
        return f"api:{self.name}"


class ApiToken(models.Model):
    """A bearer token of a service account; only its digest is stored."""

    account = models.ForeignKey(ServiceAccount, on_delete=models.CASCADE, related_name="tokens")
    label = models.CharField(max_length=100, blank=True)
    digest = models.CharField(max_length=64, unique=True, editable=False)
    shown = models.CharField(max_length=SHOWN_CHARS, editable=False)
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=150, blank=True, editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_by = models.CharField(max_length=150, blank=True, editable=False)

    class Meta:
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.shown}… ({self.account.name})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def issue(self) -> str:
        """Set a new secret on this (unsaved) token and return it: the only time it is seen."""
        token = new_token()
        self.digest = token_digest(token)
        self.shown = token[:SHOWN_CHARS]
        return token


class IdempotencyKey(models.Model):
    """A submit's Idempotency-Key: the same key and body return the same run.

    The unique constraint, not a read before the write, makes concurrent identical requests
    start exactly one run: the second insert waits for the first transaction and then fails.
    """

    account = models.ForeignKey(ServiceAccount, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    # SHA-256 of the request body's canonical JSON.
    body_digest = models.CharField(max_length=64)
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="+", null=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["account", "key"], name="one_run_per_idempotency_key")
        ]

    def __str__(self) -> str:
        return f"{self.account_id}:{self.key}"
