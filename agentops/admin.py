"""The Django admin: agent versions (register, unregister) and the durable records, read-only.

The admin is an interface like the console: its actions parse the request, call one runtime
verb (`register`, `unregister_many`) and report. Runs, operations, interactions, events and
sessions are shown read-only: only the runtime writes them, and events are never edited.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.utils import display_for_field
from django.core.exceptions import PermissionDenied
from django.db.models import Count, JSONField, Model, QuerySet
from django.forms.models import construct_instance
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import SafeString

from agentops.templatetags.console import reveal
from agentops.views.versions import differences
from runtime import conditions, registry
from runtime.agents import Agent, spec_differences
from runtime.errors import DurableConflictError, RegistrationError
from runtime.models import (
    BY_PEOPLE,
    RUNTIME,
    UNFINISHED_STATUSES,
    AgentVersion,
    ApprovalReceipt,
    ApprovalRule,
    AttentionReason,
    Event,
    EventKind,
    Interaction,
    Operation,
    Permission,
    Run,
    Session,
    WorkItem,
)
from runtime.policy import check_rule, describe

MANAGE_VERSIONS = Permission.MANAGE_VERSIONS
REGISTER, UNREGISTER = "register", "unregister"
ACTIONS = {REGISTER: "Register selected versions", UNREGISTER: "Unregister selected versions"}


def version_key(agent: str, version: str) -> str:
    """The checkbox value of one (agent, version): agent names cannot contain a colon."""
    return f"{agent}:{version}"


def parse_version_keys(values: list[str]) -> list[tuple[str, str]]:
    keys = []
    for value in values:
        agent, sep, version = value.partition(":")
        if sep and agent and version:
            keys.append((agent, version))
    return keys


def runs_url(agent: str, version: str) -> str:
    """The console's runs list filtered to one version; the Run admin's list if it has none."""
    query = urlencode({"agent": agent, "version": version})
    try:
        return f"{reverse('console:runs')}?{query}"
    except NoReverseMatch:
        unfinished = ",".join(UNFINISHED_STATUSES)
        return f"{reverse('admin:agentops_run_changelist')}?{query}&status__in={unfinished}"


def version_url(agent: str, version: str) -> str:
    """The admin page of one agent version (code-only versions have no row, hence no pk)."""
    return reverse("admin:agentops_agentversion_version", args=[agent, version])


# --- agent versions ----------------------------------------------------------------------------


@dataclass
class ToolLine:
    """One tool of a version as the admin shows it (from the spec: code's, else registered)."""

    name: str
    recovery: str
    approval: str
    description: str = ""
    input_schema: Any = None
    output_schema: Any = None

    @property
    def approval_short(self) -> str:
        """The approval rule in a word or two, for the list."""
        return {"always": "approval", "never": ""}.get(self.approval, "approval by rule")


def _approval_label(rule: Any) -> str:
    if rule is True:
        return "always"
    if isinstance(rule, str) and rule.startswith("rule:"):
        return f"when its rule says so ({rule})"
    return "never"


def _tool_lines(spec: dict[str, Any]) -> list[ToolLine]:
    tools = spec.get("tools") or {}
    recovery = spec.get("recovery") or {}
    approval = spec.get("approval") or {}
    return [
        ToolLine(
            name=name,
            recovery=str(recovery.get(name, "manual")),
            approval=_approval_label(approval.get(name)),
            description=str(tools[name].get("description", "")),
            input_schema=tools[name].get("input_schema"),
            output_schema=tools[name].get("output_schema"),
        )
        for name in tools
    ]


@dataclass
class VersionRow:
    """One (agent, version) known from code or from a registration, with what needs it."""

    agent: str
    version: str
    code: Agent | None
    registration: AgentVersion | None
    needed_by: int = 0
    differences: list[dict[str, Any]] = field(default_factory=list)

    @property
    def key(self) -> str:
        return version_key(self.agent, self.version)

    @property
    def is_registered(self) -> bool:
        return self.registration is not None and self.registration.is_registered

    @property
    def state(self) -> str:
        if self.is_registered:
            return "registered"
        if self.registration is not None:
            return "unregistered"
        return "never registered"

    @property
    def code_gone(self) -> bool:
        return self.code is None

    @property
    def code_changed(self) -> bool:
        """The code under this label is not what was registered: the fingerprints differ."""
        return (
            self.code is not None
            and self.registration is not None
            and self.code.fingerprint != self.registration.fingerprint
        )

    @property
    def code_state(self) -> str:
        if self.code_gone:
            return "gone"
        if self.code_changed:
            return "changed"
        return "matches" if self.registration is not None else "in code"

    @property
    def can_register(self) -> bool:
        return not self.is_registered and not self.code_gone and not self.code_changed

    @property
    def can_unregister(self) -> bool:
        return self.is_registered

    @property
    def spec(self) -> dict[str, Any]:
        if self.code is not None:
            return self.code.spec()
        return self.registration.spec if self.registration is not None else {}

    @property
    def model(self) -> str:
        return str(self.spec.get("model", ""))

    @property
    def tools(self) -> list[ToolLine]:
        return _tool_lines(self.spec)

    @property
    def registered_fingerprint(self) -> str:
        return self.registration.fingerprint if self.registration is not None else ""

    @property
    def code_fingerprint(self) -> str:
        return self.code.fingerprint if self.code is not None else ""

    @property
    def runs_url(self) -> str:
        return runs_url(self.agent, self.version)

    @property
    def url(self) -> str:
        return version_url(self.agent, self.version)


def version_rows(*, agent: str | None = None) -> list[VersionRow]:
    """Every version known from code or from a registration: two queries, whatever the count."""
    registrations = AgentVersion.objects.all()
    if agent is not None:
        registrations = registrations.filter(agent=agent)
    by_key = {(row.agent, row.version): row for row in registrations}
    code = {key: value for key, value in registry.code_agents().items() if agent in (None, key[0])}
    # The runs `registry.runs_needing` names for each version, counted in one grouped query.
    unfinished = Run.objects.filter(status__in=UNFINISHED_STATUSES)
    if agent is not None:
        unfinished = unfinished.filter(agent=agent)
    needed = {
        (row["agent"], row["version"]): row["n"]
        for row in unfinished.values("agent", "version").annotate(n=Count("pk")).order_by()
    }
    rows = []
    for key in sorted(set(code) | set(by_key)):
        row = VersionRow(
            agent=key[0],
            version=key[1],
            code=code.get(key),
            registration=by_key.get(key),
            needed_by=needed.get(key, 0),
        )
        if row.code_changed:
            assert row.code is not None and row.registration is not None
            row.differences = spec_differences(row.registration.spec, row.code.spec())
        rows.append(row)
    return rows


STATE_FILTERS = {
    "registered": ("Registered", lambda row: row.is_registered),
    "not_registered": ("Not registered", lambda row: not row.is_registered),
    "changed": ("Code changed", lambda row: row.code_changed),
    "gone": ("Code gone", lambda row: row.code_gone),
    "needed": ("Needed by runs", lambda row: row.needed_by > 0),
}


def pretty(value: Any) -> str:
    """A JSON value as indented text for a <pre> (escaped by the template, never marked safe)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


@admin.register(AgentVersion)
class AgentVersionAdmin(admin.ModelAdmin):
    """Every agent version known from code or registered, with Register and Unregister.

    Versions defined only in code have no row (a row means a registration exists or existed),
    so the list is built from `registry.known_versions()`'s sources rather than a queryset.
    """

    change_list_template = "admin/agentops/agentversion/change_list.html"
    version_template = "admin/agentops/agentversion/version.html"
    # The default queryset actions do not apply: a code-only version has no row to act on.
    actions = None

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # versions are registered from code, through the Register action

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False  # a registration is never replaced

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False  # unregistering keeps the row: history and who did it

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return super().has_view_permission(request, obj) or request.user.has_perm(MANAGE_VERSIONS)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        own = [
            path(
                "version/<str:agent>/<str:version>/",
                self.admin_site.admin_view(self.version_view),
                name="{}_{}_version".format(*info),
            ),
        ]
        return own + super().get_urls()

    # --- pages ---------------------------------------------------------------------------------

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            return self._act(request)
        rows = version_rows()
        chosen = request.GET.get("state", "")
        if chosen in STATE_FILTERS:
            rows = [row for row in rows if STATE_FILTERS[chosen][1](row)]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Agent versions",
            "subtitle": None,
            "rows": rows,
            "state_filters": [(key, label) for key, (label, _) in STATE_FILTERS.items()],
            "chosen_state": chosen,
            "actions": ACTIONS,
            "checkbox_name": ACTION_CHECKBOX_NAME,
            "can_manage": request.user.has_perm(MANAGE_VERSIONS),
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.change_list_template, context)

    def version_view(self, request: HttpRequest, agent: str, version: str) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        rows = [row for row in version_rows(agent=agent) if row.version == version]
        if not rows:
            raise Http404(f"agent {agent} version {version} is neither in the code nor registered")
        row = rows[0]
        history = Event.objects.filter(
            run__isnull=True,
            kind__in=[EventKind.AGENT_REGISTERED, EventKind.AGENT_UNREGISTERED],
            data__agent=agent,
            data__version=version,
        ).order_by("-id")[:20]
        needing = list(
            registry.runs_needing(agent, version)
            .order_by("created_at")
            .values("pk", "status", "attention_reason", "created_at")[:20]
        )
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"{agent} {version}",
            "subtitle": None,
            "row": row,
            "instructions": row.spec.get("instructions", ""),
            "differences": differences(
                [(AttentionReason.FINGERPRINT_MISMATCH, {"differences": row.differences})]
            ),
            "tools": [
                {
                    "line": line,
                    "input_schema": pretty(line.input_schema),
                    "output_schema": pretty(line.output_schema),
                }
                for line in row.tools
            ],
            "history": history,
            "needing": needing,
            "checkbox_name": ACTION_CHECKBOX_NAME,
            "can_manage": request.user.has_perm(MANAGE_VERSIONS),
            "changelist_url": reverse("admin:agentops_agentversion_changelist"),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.version_template, context)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # A registration's page is its version's page, which code-only versions have too.
        row = AgentVersion.objects.filter(pk=object_id).first() if object_id.isdigit() else None
        if row is None:
            raise Http404("no such registration")
        return redirect(version_url(row.agent, row.version))

    # --- actions -------------------------------------------------------------------------------

    def _act(self, request: HttpRequest) -> HttpResponse:
        if not request.user.has_perm(MANAGE_VERSIONS):
            raise PermissionDenied
        back = request.POST.get("next", "")
        if not url_has_allowed_host_and_scheme(
            back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        ):
            back = ""
        back = back or reverse("admin:agentops_agentversion_changelist")
        action = request.POST.get("action", "")
        keys = parse_version_keys(request.POST.getlist(ACTION_CHECKBOX_NAME))
        if action not in ACTIONS:
            messages.error(request, "Choose an action: Register or Unregister.")
            return HttpResponseRedirect(back)
        if not keys:
            messages.warning(request, "Select at least one version; nothing was changed.")
            return HttpResponseRedirect(back)
        actor = request.user.get_username()
        labels = ", ".join(f"{agent} {version}" for agent, version in keys)
        try:
            if action == REGISTER:
                registry.register(keys, actor=actor)
                messages.success(
                    request,
                    f"Registered {labels}. Runs blocked on a version are not retried by "
                    "this: retry them from the version board.",
                )
            else:
                registry.unregister_many(keys, actor=actor)
                messages.success(request, f"Unregistered {labels}.")
        except (RegistrationError, DurableConflictError) as exc:
            messages.error(request, exc.message)
        return HttpResponseRedirect(back)


# --- the durable records, read-only --------------------------------------------------------------


SHOWN = "shown_"


class ReadOnlyAdmin(admin.ModelAdmin):
    """Shown, never written: only the runtime writes these rows.

    Every field is shown through `shown_<field>`: agent- and user-supplied text with its
    invisible characters (bidirectional controls, zero-width characters) made visible, as on
    the console's pages.
    """

    def __getattr__(self, name: str) -> Any:
        if not name.startswith(SHOWN):
            raise AttributeError(name)
        field_ = self.model._meta.get_field(name.removeprefix(SHOWN))

        def show(obj: Model) -> SafeString:
            value = getattr(obj, field_.attname)
            if isinstance(field_, JSONField):
                text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
                return format_html('<pre class="json">{}</pre>', reveal(text))
            return reveal(display_for_field(value, field_, "—"))

        show.short_description = field_.verbose_name  # type: ignore[attr-defined]
        show.admin_order_field = field_.name  # type: ignore[attr-defined]
        return show

    def _shown_fields(self) -> list[str]:
        return [SHOWN + f.name for f in self.model._meta.concrete_fields]

    def get_fields(self, request: HttpRequest, obj: Model | None = None) -> list[str]:  # type: ignore[override]
        return self._shown_fields()

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> list[str]:
        return self._shown_fields()

    @admin.display(description="id", ordering="pk")
    def short_id(self, obj: Model) -> str:
        """A UUID's first block: enough to tell rows apart, and the full id is on its page."""
        return str(obj.pk).split("-")[0]

    # Huge tables: no second COUNT(*) over the whole table for the "N total" link, and no
    # per-filter counts (facets), each a GROUP BY over the table.
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 50
    actions = None

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


@admin.register(Session)
class SessionAdmin(ReadOnlyAdmin):
    list_display = ("short_id", "agent", "shown_title", "created_at")
    ordering = ("-created_at",)


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = (
        "short_id",
        "agent",
        "version",
        "status",
        "attention_reason",
        "session_title",
        "created_at",
    )
    list_filter = ("status", "attention_reason")
    list_select_related = ("session",)
    # The run_created index serves this order; choice filters need no query of their own.
    ordering = ("-created_at",)
    search_fields = ("=agent", "=version")

    @admin.display(description="session")
    def session_title(self, run: Run) -> SafeString:
        return reveal(run.session)


@admin.register(Operation)
class OperationAdmin(ReadOnlyAdmin):
    list_display = (
        "shown_key",
        "run_id",
        "kind",
        "shown_name",
        "policy",
        "status",
        "attempts",
        "intent_at",
    )
    # Only choice filters: a filter over free values would scan the whole table for them.
    list_filter = ("kind", "status")
    # Newest first by primary key: the only index that orders the whole table.
    ordering = ("-id",)


@admin.register(Interaction)
class InteractionAdmin(ReadOnlyAdmin):
    list_display = (
        "short_id",
        "run_id",
        "kind",
        "shown_tool_name",
        "status",
        "shown_responded_by",
        "created_at",
    )
    list_filter = ("kind", "status")
    ordering = ("-created_at",)


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    """The audit trail: never editable or deletable, not even by a superuser."""

    list_display = ("id", "kind", "shown_actor", "run_id", "shown_operation_key", "created_at")
    search_fields = ("actor",)  # the search box; what it does is get_search_results
    search_help_text = "An actor's username, exactly."
    ordering = ("-id",)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Event], search_term: str
    ) -> tuple[QuerySet[Event], bool]:
        """A search is one actor's name, exactly (usernames are case-sensitive): read from the
        event_actor index. Django's own search compares upper-cased text, which no index
        serves. ?kind=… filters by URL."""
        name = search_term.strip()
        if not name:
            return queryset, False
        found = queryset.filter(actor=name)
        return (found if name == RUNTIME else found.filter(BY_PEOPLE)), False


