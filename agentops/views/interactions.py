"""Approve or reject a tool call, or answer an agent's question."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from agentops import decisions, selectors
from agentops.forms import AnswerForm, ApprovalForm
from agentops.views.common import RESPOND, action, actor, error_status, live, page, reply
from agentops.views.fragments import INTERACTION
from runtime import control
from runtime.errors import AgentOpsError
from runtime.models import Interaction, InteractionKind


def _fetch(interaction_id: uuid.UUID) -> Interaction:
    return get_object_or_404(
        Interaction.objects.select_related("run", "run__session"), pk=interaction_id
    )


def _form_class(interaction: Interaction) -> type[ApprovalForm] | type[AnswerForm]:
    return ApprovalForm if interaction.kind == InteractionKind.TOOL_APPROVAL else AnswerForm


def _context(interaction: Interaction, **extra: Any) -> dict[str, Any]:
    context = live(f"/ws/interactions/{interaction.pk}/")
    context.update(selectors.interaction_detail(interaction), **extra)
    return context


@page
def interaction(request: HttpRequest, interaction_id: uuid.UUID) -> HttpResponse:
    found = _fetch(interaction_id)
    return render(request, "agentops/interaction.html", _context(found))


def _done(found: Interaction, user: str) -> str:
    response = found.response or {}
    if found.responded_by != user:
        return f"Already answered by {found.responded_by}, the same way: nothing changed."
    if found.kind == InteractionKind.QUESTION:
        return "Answered: the run continues."
    if response.get("approved"):
        return f"Approved {found.tool_name}: the run continues."
    return f"Rejected {found.tool_name}: the agent will see your reason."


def _next_url(found: Interaction) -> str:
    """Where "approve and open the next" goes: the next pending approval, else the inbox."""
    following = selectors.next_approval(found)
    if following is None:
        return reverse("console:inbox")
    return reverse("console:interaction", args=[following.pk])


@action(RESPOND)
def respond(request: HttpRequest, interaction_id: uuid.UUID) -> HttpResponse:
    found = _fetch(interaction_id)
    form = _form_class(found)(request.POST)
    if isinstance(form, ApprovalForm):
        tool = decisions.code_tool(found.run, found.tool_name)
        if decisions.is_high_risk(tool, (found.payload or {}).get("arguments")):
            form.require_confirmation()
    status, notice = 400, ""
    if form.is_valid():
        try:
            found = control.respond(found.pk, form.response(), actor=actor(request))
        except AgentOpsError as exc:
            form.add_error(None, exc.message)
            status = error_status(exc)
        else:
            status, notice = 200, _done(found, actor(request))
            if request.GET.get("then") == "next":
                messages.success(request, notice)
                if request.htmx:
                    # A whole new page (its own live connection): htmx navigates the browser.
                    response = HttpResponse(status=204)
                    response["HX-Redirect"] = _next_url(found)
                    return response
                return redirect(_next_url(found))
            if not request.htmx:
                messages.success(request, notice)
                return redirect("console:run", run_id=found.run_id)
    found.refresh_from_db()
    return reply(
        request,
        page_template="agentops/interaction.html",
        fragment=INTERACTION,
        context=_context(found, form=form, notice=notice),
        status=status,
    )
