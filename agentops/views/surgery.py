"""Run surgery in the console: pause and resume, forks with their preview, bulk jobs by filter.

Views of the console's one shape: fetch and authorize, a form, one runtime call, the affected
fragment (htmx) or a redirect (plain POST); a refusal shows the runtime's message, nothing
changed.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django_htmx.middleware import HtmxDetails

from agentops.forms import BulkFilterForm, BulkStartForm, ForkForm, PauseForm
from agentops.views.common import CONTROL, action, actor, error_status, page, reply
from runtime import bulk, surgery
from runtime.errors import AgentOpsError
from runtime.models import AgentVersion, BulkJob, BulkJobStatus, OperationKind, Run


class HtmxHttpRequest(HttpRequest):
    """A request as django-htmx's middleware hands it over (typed for mypy)."""

    htmx: HtmxDetails


FORK_PREVIEW = "agentops/partials/fork_preview.html"
BULK_PREVIEW = "agentops/partials/bulk_preview.html"
BULK_JOB = "agentops/partials/bulk_job_progress.html"


# --- pause and resume --------------------------------------------------------------------------


def surgery_context(run: Run) -> dict[str, Any]:
    """What the run page's surgery fragment shows: lineage, pause state, what may be done."""
    return {
        "run": run,
        "parent": run.parent,
        "forks": list(run.forks.order_by("created_at").only("pk", "fork_point", "status")),
        "can_pause": surgery.pause_problem(run) is None,
        "can_resume": surgery.resume_problem(run) is None,
        "can_fork": run.status in surgery.FORKABLE_STATUSES and run.operations.exists(),
        "pause_form": PauseForm(),
    }


def _surgery_reply(
    request: HtmxHttpRequest, run: Run, *, status: int, **extra: Any
) -> HttpResponse:
    """The fragment for htmx; a plain POST goes back to the run page with the message."""
    if not request.htmx:
        if "action_error" in extra:
            messages.error(request, extra["action_error"])
        else:
            messages.success(request, extra.get("notice", ""))
        return redirect("console:run", run_id=run.pk)
    run.refresh_from_db()
    response = render(
        request,
        "agentops/partials/run_surgery.html",
        {**surgery_context(run), **extra},
        status=status,
    )
    response["Vary"] = "HX-Request"
    return response


@action(CONTROL)
def pause(request: HtmxHttpRequest, run_id: uuid.UUID) -> HttpResponse:
    run = get_object_or_404(Run, pk=run_id)
    form = PauseForm(request.POST)
    if not form.is_valid():  # a reason Django refuses (a NUL character): refused, nothing paused
        problem = " ".join(str(error) for error in form.errors.get("reason", []))
        return _surgery_reply(request, run, status=400, action_error=f"Not paused: {problem}")
    try:
        paused = surgery.pause(run.pk, actor=actor(request), reason=form.cleaned_data["reason"])
    except AgentOpsError as exc:
        return _surgery_reply(request, run, status=error_status(exc), action_error=exc.message)
    notice = (
        "Paused." if paused.status == "paused" else "It pauses once the call in flight is done."
    )
    return _surgery_reply(request, run, status=200, notice=notice)


@action(CONTROL)
def resume(request: HtmxHttpRequest, run_id: uuid.UUID) -> HttpResponse:
    run = get_object_or_404(Run, pk=run_id)
    try:
        surgery.resume_run(run.pk, actor=actor(request))
    except AgentOpsError as exc:
        return _surgery_reply(request, run, status=error_status(exc), action_error=exc.message)
    return _surgery_reply(request, run, status=200, notice="Resumed.")


# --- fork ---------------------------------------------------------------------------------------


def _recorded_input(run: Run, key: str) -> str:
    """The operation's input as an operator would edit it (JSON), or "" if it has none."""
    op = run.operations.filter(key=key).first()
    if op is None:
        return ""
    if op.kind == OperationKind.TOOL:
        value = op.input.get("arguments", {})
    else:
        try:
            value = surgery.messages_at(run.pk, key)
        except AgentOpsError:
            return ""
    return json.dumps(value, indent=2, ensure_ascii=False)


def _fork_context(run: Run, form: ForkForm, **extra: Any) -> dict[str, Any]:
    # The operation as the form validated it (once; Django keeps the result): the raw value is
    # whatever the client sent. An unbound form has no cleaned data.
    form.is_valid()
    at = getattr(form, "cleaned_data", {}).get("at", "")
    return {
        "run": run,
        "form": form,
        "operations": list(run.operations.order_by("id").only("key", "kind", "name", "status")),
        "versions": list(
            AgentVersion.objects.filter(agent=run.agent, unregistered_at__isnull=True)
            .order_by("-registered_at")
            .values_list("version", flat=True)
        ),
        "recorded_input": _recorded_input(run, at) if at else "",
        **extra,
    }


def _fork_reply(request: HtmxHttpRequest, context: dict[str, Any], *, status: int) -> HttpResponse:
    return reply(
        request,
        page_template="agentops/fork.html",
        fragment=FORK_PREVIEW,
        context=context,
        status=status,
    )