# --- approval policy ---------------------------------------------------------------------------


class BoundedJSONField(forms.JSONField):
    """Django's JSON form field, with nesting deeper than the parser goes refused on the form
    (Python's json raises RecursionError there, which Django's field lets through as a 500)."""

    default_error_messages = {"too_deep": "The JSON is nested too deeply."}

    def to_python(self, value: Any) -> Any:
        try:
            return super().to_python(value)
        except RecursionError:
            raise forms.ValidationError(self.error_messages["too_deep"], code="too_deep") from None

    def bound_data(self, data: Any, initial: Any) -> Any:
        try:
            return super().bound_data(data, initial)
        except RecursionError:
            return forms.fields.InvalidJSONInput(data)  # shown back as typed


class ApprovalRuleForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = ApprovalRule
        field_classes = {"condition": BoundedJSONField}
        fields = (
            "name",
            "description",
            "enabled",
            "priority",
            "agent",
            "tool",
            "condition",
            "approver_group",
            "quorum",
            "four_eyes",
            "high_risk",
            "expires_after",
            "on_expiry",
            "expiry_reason",
            "escalate_after",
            "escalation_group",
        )

    def clean(self) -> dict[str, Any] | None:
        data = super().clean()
        # The runtime's checks, shown on the form's fields (a save would refuse the rule too).
        check_rule(construct_instance(self, self.instance))
        return data


