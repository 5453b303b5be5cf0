"""The console's forms: they collect and parse what a person typed.

The rules (a rejection needs a reason, a result must match the tool's output schema, which
states allow what) are the runtime's; its errors are shown on these forms.
"""

from __future__ import annotations

import uuid
import zoneinfo
from typing import Any

from django import forms

from agentops.selectors import AuditFilters, RunFilters
from runtime import control, jsonvalues
from runtime.errors import InvalidInput
from runtime.models import RunStatus

_TEXTAREA = {"rows": 4, "cols": 60}


class ApprovalForm(forms.Form):
    """Approve or reject a tool call; the reason is shown to the model on a rejection."""

    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("reject", "Reject")])
    reason = forms.CharField(required=False, strip=True, widget=forms.Textarea(attrs=_TEXTAREA))
    # The approver's second look, asked for when a rule marks the call high-risk.
    confirm = forms.BooleanField(required=False)

    def require_confirmation(self) -> None:
        """Refuse an approval that was not confirmed (call it for a high-risk call)."""
        data = self.cleaned_data if self.is_valid() else {}
        if data.get("decision") == "approve" and not data.get("confirm"):
            self.add_error(
                "confirm", "This call is marked high-risk: tick the confirmation to approve it."
            )

    def response(self) -> dict[str, Any]:
        return {
            "approved": self.cleaned_data["decision"] == "approve",
            "reason": self.cleaned_data["reason"],
        }


class AnswerForm(forms.Form):
    """Answer an agent's question; the answer becomes the question tool's result."""

    answer = forms.CharField(strip=True, widget=forms.Textarea(attrs=_TEXTAREA))

    def response(self) -> dict[str, Any]:
        return {"answer": self.cleaned_data["answer"]}


class ResolveForm(forms.Form):
    """How an uncertain operation is settled, and the evidence it was checked by: the verified
    result, or (verified in the external system) that the call did not happen."""

    operation_key = forms.CharField(widget=forms.HiddenInput, max_length=200)
    outcome = forms.ChoiceField(
        required=False,
        choices=[
            (control.RESULT, "It happened: this is its verified result"),
            (control.NOT_RUN_AGAIN, "It did not happen: run it once more, same operation id"),
            (control.NOT_RUN_TELL_MODEL, "It did not happen: tell the model, and let it decide"),
        ],
    )
    result = forms.CharField(
        required=False,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 6, "cols": 60, "spellcheck": "false"}),
        help_text="JSON, exactly as the external system reports it.",
    )
    evidence = forms.CharField(
        strip=True,
        widget=forms.Textarea(attrs=_TEXTAREA),
        help_text="What you checked, where: e.g. the receipt id in the payments system.",
    )

    def clean_outcome(self) -> str:
        # A form without the choice is the result form every earlier page posted.
        return self.cleaned_data["outcome"] or control.RESULT

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if data.get("outcome", control.RESULT) != control.RESULT:
            data["result"] = None  # a call that did not happen has no result
        elif not data.get("result"):
            self.add_error("result", "The verified result is required.")
        else:
            try:
                data["result"] = jsonvalues.loads(data["result"], what="result")
            except InvalidInput as exc:
                self.add_error("result", exc.message)
        return data

    @property
    def did_not_happen(self) -> bool:
        """Whether the person chose one of the did-not-happen outcomes (to re-show that form)."""
        return self.is_bound and self.data.get("outcome") in (
            control.NOT_RUN_AGAIN,
            control.NOT_RUN_TELL_MODEL,
        )


class CancelForm(forms.Form):
    reason = forms.CharField(required=False, strip=True, widget=forms.Textarea(attrs=_TEXTAREA))


def _uuid_or_none(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value.strip())
    except ValueError:
        return None