@page
def fork_page(request: HtmxHttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """Choose where to fork; with `at`, the preview of a fork with the input as recorded."""
    run = get_object_or_404(Run.objects.select_related("parent"), pk=run_id)
    form = ForkForm(request.GET or None, keys=[])
    context = _fork_context(run, form)
    if form.is_bound and form.is_valid():
        try:
            context["preview"] = surgery.fork_preview(
                run.pk, form.cleaned_data["at"], version=form.cleaned_data["version"] or None
            )
        except AgentOpsError as exc:
            return _fork_reply(
                request, {**context, "action_error": exc.message}, status=error_status(exc)
            )
    return render(request, "agentops/fork.html", context)


@action(CONTROL)
def fork_start(request: HtmxHttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """Preview with the edited input ("preview"), or start the fork ("start")."""
    run = get_object_or_404(Run, pk=run_id)
    form = ForkForm(request.POST, keys=request.POST.getlist("acknowledge"))
    if not form.is_valid():
        return _fork_reply(request, _fork_context(run, form), status=400)
    data = form.cleaned_data
    version = data["version"] or None
    try:
        preview = surgery.fork_preview(run.pk, data["at"], version=version, input=data["input"])
    except AgentOpsError as exc:
        context = _fork_context(run, form, action_error=exc.message)
        return _fork_reply(request, context, status=error_status(exc))
    if "start" not in request.POST:
        return _fork_reply(request, _fork_context(run, form, preview=preview), status=200)
    try:
        child = surgery.fork(
            run.pk,
            data["at"],
            actor=actor(request),
            version=version,
            input=data["input"],
            acknowledge=data["acknowledge"],
        )
    except AgentOpsError as exc:
        context = _fork_context(run, form, preview=preview, action_error=exc.message)
        return _fork_reply(request, context, status=error_status(exc))
    messages.success(request, f"Forked from {data['at']}.")
    target = reverse("console:run", args=[child.pk])
    if request.htmx:
        response = HttpResponse(status=204)
        response["HX-Redirect"] = target
        return response
    return redirect(target)


# --- bulk jobs ----------------------------------------------------------------------------------


@page
def bulk_page(request: HtmxHttpRequest) -> HttpResponse:
    """The filter, and with it the preview: per action, the runs it touches and why not."""
    form = BulkFilterForm(request.GET or None)
    context: dict[str, Any] = {"form": form, "key": uuid.uuid4().hex}
    status = 200
    if form.is_bound:
        if form.is_valid():
            filters = form.filters()
            try:
                context["preview"] = bulk.preview(filters)
                context["filters"] = filters
            except AgentOpsError as exc:
                context["action_error"] = exc.message
                status = error_status(exc)
        else:
            status = 400
    return reply(
        request,
        page_template="agentops/bulk.html",
        fragment=BULK_PREVIEW,
        context=context,
        status=status,
    )


@action(CONTROL)
def bulk_start(request: HtmxHttpRequest) -> HttpResponse:
    form = BulkStartForm(request.POST)
    if not form.is_valid():
        context = {"form": form, "key": uuid.uuid4().hex, "start_errors": form.errors}
        return render(request, "agentops/bulk.html", context, status=400)
    data = form.cleaned_data
    try:
        job = bulk.submit(
            data["action"],
            form.filters(),
            actor=actor(request),
            key=f"console:{actor(request)}:{data['key']}",
            reason=data["reason"],
        )
    except AgentOpsError as exc:
        context = {"form": form, "key": uuid.uuid4().hex, "action_error": exc.message}
        return render(request, "agentops/bulk.html", context, status=error_status(exc))
    return redirect("console:bulk_job", job_id=job.pk)


def _job_reply(
    request: HtmxHttpRequest, job: BulkJob, *, status: int, **extra: Any
) -> HttpResponse:
    job.refresh_from_db()
    context = {"job": job, "running": job.status == BulkJobStatus.RUNNING, **extra}
    return reply(
        request,
        page_template="agentops/bulk_job.html",
        fragment=BULK_JOB,
        context=context,
        status=status,
    )


@page
def bulk_job(request: HtmxHttpRequest, job_id: uuid.UUID) -> HttpResponse:
    """A job's progress; the fragment polls itself while the job runs."""
    return _job_reply(request, get_object_or_404(BulkJob, pk=job_id), status=200)


@action(CONTROL)
def bulk_stop(request: HtmxHttpRequest, job_id: uuid.UUID) -> HttpResponse:
    job = get_object_or_404(BulkJob, pk=job_id)
    try:
        bulk.stop(job.pk, actor=actor(request))
    except AgentOpsError as exc:
        return _job_reply(request, job, status=error_status(exc), action_error=exc.message)
    if not request.htmx:
        messages.success(request, "Stopped.")
        return redirect("console:bulk_job", job_id=job.pk)
    return _job_reply(request, job, status=200, notice="Stopped.")
