"""Service accounts and API tokens in the Django admin.

A token is shown once, on the page that answers its creation, and never again: only its
digest is stored. Tokens are revoked, not deleted, so that who could act, and until when,
stays on record.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.cache import add_never_cache_headers

from agentops.api.models import ApiToken, Scope, ServiceAccount
from runtime import clock


class ServiceAccountForm(forms.ModelForm):
    groups = forms.ModelMultipleChoiceField(
        queryset=Group.objects.order_by("name"),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="The console's groups: the account may do what their members may do.",
    )
    active = forms.BooleanField(
        required=False, initial=True, help_text="An inactive account's tokens are refused."
    )

    class Meta:
        model = ServiceAccount
        fields = ("name", "description")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["groups"].initial = list(self.instance.user.groups.all())
            self.fields["active"].initial = self.instance.user.is_active

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"]
        taken = get_user_model()._default_manager.filter(username=f"api:{name}")
        if not self.instance.pk and taken.exists():
            raise forms.ValidationError(f"a user named api:{name} exists already")
        return name


class TokenInline(admin.TabularInline):
    model = ApiToken
    fields = ("shown", "label", "scopes", "created_at", "last_used_at", "revoked_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ServiceAccount)
class ServiceAccountAdmin(admin.ModelAdmin):
    form = ServiceAccountForm
    list_display = ("name", "description", "is_active", "created_at")
    search_fields = ("name", "description")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        # The name is the actor recorded in every event the account caused: it never changes.
        return ("name",) if obj else ()

    def get_inlines(
        self, request: HttpRequest, obj: Any | None
    ) -> list[type[admin.options.InlineModelAdmin[Any, Any]]]:
        # Tokens are made on their own page; a table of none (a new account's) is only an empty
        # box that phones scroll sideways.
        return [TokenInline] if obj is not None and obj.tokens.exists() else []

    @admin.display(boolean=True, description="active")
    def is_active(self, obj: ServiceAccount) -> bool:
        return obj.user.is_active

    def save_model(
        self, request: HttpRequest, obj: ServiceAccount, form: Any, change: bool
    ) -> None:
        if not change:
            user = get_user_model()(username=obj.actor)
            user.set_unusable_password()
            user.save()
            obj.user = user
        obj.user.is_active = form.cleaned_data["active"]
        obj.user.save(update_fields=["is_active"])
        super().save_model(request, obj, form, change)
        obj.user.groups.set(form.cleaned_data["groups"])

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Deactivate instead: its name stays attached to what it did.
        return False


class TokenForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(
        choices=Scope.choices,
        widget=forms.CheckboxSelectMultiple,
        help_text="Each scope allows its verbs only, and only if the account has the permission.",
    )

    class Meta:
        model = ApiToken
        fields = ("account", "label", "scopes")


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("shown", "account", "label", "scopes", "created_at", "last_used_at", "revoked")
    list_filter = ("account", ("revoked_at", admin.EmptyFieldListFilter))
    search_fields = ("shown", "label", "account__name")
    actions = ("revoke",)
    readonly_fields = (
        "account",
        "label",
        "scopes",
        "shown",
        "created_at",
        "created_by",
        "last_used_at",
        "revoked_at",
        "revoked_by",
    )

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        if obj is None:
            kwargs["form"] = TokenForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        # After creation a token is only read or revoked: a leaked token must not gain scopes.
        return self.readonly_fields if obj else ()

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.readonly_fields if obj else ("account", "label", "scopes")

    @admin.display(boolean=True, description="revoked")
    def revoked(self, obj: ApiToken) -> bool:
        return obj.revoked_at is not None

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        if change:
            return
        obj.created_by = request.user.get_username()
        # Held on the instance only until response_add shows it; it is never stored.
        obj._token = obj.issue()  # type: ignore[attr-defined]
        super().save_model(request, obj, form, change)

    def response_add(
        self, request: HttpRequest, obj: ApiToken, post_url_continue: Any = None
    ) -> HttpResponse:
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "API token created",
            "token": obj._token,  # type: ignore[attr-defined]
            "token_obj": obj,
        }
        response = TemplateResponse(request, "admin/api/apitoken/token_created.html", context)
        add_never_cache_headers(response)
        return response

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        revoked = queryset.filter(revoked_at__isnull=True).update(
            revoked_at=clock.now(), revoked_by=request.user.get_username()
        )
        self.message_user(request, f"Revoked {revoked} token(s).", messages.SUCCESS)
