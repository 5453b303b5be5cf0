"""The /api/v1/ endpoints: authenticate, check scope and permission, one runtime verb or read.

Built with django-ninja: its request and response models are pydantic models (the runtime's
own validation language), and the OpenAPI schema is generated from those same models, so
the documentation cannot drift from what the endpoints accept.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import json
import uuid
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from ninja import Header, NinjaAPI, Query, Status
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError
from pydantic import Field

from agentops.api import schemas
from agentops.api.auth import TokenAuth, allow, token_of
from agentops.api.errors import ApiError, body, runtime_details, runtime_status
from agentops.api.models import IdempotencyKey, Scope
from agentops.selectors import runs_by_fields
from runtime import bulk, control, surgery
from runtime.errors import AgentOpsError
from runtime.models import (
    BulkJob,
    Interaction,
    InteractionKind,
    InteractionStatus,
    Run,
    RunStatus,
)

api = NinjaAPI(
    title="AgentOps API",
    version="1",
    description="Submit, watch and steer durable agent runs. See docs/api.md.",
    urls_namespace="api-v1",
    auth=TokenAuth(),
    # No Swagger page: it loads its scripts from a CDN, which the console's CSP forbids.
    docs_url=None,
)

MAX_PAGE = 200
MAX_IDEMPOTENCY_KEY = 255
# Free text in a query string: no NUL (no stored text can hold one, and PostgreSQL refuses it).
TEXT = r"^[^\x00]*$"


def _errors(*statuses: int) -> dict[int, type[schemas.ErrorOut]]:
    # Every endpoint can answer 401 (token), 403 (scope/permission), 422 and 429 (rate).
    return dict.fromkeys((401, 403, 422, 429, *statuses), schemas.ErrorOut)


def _reply(
    request: HttpRequest,
    status: int,
    code: str,
    message: str,
    *,
    details: list[Any] | None = None,
    headers: dict[str, str] | None = None,
) -> HttpResponse:
    response = api.create_response(request, body(code, message, details), status=status)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


@api.exception_handler(ApiError)
def _api_error(request: HttpRequest, exc: ApiError) -> HttpResponse:
    return _reply(
        request, exc.status, exc.code, exc.message, details=exc.details, headers=exc.headers
    )


@api.exception_handler(AgentOpsError)
def _runtime_error(request: HttpRequest, exc: AgentOpsError) -> HttpResponse:
    return _reply(request, runtime_status(exc), exc.code, exc.message, details=runtime_details(exc))


@api.exception_handler(AuthenticationError)
def _unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return _reply(
        request,
        401,
        "unauthenticated",
        "send an active API token as 'Authorization: Bearer <token>'",
        headers={"WWW-Authenticate": 'Bearer realm="agentops"'},
    )


@api.exception_handler(NinjaValidationError)
def _invalid(request: HttpRequest, exc: NinjaValidationError) -> HttpResponse:
    # loc and msg only: pydantic's "input" would echo arbitrary request data back.
    details = [
        {"loc": [str(part) for part in error.get("loc", ())], "msg": str(error.get("msg", ""))}
        for error in exc.errors
    ]
    problems = "; ".join(f"{'.'.join(d['loc'])}: {d['msg']}" for d in details)
    return _reply(request, 422, "invalid_request", f"invalid request: {problems}", details=details)


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    # django-ninja raises HttpError(400) for a body it cannot parse as JSON.
    return _reply(request, 400, "malformed_body", "the request body is not valid JSON")


@api.exception_handler(Http404)
def _not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return _reply(request, 404, "not_found", "no such resource")


# --- cursors -------------------------------------------------------------------------------------

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _cursor(at: dt.datetime, pk: uuid.UUID) -> str:
    micros = (at - _EPOCH) // dt.timedelta(microseconds=1)
    return base64.urlsafe_b64encode(f"{micros}.{pk.hex}".encode()).decode().rstrip("=")


def _parse_cursor(value: str) -> tuple[dt.datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).decode("ascii")
        micros, _, pk = raw.partition(".")
        return _EPOCH + dt.timedelta(microseconds=int(micros)), uuid.UUID(hex=pk)
    except (ValueError, OverflowError, binascii.Error):
        raise ApiError("invalid_cursor", "the cursor is not one this API returned") from None


def _page(rows: QuerySet[Any], limit: int, *, newest_first: bool) -> tuple[list[Any], str | None]:
    order = ("-created_at", "-pk") if newest_first else ("created_at", "pk")
    found = list(rows.order_by(*order)[: limit + 1])
    more = len(found) > limit
    found = found[:limit]
    last = found[-1] if found else None
    return found, _cursor(last.created_at, last.pk) if more and last else None


def _after(cursor: str | None, *, newest_first: bool) -> Q:
    """Rows after the cursor's row in the list's order (the index on created_at serves it)."""
    if not cursor:
        return Q()
    at, pk = _parse_cursor(cursor)
    if newest_first:
        return Q(created_at__lte=at) & (Q(created_at__lt=at) | Q(pk__lt=pk))
    return Q(created_at__gte=at) & (Q(created_at__gt=at) | Q(pk__gt=pk))


# --- runs ----------------------------------------------------------------------------------------


def _run(run_id: uuid.UUID) -> Run:
    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        raise ApiError("not_found", f"run {run_id} does not exist")
    return run


def _detail(run: Run) -> dict[str, Any]:
    pending = None
    if run.status == RunStatus.WAITING:
        pending = run.interactions.filter(status=InteractionStatus.PENDING).first()
    retry_problem = None
    if run.status in (RunStatus.FAILED, RunStatus.NEEDS_ATTENTION, RunStatus.RETRY_WAIT):
        retry_problem = control.retry_problem(run)
    return {
        **schemas.RunOut.model_validate(run).model_dump(),
        "operations": list(run.operations.order_by("intent_at", "pk")),
        "pending": pending,
        "retry_problem": retry_problem,
    }


class RunFilters(schemas.Schema):
    status: RunStatus | None = None
    agent: str | None = Field(default=None, pattern=TEXT, max_length=100)
    version: str | None = Field(default=None, pattern=TEXT, max_length=50)
    session: uuid.UUID | None = None
    cursor: str | None = Field(default=None, pattern=TEXT, max_length=200)
    limit: int = Field(default=50, ge=1, le=MAX_PAGE)


@api.get("/runs", response={200: schemas.RunPage, **_errors(400)}, tags=["runs"])
def list_runs(request: HttpRequest, filters: Query[RunFilters]) -> dict[str, Any]:
    """Runs, newest first, filtered; follow `next_cursor` for older ones."""
    allow(request, Scope.READ)
    runs = runs_by_fields(
        Run.objects.filter(_after(filters.cursor, newest_first=True)),
        status=filters.status,
        agent=filters.agent,
        version=filters.version,
        session=filters.session,
    )
    items, next_cursor = _page(runs, filters.limit, newest_first=True)
    return {"items": items, "next_cursor": next_cursor}


def _canonical(payload: schemas.SubmitIn) -> str:
    text = json.dumps(payload.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _check_key(key: str) -> str:
    if not key or len(key) > MAX_IDEMPOTENCY_KEY or not (key.isascii() and key.isprintable()):
        raise ApiError(
            "invalid_idempotency_key",
            f"the Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} printable ASCII characters",
        )
    return key


@api.post(
    "/runs",
    response={200: schemas.RunOut, 201: schemas.RunOut, **_errors(400, 404, 409)},
    tags=["runs"],
)
def submit(
    request: HttpRequest,
    payload: schemas.SubmitIn,
    idempotency_key: str | None = Header(
        default=None,
        alias="Idempotency-Key",
        description="Same key and body: the same run (200). Same key, other body: 409.",
    ),
) -> Status[Run]:
    """Start a run (201); with an Idempotency-Key, a repeat returns the first run (200)."""
    actor = allow(request, Scope.SUBMIT)
    account = token_of(request).account

    def start() -> Run:
        return control.submit(
            payload.agent,
            payload.message,
            actor=actor,
            session=payload.session,
            version=payload.version,
        )

    if idempotency_key is None:
        return Status(201, start())
    key, digest = _check_key(idempotency_key), _canonical(payload)
    try:
        # The key's row first: a concurrent request with the same key waits here for this
        # transaction, then fails on the unique constraint and returns this run below.
        with transaction.atomic():
            record = IdempotencyKey.objects.create(account=account, key=key, body_digest=digest)
            record.run = start()
            record.save(update_fields=["run"])
    except IntegrityError:
        record = IdempotencyKey.objects.select_related("run").filter(account=account, key=key).get()
        if record.body_digest != digest:
            raise ApiError(
                "idempotency_conflict",
                f"Idempotency-Key {key!r} was used with another request body",
            ) from None
        assert record.run is not None  # set in the transaction that created the row
        return Status(200, record.run)
    return Status(201, record.run)


@api.get("/runs/{run_id}", response={200: schemas.RunDetailOut, **_errors(404)}, tags=["runs"])
def get_run(request: HttpRequest, run_id: uuid.UUID) -> dict[str, Any]:
    """A run with its operations, the interaction it waits for, and whether it can be retried."""
    allow(request, Scope.READ)
    return _detail(_run(run_id))


@api.post(
    "/runs/{run_id}/resolve",
    response={200: schemas.OperationOut, **_errors(400, 404, 409)},
    tags=["actions"],
)
def resolve(request: HttpRequest, run_id: uuid.UUID, payload: schemas.ResolveIn) -> Any:
    """Supply the verified result of the operation the run is blocked on, with evidence."""
    actor = allow(request, Scope.RESOLVE)
    return control.resolve(
        run_id,
        payload.operation_key,
        payload.result,
        evidence=payload.evidence,
        actor=actor,
        outcome=payload.outcome,
    )


@api.post(
    "/runs/{run_id}/retry", response={200: schemas.RunOut, **_errors(404, 409)}, tags=["actions"]
)
def retry(request: HttpRequest, run_id: uuid.UUID) -> Run:
    """Retry a failed or blocked run, or end a retry wait now."""
    actor = allow(request, Scope.RETRY)
    return control.retry(run_id, actor=actor)


@api.post(
    "/runs/{run_id}/cancel",
    response={200: schemas.RunOut, **_errors(400, 404, 409)},
    tags=["actions"],
)
def cancel(request: HttpRequest, run_id: uuid.UUID, payload: schemas.CancelIn) -> Run:
    """Cancel an unfinished run; its pending interaction is closed."""
    actor = allow(request, Scope.CANCEL)
    return control.cancel(run_id, actor=actor, reason=payload.reason)


@api.post(
    "/runs/{run_id}/pause",
    response={200: schemas.RunOut, **_errors(400, 404, 409)},
    tags=["actions"],
)
def pause(request: HttpRequest, run_id: uuid.UUID, payload: schemas.PauseIn) -> Run:
    """Pause a run at its next durable boundary (a running one finishes its call first)."""
    actor = allow(request, Scope.PAUSE)
    return surgery.pause(run_id, actor=actor, reason=payload.reason)


@api.post(
    "/runs/{run_id}/resume", response={200: schemas.RunOut, **_errors(404, 409)}, tags=["actions"]
)
def resume(request: HttpRequest, run_id: uuid.UUID) -> Run:
    """Return a paused run exactly where it was paused."""
    actor = allow(request, Scope.PAUSE)
    return surgery.resume_run(run_id, actor=actor)


@api.post(
    "/runs/{run_id}/fork/preview",
    response={200: schemas.ForkPreviewOut, **_errors(400, 404, 409)},
    tags=["actions"],
)
def fork_preview(
    request: HttpRequest, run_id: uuid.UUID, payload: schemas.ForkPreviewIn
) -> dict[str, Any]:
    """Which calls a fork from an operation reuses and which it runs again; nothing runs."""
    allow(request, Scope.READ)
    shown = surgery.fork_preview(
        run_id, payload.operation_key, version=payload.version, input=payload.input
    )
    return {**vars(shown), "acknowledgements_needed": shown.acknowledgements_needed}


@api.post(
    "/runs/{run_id}/fork",
    response={201: schemas.RunOut, **_errors(400, 404, 409)},
    tags=["actions"],
)
def fork(request: HttpRequest, run_id: uuid.UUID, payload: schemas.ForkIn) -> Status[Run]:
    """Start a fork: a new run in a new session, as its preview says (201)."""
    actor = allow(request, Scope.FORK)
    child = surgery.fork(
        run_id,
        payload.operation_key,
        actor=actor,
        version=payload.version,
        input=payload.input,
        acknowledge=payload.acknowledge,
    )
    return Status(201, child)


# --- bulk jobs -----------------------------------------------------------------------------------


def _job(job_id: uuid.UUID) -> BulkJob:
    job = BulkJob.objects.filter(pk=job_id).first()
    if job is None:
        raise ApiError("not_found", f"bulk job {job_id} does not exist")
    return job


@api.post("/bulk/preview", response={200: schemas.BulkPreviewOut, **_errors(400)}, tags=["bulk"])
def bulk_preview(request: HttpRequest, payload: schemas.BulkPreviewIn) -> dict[str, Any]:
    """How many matching runs each action would touch, which it cannot and why."""
    allow(request, Scope.READ)
    shown = bulk.preview(payload.filters.model_dump(mode="json"))
    return {
        "matched": shown.matched,
        "actions": {
            action: {
                "touch": each.touch,
                "refused": each.refused,
                "reasons": dict(each.reasons),
                "examples": [list(example) for example in each.examples],
            }
            for action, each in shown.actions.items()
        },
    }


@api.post(
    "/bulk",
    response={200: schemas.BulkJobOut, 201: schemas.BulkJobOut, **_errors(400, 404, 409)},
    tags=["bulk"],
)
def bulk_submit(
    request: HttpRequest,
    payload: schemas.BulkIn,
    idempotency_key: str | None = Header(
        default=None,
        alias="Idempotency-Key",
        description="The same key again returns the first job (200) and starts nothing.",
    ),
) -> Status[BulkJob]:
    """Start a job doing one action to every matching run it can touch (201)."""
    actor = allow(request, Scope.BULK)
    account = token_of(request).account
    # Keys are the account's own: another account's key never returns its job.
    key = f"api:{account.pk}:{_check_key(idempotency_key)}" if idempotency_key else None
    known = key is not None and BulkJob.objects.filter(key=key).exists()
    job = bulk.submit(
        payload.action,
        payload.filters.model_dump(mode="json"),
        actor=actor,
        key=key,
        reason=payload.reason,
    )
    return Status(200 if known else 201, job)


@api.get("/bulk/{job_id}", response={200: schemas.BulkJobOut, **_errors(404)}, tags=["bulk"])
def bulk_job(request: HttpRequest, job_id: uuid.UUID) -> BulkJob:
    """A bulk job and its progress."""
    allow(request, Scope.READ)
    return _job(job_id)


@api.post(
    "/bulk/{job_id}/stop", response={200: schemas.BulkJobOut, **_errors(404, 409)}, tags=["bulk"]
)
def bulk_stop(request: HttpRequest, job_id: uuid.UUID) -> BulkJob:
    """Stop a running job: the batch in progress finishes, no further run is touched."""
    actor = allow(request, Scope.BULK)
    return bulk.stop(_job(job_id).pk, actor=actor)


# --- interactions --------------------------------------------------------------------------------


class InteractionFilters(schemas.Schema):
    kind: InteractionKind | None = None
    cursor: str | None = Field(default=None, pattern=TEXT, max_length=200)
    limit: int = Field(default=50, ge=1, le=MAX_PAGE)


@api.get(
    "/interactions",
    response={200: schemas.InteractionPage, **_errors(400)},
    tags=["interactions"],
)
def list_interactions(request: HttpRequest, filters: Query[InteractionFilters]) -> dict[str, Any]:
    """Pending approvals and questions, oldest first."""
    allow(request, Scope.READ)
    pending = Interaction.objects.filter(
        _after(filters.cursor, newest_first=False), status=InteractionStatus.PENDING
    )
    if filters.kind:
        pending = pending.filter(kind=filters.kind)
    items, next_cursor = _page(pending, filters.limit, newest_first=False)
    return {"items": items, "next_cursor": next_cursor}


@api.post(
    "/interactions/{interaction_id}/respond",
    response={200: schemas.InteractionOut, **_errors(400, 404, 409)},
    tags=["actions"],
)
def respond(
    request: HttpRequest, interaction_id: uuid.UUID, payload: schemas.RespondIn
) -> Interaction:
    """Approve (`approved: true`), reject (`approved: false` with a `reason`), or `answer`.

    The approval policy applies as in the console: a decision a rule forbids (group, four-eyes,
    expiry) is refused with 409 `approval_refused`; approving a call a rule marks high-risk
    needs a token with the `respond_high_risk` scope (else 409 `reauthentication_required`).
    """
    actor = allow(request, Scope.RESPOND)
    return control.respond(
        interaction_id,
        payload.model_dump(exclude_none=True),
        actor=actor,
        reauthenticated=Scope.RESPOND_HIGH_RISK in token_of(request).scopes,
    )
