"""The work queue's actions on a decision page: claim, release, assign, edit the arguments;
and the re-authentication a high-risk approval asks for."""

from __future__ import annotations

import time
import uuid
from typing import Any

from django.contrib import messages
from django.contrib.auth import authenticate
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.debug import sensitive_variables

from agentops import selectors
from agentops import work as queue
from agentops.decisions import code_tool
from agentops.views.common import (
    REAUTH_KEY,
    RESPOND,
    action,
    actor,
    error_status,
    live,
    reauth_fresh,
    reply,
)
from agentops.views.fragments import INTERACTION
from runtime import work
from runtime.errors import AgentOpsError
from runtime.models import Interaction, Permission

EDIT = Permission.EDIT_ARGUMENTS


@sensitive_variables("password")
def reauthenticate(request: HttpRequest, password: str) -> bool:
    """Check the signed-in person's password again (failures count toward the lockout)."""
    user = authenticate(request, username=request.user.get_username(), password=password)
    if user is None or user.pk != request.user.pk:
        return False
    request.session[REAUTH_KEY] = time.time()
    return True


def fetch(interaction_id: uuid.UUID) -> Interaction:
    return get_object_or_404(
        Interaction.objects.select_related("run", "run__session", "work", "receipt"),
        pk=interaction_id,
    )


def context(request: HttpRequest, interaction: Interaction, **extra: Any) -> dict[str, Any]:
    page = live(request, f"/ws/interactions/{interaction.pk}/")
    page.update(
        selectors.interaction_detail(interaction, actor(request)),
        reauth_fresh=reauth_fresh(request),
    )
    page.update(extra)
    return page


def _answer(
    request: HttpRequest, interaction: Interaction, call: Any, done: str, **extra: Any
) -> HttpResponse:
    """Run one runtime verb; the decision fragment (htmx) or the page, with its outcome."""
    status, notice, errors = 200, done, []
    try:
        call()
    except AgentOpsError as exc:
        status, notice = error_status(exc), ""
        errors = [exc.message]
    else:
        if not getattr(request, "htmx", False):  # django_htmx's middleware sets it
            messages.success(request, done)
            return redirect("console:interaction", interaction_id=interaction.pk)
    interaction.refresh_from_db()
    page = context(request, interaction, notice=notice, **extra)
    page.setdefault("edit_errors", errors if extra.get("editing") else [])
    if errors and not extra.get("editing"):
        page["queue_errors"] = errors
    return reply(
        request,
        page_template="agentops/interaction.html",
        fragment=INTERACTION,
        context=page,
        status=status,
    )


@action(RESPOND)
def claim(request: HttpRequest, interaction_id: uuid.UUID) -> HttpResponse:
    found = fetch(interaction_id)
    return _answer(
        request, found, lambda: work.claim(found.pk, actor=actor(request)), "You are on it."
    )


@action(RESPOND)
def release(request: HttpRequest, interaction_id: uuid.UUID) -> HttpResponse:
    found = fetch(interaction_id)
    return _answer(
        request, found, lambda: work.release(found.pk, actor=actor(request)), "Released."
    )


@action(RESPOND)
def assign(request: HttpRequest, interaction_id: uuid.UUID) -> HttpResponse:
    found = fetch(interaction_id)
    assignee = request.POST.get("assignee", "").strip()
    return _answer(
        request,
        found,
        lambda: work.assign(found.pk, assignee, actor=actor(request)),
        f"Assigned to {assignee}.",
    )


@action(EDIT)
def edit(request: HttpRequest, interaction_id: uuid.UUID) -> HttpResponse:
    found = fetch(interaction_id)
    item = queue.item_of(found)
    current = (found.payload or {}).get("arguments", {})
    if item is not None and item.arguments is not None:
        current = item.arguments
    fields = queue.edit_fields(code_tool(found.run, found.tool_name), current)
    arguments, problems = queue.parse_edit(fields, request.POST)
    if problems:
        page = context(request, found, edit_errors=problems)
        return reply(
            request,
            page_template="agentops/interaction.html",
            fragment=INTERACTION,
            context=page,
            status=400,
        )
    return _answer(
        request,
        found,
        lambda: work.edit(found.pk, arguments, actor=actor(request)),
        "Edited: approvals now count for the new arguments.",
        editing=True,
    )
