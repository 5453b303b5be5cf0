"""The console's own data: what a person set for themselves. Run data belongs to the runtime."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class OperatorProfile(models.Model):
    """A person's console settings (not run data: the console writes it, not the runtime)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="operator_profile",
    )
    # An IANA time zone ("Europe/Paris"); empty: the browser's own.
    time_zone = models.CharField(max_length=64, blank=True)

    def __str__(self) -> str:
        return f"settings of {self.user_id}"
