"""Approve or reject a tool call, or answer an agent's question."""

from __future__ import annotations

import uuid

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.debug import sensitive_post_parameters, sensitive_variables

from agentops import decisions, selectors
from agentops import work as queue
from agentops.forms import AnswerForm, ApprovalForm
from agentops.views.common import (
    RESPOND,
    HtmxRequest,
    action,
    actor,
    error_status,
    live_view,
    reauth_fresh,
    reply,
)
from agentops.views.fragments import INTERACTION
from agentops.views.work import context, fetch, reauthenticate
from runtime import control, policy
from runtime.errors import AgentOpsError
from runtime.models import Interaction, InteractionKind, InteractionStatus


def _form_class(interaction: Interaction) -> type[ApprovalForm] | type[AnswerForm]:
    return ApprovalForm if interaction.kind == InteractionKind.TOOL_APPROVAL else AnswerForm


@live_view
def interaction(request: HttpRequest, interaction_id: uuid.UUID) -> HttpResponse:
    found = fetch(interaction_id)
    return render(request, "agentops/interaction.html", context(request, found))


def _done(found: Interaction, user: str) -> str:
    response = found.response or {}
    if found.status == InteractionStatus.PENDING:
        return "Your approval is counted: the rule needs more approvers before the call runs."
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


# The password typed for a high-risk approval stays out of error reports.
@sensitive_post_parameters("password")
@action(RESPOND)
@sensitive_variables("password")
def respond(request: HtmxRequest, interaction_id: uuid.UUID) -> HttpResponse:
    found = fetch(interaction_id)
    form = _form_class(found)(request.POST)
    if isinstance(form, ApprovalForm):
        tool = decisions.code_tool(found.run, found.tool_name)
        to_run = policy.current_arguments(found, queue.item_of(found))
        if decisions.is_high_risk(tool, to_run):
            form.require_confirmation()
    status, notice = 400, ""
    password = request.POST.get("password", "")
    if password and not reauthenticate(request, password):
        form.add_error(None, "The password is not right: the approval was not recorded.")
    if form.is_valid():
        try:
            found = control.respond(
                found.pk,
                form.response(),
                actor=actor(request),
                reauthenticated=reauth_fresh(request),
            )
        except AgentOpsError as exc:
            form.add_error(None, exc.message)
            status = error_status(exc)
            found.refresh_from_db()  # refused: show the state that refused it
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
    return reply(
        request,
        page_template="agentops/interaction.html",
        fragment=INTERACTION,
        context=context(request, found, form=form, notice=notice),
        status=status,
    )
