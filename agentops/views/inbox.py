"""The inbox, the home page: what needs a person now, oldest first."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from agentops import selectors, work
from agentops.views.common import actor, live, live_view


@live_view
def inbox(request: HttpRequest) -> HttpResponse:
    show = request.GET.get("show", "")
    show = show if show in work.FILTERS else ""
    # The live page renders the same filter for the same person.
    context = live(request, f"/ws/inbox/?key={show}" if show else "/ws/inbox/")
    context.update(selectors.inbox(actor(request), show))
    return render(request, "agentops/inbox.html", context)
