"""Slack and email notifications from the event log, routed per group and per approval rule,
muted per person.

`dispatch` reads the settled events after the "notifications" cursor; each event of a kind in
`kinds.KINDS` becomes, for every enabled route of that kind (the routes of the approval rule its
interaction is under when it has some for the kind, else the routes without a rule), one Slack
post (when at least one member of the route's group has not muted the kind) or one email per
member who has not. Slack is an incoming webhook or a bot token (agentops/integrations/slack.py).
The unique (route, event, recipient) row is what makes each notification once: a second sweep, a
redelivered task or a second worker finds it made, and a claimed message is sent by one sender.
Sending is at least once only across a crash between the send and its record.

A notification carries a link to the console page (the decision page for an approval or a
question, else the run): the console asks for a login and the decision is a form there. No link
ever approves anything by itself.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Q
from django.urls import reverse

from agentops.integrations import outbound, outbox, secrets, slack
from agentops.integrations.kinds import KINDS, NotificationKind, kind_for_event
from agentops.integrations.kinds import notifying_event_kinds as _event_kinds
from agentops.integrations.models import (
    Channel,
    MessageStatus,
    Notification,
    NotificationPreference,
    NotificationRoute,
    OutboxCursor,
)
from runtime import clock, store
from runtime.models import Event, Interaction, WorkItem

log = logging.getLogger(__name__)

CURSOR = "notifications"
# One post per route on these, one email per member on the others.
SLACK_CHANNELS = frozenset({Channel.SLACK, Channel.SLACK_BOT})
SLACK_BOT_TOKEN_PREFIX = "xoxb-"
# Arguments shown in a message: the first few, each cut short (the page shows them all).
SHOWN_ARGUMENTS = 6
ARGUMENT_CHARS = 200


def set_slack_url(route: NotificationRoute, url: str) -> None:
    route.slack_url_sealed = secrets.seal(url)
    route.slack_url_hint = secrets.hint(url)


def set_slack_token(route: NotificationRoute, token: str) -> None:
    route.slack_token_sealed = secrets.seal(token)
    route.slack_token_hint = secrets.hint(token)


def enable(route: NotificationRoute) -> int:
    """Turn a route on again after Slack refused it (the token or channel was fixed); what
    waited on it is due at once. How many notifications are due again."""
    with transaction.atomic():
        NotificationRoute.objects.filter(pk=route.pk).update(
            enabled=True, failing_since=None, disabled_reason=""
        )
        return Notification.objects.filter(route=route, status=MessageStatus.PENDING).update(
            next_attempt_at=clock.now()
        )


def save_route(route: NotificationRoute) -> None:
    """Save a route; the first one starts the notifier's cursor at the newest event, so turning
    notifications on does not send the whole history."""
    with transaction.atomic():
        outbox.locked_cursor(CURSOR, start_at_newest=True)
        route.save()


def dispatch(limit: int) -> int:
    """Make the notifications of the settled events after the cursor; how many were made."""
    with transaction.atomic():
        cursor = outbox.locked_cursor(CURSOR, start_at_newest=True)
        ids, position = store.settled_events(cursor.position, limit=limit)
        if not ids:
            return 0
        made = []
        # A route Slack refused keeps its notices, waiting until it is fixed and enabled; a
        # route a person turned off makes none.
        routes = list(
            NotificationRoute.objects.filter(Q(enabled=True) | Q(failing_since__isnull=False))
        )
        events = outbox.events_by_id(ids, set(_event_kinds()))
        rules = _rules_of(events)
        for event in events:
            kind = kind_for_event(event.kind)
            if kind is not None:
                rule_id = rules.get(str(event.data.get("interaction", "")))
                made += _notifications(event, kind, routes_for(routes, kind.name, rule_id))
        Notification.objects.bulk_create(made, ignore_conflicts=True)
        OutboxCursor.objects.filter(pk=cursor.pk).update(position=position)
    return len(made)


def _rules_of(events: list[Event]) -> dict[str, int]:
    """interaction id -> the approval rule its work item is under (one query). A deleted rule
    leaves its items without one (WorkItem.rule is SET_NULL)."""
    interactions = {str(e.data["interaction"]) for e in events if e.data.get("interaction")}
    items = WorkItem.objects.filter(interaction_id__in=interactions, rule__isnull=False)
    return {str(pk): rule_id for pk, rule_id in items.values_list("interaction_id", "rule_id")}


def routes_for(
    routes: list[NotificationRoute], kind: str, rule_id: int | None
) -> list[NotificationRoute]:
    """The routes of a notification: those of its approval rule when any sends this kind,
    else those without a rule. A route for one rule never sends another rule's notices."""
    sending = [route for route in routes if kind in route.kinds]
    if rule_id is not None:
        for_rule = [route for route in sending if route.rule_id == rule_id]
        if for_rule:
            return for_rule
    return [route for route in sending if route.rule_id is None]


