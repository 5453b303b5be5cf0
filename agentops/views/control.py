"""Retry (or retry now) and cancel a run; both answer with the run's header."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect

from agentops import selectors
from agentops.forms import CancelForm
from agentops.views.common import CONTROL, HtmxRequest, action, actor, error_status, live, reply
from agentops.views.fragments import RUN_BODY, RUN_HEADER
from runtime import control
from runtime.errors import AgentOpsError
from runtime.models import TERMINAL_STATUSES, Run, RunStatus


def _reply(request: HtmxRequest, run: Run, *, status: int, **extra: Any) -> HttpResponse:
    """The run's header: `run` as the verb returned it, or as read before a refused verb."""
    # The timeline in the view the page shows (htmx says which page that is).
    every_event = "events=all" in request.headers.get("HX-Current-URL", "")
    context = live(request, f"/ws/runs/{run.pk}/" + ("?events=all" if every_event else ""))
    context.update(selectors.run_detail(run, every_event=every_event), **extra)
    return reply(
        request,
        page_template="agentops/run.html",
        fragment=RUN_HEADER,
        oob=RUN_BODY,
        context=context,
        status=status,
    )


@action(CONTROL)
def retry(request: HtmxRequest, run_id: uuid.UUID) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("session"), pk=run_id)
    now = run.status == RunStatus.RETRY_WAIT
    try:
        run = control.retry(run.pk, actor=actor(request))
    except AgentOpsError as exc:
        run.refresh_from_db()  # refused: show the state that refused it
        return _reply(request, run, status=error_status(exc), action_error=exc.message)
    notice = "Retrying now." if now else "Queued for another attempt."
    if not request.htmx:
        messages.success(request, notice)
        return redirect("console:run", run_id=run.pk)
    return _reply(request, run, status=200, notice=notice)


@action(CONTROL)
def cancel(request: HtmxRequest, run_id: uuid.UUID) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("session"), pk=run_id)
    form = CancelForm(request.POST)
    if not form.is_valid():
        # A finished run shows no cancel form, so its errors go where the page shows them.
        shown = run.status not in TERMINAL_STATUSES
        problem = (
            ""
            if shown
            else "Not cancelled: " + " ".join(str(error) for error in form.errors.get("reason", []))
        )
        return _reply(request, run, status=400, cancel_form=form, action_error=problem)
    try:
        run = control.cancel(run.pk, actor=actor(request), reason=form.cleaned_data["reason"])
    except AgentOpsError as exc:
        run.refresh_from_db()  # refused: show the state that refused it
        return _reply(
            request, run, status=error_status(exc), action_error=exc.message, cancel_form=form
        )
    if not request.htmx:
        messages.success(request, "Cancelled.")
        return redirect("console:run", run_id=run.pk)
    return _reply(request, run, status=200, notice="Cancelled.")