class RunFilterForm(forms.Form):
    """The runs list's filters; an agent or version nobody has simply matches no run."""

    status = forms.ChoiceField(required=False, choices=[("", "any status"), *RunStatus.choices])
    agent = forms.CharField(required=False, max_length=100)
    version = forms.CharField(required=False, max_length=50)
    session = forms.CharField(required=False, max_length=64)
    q = forms.CharField(required=False, max_length=200, label="Search")

    def clean_session(self) -> str:
        value = self.cleaned_data["session"]
        if value and _uuid_or_none(value) is None:
            raise forms.ValidationError("a session id is a UUID")
        return value

    def filters(self) -> RunFilters:
        self.is_valid()  # an invalid field is left out of cleaned_data, and shown as an error
        data = self.cleaned_data
        return RunFilters(
            status=data.get("status", ""),
            agent=data.get("agent", ""),
            version=data.get("version", ""),
            session=_uuid_or_none(data.get("session", "")),
            q=data.get("q", ""),
        )


class AuditFilterForm(forms.Form):
    actor = forms.CharField(required=False, max_length=150)
    kind = forms.CharField(required=False, max_length=50)
    run = forms.CharField(required=False, max_length=64)

    def clean_run(self) -> str:
        value = self.cleaned_data["run"]
        if value and _uuid_or_none(value) is None:
            raise forms.ValidationError("a run id is a UUID")
        return value

    def filters(self) -> AuditFilters:
        self.is_valid()
        data = self.cleaned_data
        return AuditFilters(
            actor=data.get("actor", ""),
            kind=data.get("kind", ""),
            run=_uuid_or_none(data.get("run", "")),
        )


def _time_zones() -> list[tuple[str, str]]:
    return [("", "The browser's time zone")] + [
        (name, name.replace("_", " ")) for name in sorted(zoneinfo.available_timezones())
    ]


class ProfileForm(forms.Form):
    """A person's console settings."""

    time_zone = forms.ChoiceField(choices=_time_zones, required=False)


class PauseForm(forms.Form):
    reason = forms.CharField(required=False, strip=True, widget=forms.Textarea(attrs=_TEXTAREA))


class ForkForm(forms.Form):
    """Where to fork a run, on which version, with what edited input; the acknowledgements."""

    at = forms.CharField(max_length=200, label="Fork at operation")
    version = forms.CharField(required=False, max_length=50)
    # JSON: a model request's messages, or a tool call's arguments. Empty: as recorded.
    input = forms.CharField(
        required=False, label="Edited input (JSON)", widget=forms.Textarea(attrs={"rows": 8})
    )
    acknowledge = forms.MultipleChoiceField(required=False)

    def __init__(self, *args: Any, keys: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        acknowledge = self.fields["acknowledge"]
        assert isinstance(acknowledge, forms.MultipleChoiceField)
        acknowledge.choices = [(key, key) for key in keys]

    def clean_input(self) -> Any:
        text = self.cleaned_data["input"].strip()
        if not text:
            return None
        try:
            return jsonvalues.loads(text)
        except InvalidInput as exc:
            raise forms.ValidationError(exc.message) from None


class BulkFilterForm(forms.Form):
    """The runs a bulk action applies to: the runs list's filters and a few more."""

    # Checkboxes: every status in view, each named by its own label.
    status = forms.MultipleChoiceField(
        required=False, choices=RunStatus.choices, widget=forms.CheckboxSelectMultiple
    )
    agent = forms.CharField(required=False, max_length=100)
    version = forms.CharField(required=False, max_length=50)
    created_from = forms.DateTimeField(required=False, label="Created from")
    created_to = forms.DateTimeField(required=False, label="Created before")
    error = forms.CharField(required=False, max_length=200, label="Error contains")
    tool = forms.CharField(required=False, max_length=200, label="Blocked on tool")

    def filters(self) -> dict[str, Any]:
        """The filter as the runtime takes it (times as ISO 8601 strings)."""
        data = self.cleaned_data
        chosen: dict[str, Any] = {
            name: data[name]
            for name in ("status", "agent", "version", "error", "tool")
            if data.get(name)
        }
        for name in ("created_from", "created_to"):
            if data.get(name):
                chosen[name] = data[name].isoformat()
        return chosen


class BulkStartForm(BulkFilterForm):
    action = forms.ChoiceField(choices=[(a, a) for a in ("retry", "cancel", "pause", "resume")])
    # Rendered with the preview: the same form sent twice starts one job.
    key = forms.CharField(max_length=64)
    reason = forms.CharField(required=False, strip=True, widget=forms.Textarea(attrs=_TEXTAREA))
