"""The runs list (filters, search, keyset pages) and the run page."""

from __future__ import annotations

import uuid

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from agentops import selectors
from agentops.forms import RunFilterForm
from agentops.views.common import live, live_view, page, reply
from agentops.views.fragments import RUNS_TABLE
from agentops.views.surgery import surgery_context
from runtime.models import Run


@page
def runs(request: HttpRequest) -> HttpResponse:
    form = RunFilterForm(request.GET)
    filters = form.filters()
    rows = selectors.runs_page(
        filters, before=request.GET.get("before", ""), after=request.GET.get("after", "")
    )
    context = {"form": form, "page": rows, **selectors.filter_choices()}
    return reply(
        request,
        page_template="agentops/runs.html",
        fragment=RUNS_TABLE,
        context=context,
        status=400 if form.errors else 200,
    )


@live_view
def run(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    found = get_object_or_404(Run.objects.select_related("session"), pk=run_id)
    every_event = request.GET.get("events") == "all"
    context = live(request, f"/ws/runs/{found.pk}/" + ("?events=all" if every_event else ""))
    context.update(selectors.run_detail(found, every_event=every_event))
    context.update(surgery_context(found))
    return render(request, "agentops/run.html", context)
