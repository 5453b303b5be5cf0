"""What every console page knows about the person looking at it.

The time zone of a person's profile is copied into their session when they log in and when
they change it, so that a page reads it without a query.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.signals import user_logged_in
from django.dispatch import receiver
from django.http import HttpRequest

from agentops.models import OperatorProfile
from runtime.models import (
    AttentionReason,
    InteractionKind,
    InteractionStatus,
    OperationKind,
    OperationStatus,
    RunStatus,
)

SESSION_KEY = "agentops_time_zone"


def remember_time_zone(request: HttpRequest, time_zone: str) -> None:
    request.session[SESSION_KEY] = time_zone


@receiver(user_logged_in)
def _on_login(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    if request is None or not hasattr(request, "session"):
        return
    found = OperatorProfile.objects.filter(user_id=user.pk).values_list("time_zone", flat=True)
    remember_time_zone(request, found.first() or "")


def operator(request: HttpRequest) -> dict[str, Any]:
    """The operator's time zone ("" for the browser's)."""
    session = getattr(request, "session", None)
    return {"operator_time_zone": session.get(SESSION_KEY, "") if session is not None else ""}


# The runtime's words, so that templates compare with them instead of spelling them again.
VOCABULARY: dict[str, Any] = {
    "RunStatus": RunStatus,
    "AttentionReason": AttentionReason,
    "InteractionStatus": InteractionStatus,
    "InteractionKind": InteractionKind,
    "OperationStatus": OperationStatus,
    "OperationKind": OperationKind,
}


def vocabulary(request: HttpRequest) -> dict[str, Any]:
    """RunStatus, AttentionReason and the rest, for `{% if run.status == RunStatus.FAILED %}`.

    Django's choices are never called by templates, so `RunStatus.FAILED` is the member itself;
    live fragments render with a request too, so they see the same names.
    """
    return VOCABULARY
