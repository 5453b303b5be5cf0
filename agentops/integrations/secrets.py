"""Secrets the integrations must be able to use again (webhook signing keys, Slack URLs).

An HMAC signer needs the secret itself, so it cannot be stored as a hash the way a password is.
It is stored encrypted (Fernet: AES-128-CBC with an HMAC-SHA256 tag) under a key derived from
AGENTOPS_INTEGRATIONS_KEY (DJANGO_SECRET_KEY when unset): a copy of the database alone does not
reveal it, and the admin shows it only once, when it is made. Rotating the key makes the stored
secrets unreadable (the sender then reports it and the admin sets a new secret).
"""

from __future__ import annotations

import base64
import hashlib
import secrets

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

WEBHOOK_SECRET_PREFIX = "whsec_"


class SecretUnreadable(Exception):
    """The stored secret was encrypted under another key (AGENTOPS_INTEGRATIONS_KEY changed)."""


def _fernet() -> Fernet:
    key = settings.AGENTOPS_INTEGRATIONS_KEY or settings.SECRET_KEY
    # A derived key: the configured value may be any string, Fernet needs 32 url-safe bytes.
    digest = hashlib.sha256(b"agentops.integrations.secrets:" + key.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def seal(plain: str) -> str:
    return _fernet().encrypt(plain.encode()).decode()


def unseal(sealed: str) -> str:
    try:
        return _fernet().decrypt(sealed.encode()).decode()
    except InvalidToken:
        raise SecretUnreadable(
            "the stored secret cannot be decrypted: AGENTOPS_INTEGRATIONS_KEY changed since it "
            "was set; set a new one in the admin"
        ) from None


def new_webhook_secret() -> str:
    """A Standard Webhooks secret: `whsec_` and 32 random bytes in base64."""
    return WEBHOOK_SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def hint(plain: str) -> str:
    """What the admin may show after creation: enough to tell two secrets apart, no more."""
    return f"…{plain[-4:]}" if len(plain) > 12 else "…"