@admin.register(ApprovalRule)
class ApprovalRuleAdmin(admin.ModelAdmin):
    """Approval rules: data the engine applies to the next calls (a saved rule is validated
    against the tool's input schema; calls already waiting keep the policy they asked under)."""

    form = ApprovalRuleForm
    list_display = ("name", "agent", "tool", "condition_text", "quorum", "enabled", "priority")
    list_filter = ("enabled", "agent", "tool", "four_eyes", "high_risk")
    ordering = ("agent", "tool", "priority", "pk")
    search_fields = ("name", "agent", "tool")
    fieldsets = (
        (None, {"fields": ("name", "description", "enabled", "priority")}),
        ("Which calls", {"fields": ("agent", "tool", "condition")}),
        ("Who decides", {"fields": ("approver_group", "quorum", "four_eyes", "high_risk")}),
        (
            "Time",
            {
                "fields": (
                    "expires_after",
                    "on_expiry",
                    "expiry_reason",
                    "escalate_after",
                    "escalation_group",
                )
            },
        ),
    )

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)
        form.base_fields["condition"].help_text = (
            'JSON Logic over the arguments, e.g. {">": [{"var": "amount_cents"}, 50000]}; '
            "{} matches every call. Operators: " + ", ".join(sorted(conditions.OPERATORS))
        )
        return form

    @admin.display(description="condition")
    def condition_text(self, rule: ApprovalRule) -> str:
        return "every call" if rule.condition == {} else describe(rule.condition)


@admin.register(WorkItem)
class WorkItemAdmin(ReadOnlyAdmin):
    list_display = ("interaction_id", "rule", "claimed_by", "assigned_to", "flagged", "decided_at")
    list_filter = ("flagged",)
    ordering = ("-created_at",)


@admin.register(ApprovalReceipt)
class ApprovalReceiptAdmin(ReadOnlyAdmin):
    list_display = ("interaction_id", "digest", "created_at", "used_at")
    ordering = ("-created_at",)
