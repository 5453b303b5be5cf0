"""The inbox, the home page: what needs a person now, oldest first."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from agentops import selectors
from agentops.views.common import live, page


@page
def inbox(request: HttpRequest) -> HttpResponse:
    context = live("/ws/inbox/")
    context.update(selectors.inbox())
    return render(request, "agentops/inbox.html", context)
