"""The audit log: every operator action (event not written by the runtime), filterable."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from agentops import selectors
from agentops.forms import AuditFilterForm
from agentops.views.common import page, reply
from agentops.views.fragments import AUDIT_TABLE


def _event_id(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() and len(value) < 19 else None


@page
def audit(request: HttpRequest) -> HttpResponse:
    form = AuditFilterForm(request.GET)
    filters = form.filters()
    events = selectors.audit_page(
        filters,
        before=_event_id(request.GET.get("before")),
        after=_event_id(request.GET.get("after")),
    )
    context = {"form": form, "page": events, "kinds": selectors.OPERATOR_KINDS}
    return reply(
        request,
        page_template="agentops/audit.html",
        fragment=AUDIT_TABLE,
        context=context,
        status=400 if form.errors else 200,
    )
