"""Reconcile an uncertain operation: confirm what the external system reports, with evidence."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import urlencode

from agentops import selectors
from agentops.forms import ResolveForm
from agentops.views.common import (
    RESOLVE,
    HtmxRequest,
    action,
    actor,
    error_status,
    live,
    live_view,
    reply,
)
from agentops.views.fragments import RECONCILE
from runtime import control
from runtime.errors import AgentOpsError
from runtime.models import Run

NOTICES = {
    control.RESULT: "Reconciled {tool} with your evidence: the run continues.",
    control.NOT_RUN_AGAIN: "Recorded that {tool} did not happen: it runs once more, with the "
    "same operation id.",
    control.NOT_RUN_TELL_MODEL: "Recorded that {tool} did not happen: the model is told so, "
    "with your evidence, and decides.",
}


def _context(request: HttpRequest, run: Run, key: str, **extra: Any) -> dict[str, Any]:
    context = live(request, f"/ws/runs/{run.pk}/reconcile/?{urlencode({'key': key})}")
    context.update(selectors.reconcile_detail(run, key), **extra)
    return context


@live_view
def reconcile(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("session"), pk=run_id)
    key = request.GET.get("key", "") or run.blocked_operation
    return render(request, "agentops/reconcile.html", _context(request, run, key))


@action(RESOLVE)
def resolve(request: HtmxRequest, run_id: uuid.UUID) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("session"), pk=run_id)
    form = ResolveForm(request.POST)
    status, notice = 400, ""
    if form.is_bound and "operation_key" in form.errors:
        form.add_error(None, "The form does not name the operation to reconcile: reload the page.")
    if form.is_valid():
        data = form.cleaned_data
        try:
            op = control.resolve(
                run.pk,
                data["operation_key"],
                data["result"],
                evidence=data["evidence"],
                actor=actor(request),
                outcome=data["outcome"],
            )
        except AgentOpsError as exc:
            form.add_error(None, exc.message)
            status = error_status(exc)
            run.refresh_from_db()  # refused: show the state that refused it
        else:
            run = op.run  # as the verb left it
            status, notice = 200, NOTICES[data["outcome"]].format(tool=op.name)
            if not request.htmx:
                messages.success(request, notice)
                return redirect(reverse("console:run", args=[run.pk]))
    # The blocked operation while there is one (whatever the form named), else the resolved one.
    key = run.blocked_operation or form.cleaned_data.get("operation_key", "")
    return reply(
        request,
        page_template="agentops/reconcile.html",
        fragment=RECONCILE,
        context=_context(request, run, str(key), form=form, notice=notice),
        status=status,
    )
