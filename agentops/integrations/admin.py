"""Admin for the integrations: webhook subscriptions (secret shown once) and their delivery log,
notification routes, people's muted kinds, and the notifications sent."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from agentops.integrations import notifications, webhooks
from agentops.integrations.kinds import KIND_CHOICES
from agentops.integrations.models import (
    Channel,
    Notification,
    NotificationPreference,
    NotificationRoute,
    WebhookDelivery,
    WebhookSubscription,
)


def _secret_page(request: HttpRequest, obj: Any, secret: str, title: str) -> HttpResponse:
    back = reverse("admin:integrations_webhooksubscription_change", args=[obj.pk])
    response = TemplateResponse(
        request,
        "admin/integrations/secret_once.html",
        {
            "title": title,
            "secret": secret,
            "object": obj,
            "back": back,
            **admin.site.each_context(request),
        },
    )
    # Not kept by any cache between here and the person (the admin adds its own never-cache).
    response["Cache-Control"] = "no-store"
    return response


class SubscriptionForm(forms.ModelForm):
    url = forms.URLField(max_length=500, assume_scheme="https")
    kinds_text = forms.CharField(
        label="Event kinds",
        required=False,
        help_text="Comma-separated event kinds (e.g. tool_approval_requested, completed, "
        "failed, blocked); empty sends every event.",
    )

    class Meta:
        model = WebhookSubscription
        fields = ("name", "url", "enabled")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["kinds_text"].initial = ", ".join(self.instance.event_kinds)

    def clean_kinds_text(self) -> list[str]:
        kinds = [k.strip() for k in self.cleaned_data["kinds_text"].split(",") if k.strip()]
        for kind in kinds:
            if not kind.replace("_", "").isalnum() or len(kind) > 50:
                raise forms.ValidationError(f"{kind!r} is not an event kind")
        return kinds


@admin.register(WebhookSubscription)
class WebhookSubscriptionAdmin(admin.ModelAdmin):
    form = SubscriptionForm
    list_display = ("name", "url", "enabled", "failing", "secret_hint", "cursor", "created_at")
    list_filter = ("enabled",)
    readonly_fields = ("secret_hint", "failing_since", "disabled_reason", "cursor", "created_by")
    actions = ("enable_and_redeliver", "disable", "rotate_secret")

    @admin.display(boolean=True, description="Failing")
    def failing(self, obj: WebhookSubscription) -> bool:
        return obj.failing_since is not None

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if change:
            obj.event_kinds = form.cleaned_data["kinds_text"]
            obj.save()
            return
        created, secret = webhooks.create_subscription(
            name=obj.name,
            url=obj.url,
            event_kinds=form.cleaned_data["kinds_text"],
            actor=request.user.get_username(),
        )
        obj.pk, obj._state.adding = created.pk, False
        request._new_webhook_secret = secret  # type: ignore[attr-defined]

    def response_add(self, request: HttpRequest, obj: Any, post_url_continue: Any = None) -> Any:
        secret = getattr(request, "_new_webhook_secret", None)
        if secret is None:
            return super().response_add(request, obj, post_url_continue)
        return _secret_page(request, obj, secret, f"Webhook subscription {obj} created")

    @admin.action(description="Enable, and deliver again what failed")
    def enable_and_redeliver(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        again = sum(webhooks.enable(subscription) for subscription in queryset)
        self.message_user(request, f"Enabled; {again} failed deliveries are due again.")

    @admin.action(description="Disable")
    def disable(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        queryset.update(enabled=False)
        self.message_user(request, "Disabled: events wait at the cursor until re-enabled.")

    @admin.action(description="Rotate the secret (shown once)")
    def rotate_secret(self, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
        if queryset.count() != 1:
            self.message_user(request, "Rotate one subscription at a time.", messages.ERROR)
            return None
        subscription = queryset.get()
        secret = webhooks.rotate_secret(subscription)
        return _secret_page(request, subscription, secret, f"New secret of {subscription}")


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    list_display = (
        "event_id",
        "subscription",
        "status",
        "attempts",
        "last_status_code",
        "last_attempt_at",
        "next_attempt_at",
        "response_excerpt",
    )
    list_filter = ("status", "subscription")
    list_select_related = ("subscription",)

    @admin.display(description="Last response")
    def response_excerpt(self, obj: WebhookDelivery) -> str:
        return obj.last_response[:120]


class RouteForm(forms.ModelForm):
    kinds = forms.MultipleChoiceField(choices=KIND_CHOICES, widget=forms.CheckboxSelectMultiple)
    slack_url = forms.URLField(
        assume_scheme="https",
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Slack incoming webhook URL (a secret: stored encrypted, never shown again). "
        "Leave empty to keep the current one.",
    )
    slack_token = forms.CharField(
        required=False,
        max_length=200,
        widget=forms.PasswordInput(render_value=False),
        help_text="Slack bot token, xoxb-… (a secret: stored encrypted, never shown again; the "
        "bot needs chat:write and must be in the channel). Leave empty to keep the current one.",
    )

    class Meta:
        model = NotificationRoute
        fields = ("name", "kinds", "group", "rule", "channel", "slack_channel", "enabled")

    def clean_slack_token(self) -> str:
        token = str(self.cleaned_data.get("slack_token") or "").strip()
        if token and not token.startswith(notifications.SLACK_BOT_TOKEN_PREFIX):
            raise forms.ValidationError("A Slack bot token starts with xoxb-.")
        return token

    def clean_slack_channel(self) -> str:
        channel = str(self.cleaned_data.get("slack_channel") or "").strip()
        if channel and not channel.isalnum():
            raise forms.ValidationError("A Slack channel id is letters and digits (C0123ABCD).")
        return channel

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        channel = data.get("channel")
        has_url = bool(data.get("slack_url") or self.instance.slack_url_sealed)
        if channel == Channel.SLACK and not has_url:
            raise forms.ValidationError("A Slack route needs its incoming webhook URL.")
        if channel == Channel.SLACK_BOT:
            has_token = bool(data.get("slack_token") or self.instance.slack_token_sealed)
            if not has_token or not data.get("slack_channel"):
                raise forms.ValidationError("A Slack bot route needs its bot token and channel id.")
        return data


@admin.register(NotificationRoute)
class NotificationRouteAdmin(admin.ModelAdmin):
    form = RouteForm
    list_display = (
        "name",
        "channel",
        "group",
        "rule",
        "kinds",
        "enabled",
        "failing",
        "disabled_reason",
        "slack_url_hint",
        "slack_token_hint",
    )
    list_filter = ("channel", "enabled", "rule")
    list_select_related = ("group", "rule")
    readonly_fields = ("slack_token_hint", "failing_since", "disabled_reason")
    actions = ("enable_and_send",)

    @admin.display(boolean=True, description="Failing")
    def failing(self, obj: NotificationRoute) -> bool:
        return obj.failing_since is not None

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if form.cleaned_data.get("slack_url"):
            notifications.set_slack_url(obj, form.cleaned_data["slack_url"])
        if form.cleaned_data.get("slack_token"):
            notifications.set_slack_token(obj, form.cleaned_data["slack_token"])
        if obj.enabled:  # enabled by hand after a fix: no longer flagged
            obj.failing_since, obj.disabled_reason = None, ""
        notifications.save_route(obj)

    @admin.action(description="Enable, and send what waited")
    def enable_and_send(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        due = sum(notifications.enable(route) for route in queryset)
        self.message_user(request, f"Enabled; {due} waiting notifications are due again.")


class PreferenceForm(forms.ModelForm):
    muted_kinds = forms.MultipleChoiceField(
        choices=KIND_CHOICES, widget=forms.CheckboxSelectMultiple, required=False
    )

    class Meta:
        model = NotificationPreference
        fields = ("user", "muted_kinds")


@admin.register(NotificationPreference)
class NotificationPreferenceAdmin(admin.ModelAdmin):
    form = PreferenceForm
    list_display = ("user", "muted_kinds")


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdmin):
    list_display = (
        "event_id",
        "kind",
        "route",
        "recipient",
        "status",
        "attempts",
        "last_status_code",
        "last_attempt_at",
    )
    list_filter = ("status", "kind", "route")
    list_select_related = ("route",)