def _notifications(
    event: Event, kind: NotificationKind, routes: list[NotificationRoute]
) -> list[Notification]:
    now = clock.now()
    made = []
    for route in routes:
        recipients = recipients_of(route, kind.name)
        if route.channel in SLACK_CHANNELS:
            addresses = [""] if recipients else []
        else:
            addresses = sorted({user.email for user in recipients if user.email})
        made += [
            Notification(
                route=route,
                event=event,
                run_id=event.run_id,
                kind=kind.name,
                recipient=address,
                next_attempt_at=now,
                created_at=now,
            )
            for address in addresses
        ]
    return made


def recipients_of(route: NotificationRoute, kind: str) -> list[Any]:
    """The active members of the route's group who have not muted `kind`."""
    users = get_user_model().objects.filter(groups=route.group, is_active=True)
    muted = {
        pref.user_id
        for pref in NotificationPreference.objects.filter(user__in=users)
        if kind in (pref.muted_kinds or [])
    }
    return [user for user in users if user.pk not in muted]


def claim_due(limit: int) -> list[outbox.Claim]:
    return outbox.claim(Notification, Notification.objects.filter(route__enabled=True), limit=limit)


# --- the message ---------------------------------------------------------------------------------


def message_for(notification: Notification) -> dict[str, Any]:
    """What the notification says: title, agent, tool, key arguments, question, link."""
    event = notification.event
    kind = KINDS[notification.kind]
    run = event.run
    interaction = None
    if event.data.get("interaction"):
        interaction = Interaction.objects.filter(pk=event.data["interaction"]).first()
    if kind.links_interaction and interaction is not None:
        path = reverse("console:interaction", args=[interaction.pk])
    else:
        path = reverse("console:run", args=[event.run_id])
    payload = interaction.payload if interaction is not None else {}
    arguments = payload.get("arguments") if isinstance(payload, dict) else None
    return {
        "title": kind.label,
        "agent": f"{run.agent} v{run.version}" if run else "",
        "tool": (interaction.tool_name if interaction else "") or event.data.get("tool", ""),
        "arguments": _key_arguments(arguments),
        "question": str(payload.get("question", "")) if isinstance(payload, dict) else "",
        "detail": str(event.data.get("message", "")),
        "link": settings.AGENTOPS_CONSOLE_URL.rstrip("/") + path,
    }


def _key_arguments(arguments: Any) -> list[tuple[str, str]]:
    if not isinstance(arguments, dict):
        return []
    shown = []
    for name, value in list(arguments.items())[:SHOWN_ARGUMENTS]:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        shown.append((str(name)[:50], _cut(text, ARGUMENT_CHARS)))
    return shown


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def slack_blocks(message: dict[str, Any]) -> dict[str, Any]:
    """Block Kit. Agent-controlled text (arguments, questions) goes in plain_text objects, which
    Slack shows as typed: no links, mentions or formatting can be smuggled in through them."""
    fields = [{"type": "mrkdwn", "text": "*Agent*"}, _plain(message["agent"])]
    if message["tool"]:
        fields += [{"type": "mrkdwn", "text": "*Tool*"}, _plain(message["tool"])]
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": _plain(message["title"][:150])},
        {"type": "section", "fields": fields},
    ]
    for name, value in message["arguments"]:
        blocks.append({"type": "section", "fields": [_plain(name), _plain(value)]})
    for text in (message["question"], message["detail"]):
        if text:
            blocks.append({"type": "section", "text": _plain(_cut(text, 2900))})
    blocks.append(
        {
            "type": "actions",
            "elements": [
                {
                    "type": "button",
                    "text": _plain("Open in AgentOps"),
                    "url": message["link"],
                    "action_id": "open",
                }
            ],
        }
    )
    fallback = f"{message['title']}: {message['tool'] or message['agent']}"
    return {"text": fallback, "blocks": blocks}


def _plain(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text or " ", "emoji": False}


