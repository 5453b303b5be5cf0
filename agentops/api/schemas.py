"""What the API accepts and returns: pydantic models, which are also its OpenAPI schema."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from ninja import Schema
from pydantic import AliasChoices, ConfigDict, Field, StrictBool

from runtime.control import RESOLVE_OUTCOMES, RESULT
from runtime.models import InteractionKind, InteractionStatus, OperationStatus, RunStatus


class ErrorDetail(Schema):
    code: str = Field(description="Stable code: branch on it (see docs/api.md).")
    message: str = Field(description="For people; may change between versions.")
    details: list[Any] = Field(default_factory=list)


class ErrorOut(Schema):
    error: ErrorDetail


class Strict(Schema):
    # An unknown field is refused rather than ignored: a misspelt "reason" must not vanish.
    model_config = ConfigDict(extra="forbid")


class SubmitIn(Strict):
    agent: str = Field(description="The agent's name.")
    message: str = Field(description="The message that starts the run.")
    session: uuid.UUID | None = Field(
        default=None, description="Continue this session; a new one when omitted."
    )
    version: str | None = Field(
        default=None, description="The agent version; the newest registered when omitted."
    )


class RespondIn(Strict):
    """An approval: `approved` (and `reason` when rejecting). A question: `answer`."""

    # Strict: "yes", 1 or "false" must not be read as a decision.
    approved: StrictBool | None = None
    reason: str | None = None
    answer: str | None = None


class ResolveIn(Strict):
    operation_key: str = Field(description="The operation the run is blocked on.")
    outcome: str = Field(
        RESULT,
        json_schema_extra={"enum": list(RESOLVE_OUTCOMES)},
        description="What the check found: `result` (the call happened; `result` is its "
        "verified result), `not_run_again` (it did not happen; run it once more with the same "
        "operation id) or `not_run_tell_model` (it did not happen; the model is told so).",
    )
    result: Any = Field(
        None, description="With `result`: the verified result, valid against the output schema."
    )
    evidence: str = Field(description="What was checked, e.g. the receipt id in the other system.")


class CancelIn(Strict):
    reason: str = ""


class PauseIn(Strict):
    reason: str = ""


class ForkPreviewIn(Strict):
    operation_key: str = Field(description="The operation to fork at (e.g. step-2/tool/toolu_1).")
    version: str | None = Field(
        default=None, description="Another registered version to continue on."
    )
    input: Any = Field(
        default=None,
        description="The operation's edited input: a model request's messages (a list of "
        "{role, content}) or a tool call's arguments (checked against its input schema).",
    )


class ForkIn(ForkPreviewIn):
    acknowledge: list[str] = Field(
        default_factory=list,
        description="The keys of the manual calls the fork runs again, each acknowledged.",
    )


class PreviewCallOut(Schema):
    key: str
    kind: str
    name: str
    plan: str = Field(description="reused, rerun (made by the parent) or new.")
    policy: str
    safe: bool
    note: str
    needs_acknowledgement: bool
    needs_person: bool


class ForkPreviewOut(Schema):
    parent: str
    at: str
    version: str
    edited: bool
    reused: list[PreviewCallOut]
    calls: list[PreviewCallOut] = Field(
        description="The calls the fork makes, in order, up to its next model request."
    )
    then: str
    unsafe: list[str]
    acknowledgements_needed: list[str]


class RunFilterIn(Strict):
    status: list[RunStatus] = []
    agent: str = ""
    version: str = ""
    created_from: dt.datetime | None = None
    created_to: dt.datetime | None = None
    error: str = Field(default="", description="Text in the run's error.")
    tool: str = Field(default="", description="The tool of the operation a run is blocked on.")


class BulkPreviewIn(Strict):
    filters: RunFilterIn


class BulkIn(BulkPreviewIn):
    action: str = Field(json_schema_extra={"enum": ["retry", "cancel", "pause", "resume"]})
    reason: str = ""


class ActionPreviewOut(Schema):
    touch: int
    refused: int
    reasons: dict[str, int]
    examples: list[list[str]] = Field(description="[run id, why] for a few refused runs.")


class BulkPreviewOut(Schema):
    matched: int
    actions: dict[str, ActionPreviewOut]


class BulkJobOut(Schema):
    id: uuid.UUID
    action: str
    filters: Any
    actor: str
    reason: str
    status: str = Field(description="running, stopped or completed.")
    total: int
    touched: int
    skipped: int
    stopped_by: str
    created_at: dt.datetime
    finished_at: dt.datetime | None


class OperationOut(Schema):
    key: str
    operation_id: str
    kind: str
    name: str
    policy: str
    status: OperationStatus
    input: Any
    result: Any
    is_error: bool
    error: str
    attempts: int
    intent_at: dt.datetime
    outcome_at: dt.datetime | None


class InteractionOut(Schema):
    id: uuid.UUID
    run: uuid.UUID = Field(validation_alias=AliasChoices("run_id", "run"))
    kind: InteractionKind
    status: InteractionStatus
    tool_name: str
    operation_key: str
    payload: Any = Field(description="Agent-controlled: escape it wherever it is shown.")
    response: Any
    responded_by: str
    responded_at: dt.datetime | None
    created_at: dt.datetime


class RunOut(Schema):
    id: uuid.UUID
    session: uuid.UUID = Field(validation_alias=AliasChoices("session_id", "session"))
    seq: int
    agent: str
    version: str
    status: RunStatus
    input: str
    output: str
    error: str
    error_kind: str
    attention_reason: str
    attention_detail: Any
    blocked_operation: str
    steps: int
    next_attempt_at: dt.datetime | None
    created_at: dt.datetime
    updated_at: dt.datetime = Field(
        description="When the run last moved: submitted, claimed, or out of `running`. A "
        "running run's lease renewals leave it; its events say what it did since."
    )
    finished_at: dt.datetime | None
    pause_requested_by: str = Field(
        description="Who paused the run (or asked a running run to pause); empty otherwise."
    )
    pause_reason: str
    paused_from: str = Field(description="While paused: the status resume returns it to.")
    parent: uuid.UUID | None = Field(
        validation_alias=AliasChoices("parent_id", "parent"),
        description="A fork's parent run; null for a run that is not a fork.",
    )
    fork_point: str = Field(description="A fork's operation key it forked at.")


class RunDetailOut(RunOut):
    operations: list[OperationOut]
    pending: InteractionOut | None = Field(description="The interaction the run waits for.")
    retry_problem: str | None = Field(
        description="Why a retry would be refused now; null when it would be accepted "
        "(only for failed, blocked and retry_wait runs)."
    )


class RunPage(Schema):
    items: list[RunOut]
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next page; null at the end."
    )


class InteractionPage(Schema):
    items: list[InteractionOut]
    next_cursor: str | None