def email_text(message: dict[str, Any]) -> tuple[str, str]:
    # The subject holds only names from code (agent, tool), never agent-written text.
    subject = f"[AgentOps] {message['title']}"
    if message["tool"]:
        subject += f": {message['tool']}"
    lines = [message["title"], "", f"Agent: {message['agent']}"]
    if message["tool"]:
        lines.append(f"Tool: {message['tool']}")
    lines += [f"  {name}: {value}" for name, value in message["arguments"]]
    if message["question"]:
        lines += ["", f"Question: {message['question']}"]
    if message["detail"]:
        lines += ["", message["detail"]]
    lines += ["", f"Open it in AgentOps (after login): {message['link']}"]
    return subject, "\n".join(lines) + "\n"


# --- sending -------------------------------------------------------------------------------------


def _unsealed(sealed: str) -> str:
    try:
        return secrets.unseal(sealed) if sealed else ""
    except secrets.SecretUnreadable:
        return ""


def _without_secrets(text: str, route: NotificationRoute) -> str:
    """`text` with the route's secrets taken out: the Slack URL (its path is the secret) and
    the bot token, which an error message or a proxy's answer may quote back into the log."""
    url = _unsealed(route.slack_url_sealed)
    path = urlsplit(url).path
    for secret in (url, _unsealed(route.slack_token_sealed), path if len(path) > 1 else ""):
        if secret:
            text = text.replace(secret, "[redacted]")
    return text


def send(held: outbox.Claim) -> str | None:
    """Send one claimed notification and record the attempt; its status (None: claim lost)."""
    notification = outbox.still_claimed(Notification, held)
    if notification is None:
        return None
    message = message_for(notification)
    route = NotificationRoute.objects.get(pk=notification.route_id)
    try:
        if route.channel == Channel.SLACK_BOT:
            token = secrets.unseal(route.slack_token_sealed)
            attempt = _slack_attempt(
                slack.post_message(token, route.slack_channel, slack_blocks(message))
            )
        elif route.channel == Channel.SLACK:
            url = secrets.unseal(route.slack_url_sealed)
            attempt = _slack_attempt(slack.post_to_webhook(url, slack_blocks(message)))
        else:
            subject, body = email_text(message)
            send_mail(subject, body, None, [notification.recipient])
            attempt = _Attempt(delivered=True, text="sent")
    except (outbound.DestinationRefused, secrets.SecretUnreadable) as exc:
        attempt = _Attempt(give_up=True, text=f"refused: {exc}")
    except Exception as exc:  # the service is down or slow: retried
        attempt = _Attempt(text=f"{type(exc).__name__}: {exc}")
    attempt = replace(attempt, text=_without_secrets(attempt.text, route))
    status = outbox.finish(
        Notification,
        held,
        delivered=attempt.delivered,
        give_up=attempt.give_up,
        status_code=attempt.status_code,
        response=attempt.text,
        retry_after=attempt.retry_after,
    )
    if status is not None and attempt.route_refused:
        _flag(route, attempt.text)
    if status == MessageStatus.FAILED:
        log.warning("notification %s given up: %s", held.pk, attempt.text)
    return status


@dataclass(frozen=True)
class _Attempt:
    delivered: bool = False
    give_up: bool = False
    text: str = ""
    status_code: int | None = None
    retry_after: float | None = None
    # Slack refused the route itself (its token, webhook URL or channel): turn it off, flag it.
    route_refused: bool = False


def _slack_attempt(posted: slack.Posted) -> _Attempt:
    """One rule for both kinds of Slack route (slack.py sorts the errors)."""
    return _Attempt(
        delivered=posted.ok,
        # A refused route keeps its message pending: it goes out when the route is fixed.
        give_up=not posted.ok and not posted.transient and not posted.route_refused,
        text="ok" if posted.ok else posted.error,
        status_code=posted.status,
        retry_after=posted.retry_after,
        route_refused=posted.route_refused,
    )


def _flag(route: NotificationRoute, error: str) -> None:
    """Turn the route off with Slack's reason; its notifications wait until it is enabled
    again (the admin's action), like a failing webhook subscription's deliveries."""
    NotificationRoute.objects.filter(pk=route.pk, enabled=True).update(
        enabled=False,
        failing_since=clock.now(),
        disabled_reason=f"Slack refused the route: {error}",
    )
    log.warning("notification route %s disabled: Slack answered %s", route.pk, error)
