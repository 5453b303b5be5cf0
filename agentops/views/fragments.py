"""The fragments that update in place, and which live page shows which.

Each fragment is one template with one stable DOM id. The page includes it, an htmx action
returns it, and the websocket consumer pushes it, always rendered from the same selector, so a
pushed fragment equals what a fresh GET renders.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.template.loader import render_to_string
from django.utils.html import format_html

from agentops import live, selectors, work
from agentops.views.common import reauth_fresh
from agentops.views.surgery import surgery_context
from runtime import store
from runtime.models import Event, Interaction, Run

INBOX = "agentops/partials/inbox.html"
RUNS_TABLE = "agentops/partials/runs_table.html"
RUN_HEADER = "agentops/partials/run_header.html"
RUN_TRANSCRIPT = "agentops/partials/run_transcript.html"
RUN_OPERATIONS = "agentops/partials/run_operations.html"
RUN_TIMELINE = "agentops/partials/run_timeline.html"
INTERACTION = "agentops/partials/interaction.html"
RECONCILE = "agentops/partials/reconcile.html"
AUDIT_TABLE = "agentops/partials/audit_table.html"
# Pause, resume and fork lineage: pushed with the header, as a pause lands at its boundary.
RUN_SURGERY = "agentops/partials/run_surgery.html"

# What an event changes on a page: "progress" (a call's intent or outcome: the timeline,
# operations and transcript) or "status" (anything else: the run's state and its actions).
PROGRESS = "progress"
STATUS = "status"

# The run page's fragments besides the header, re-rendered on every event of the run.
RUN_BODY = (RUN_TRANSCRIPT, RUN_OPERATIONS, RUN_TIMELINE)


def change_of(kind: str) -> str:
    return PROGRESS if kind in live.PROGRESS_KINDS else STATUS


Renderer = Callable[[HttpRequest, frozenset[str]], list[str]]


@dataclass(frozen=True)
class LivePage:
    """An open page: the groups it listens to and how to render what changed on it."""

    groups: tuple[str, ...]
    # The run whose events concern the page, or None for every run's (the inbox).
    run_id: uuid.UUID | None
    renderer: Renderer
    # The sockets whose pages have the same key show the same HTML, whoever their users, and
    # share its renders (agentops.consumers.Renders); None: the page's HTML is its user's own.
    shared: tuple[str, ...] | None = None

    def changes_after(self, after: int) -> frozenset[str]:
        """What changed since event `after`: the catch-up of a page that (re)connects."""
        if self._status_changed_after(after):
            return frozenset({STATUS, PROGRESS})
        if self.run_id is None:
            return frozenset()  # the inbox: progress inside a run changes nothing on it
        return frozenset({PROGRESS}) if self._events_after(after).exists() else frozenset()

    def missed_after(self, heard: int, told: Collection[int]) -> Missed:
        """The catch-up of a page whose socket stays open: the events after `heard` (the
        socket has been told of or has looked at every event up to it) that the socket was not
        told of (`told`, by their messages), and what each changes."""
        through = store.committed_through()  # read first: what commits later is looked for again
        events = self._events_after(heard)
        if self.run_id is None:
            events = events.exclude(kind__in=live.PROGRESS_KINDS)
        rows = list(events.order_by("id").values_list("id", "kind")[:MISSED_ROWS])
        return Missed(
            through,
            {event: change_of(kind) for event, kind in rows if event not in told},
            redraw=len(rows) == MISSED_ROWS,
        )

    def _events_after(self, after: int) -> QuerySet[Event]:
        events = Event.objects.filter(pk__gt=after)
        if self.run_id:
            return events.filter(run_id=self.run_id)
        return events.filter(run__isnull=False)

    def _status_changed_after(self, after: int) -> bool:
        return self._events_after(after).exclude(kind__in=live.PROGRESS_KINDS).exists()

    def render(self, request: HttpRequest, changes: Iterable[str], shown: int = 0) -> Frame:
        """The websocket message for `changes`: the cursor, then each affected fragment.

        `shown`: the newest event the page's regions reflect (its cursor). The cursor is read
        first, so that an event committed while rendering is sent again. A frame without the
        status regions looks for the status events since `shown`: one may have committed
        before the cursor was read and not reached the socket yet, and the cursor promises
        that the page reflects it.
        """
        cursor = store.committed_through()
        changes = frozenset(changes)
        if STATUS not in changes and self._status_changed_after(shown):
            changes |= {STATUS}
        parts = self.renderer(request, changes)
        if not parts:
            return Frame(cursor, "")
        head = format_html('<span id="live-cursor" data-event="{}" hidden></span>', cursor)
        return Frame(cursor, "\n".join([head, *parts]))


# A catch-up that finds more events than this after the last one redraws the whole page.
MISSED_ROWS = 200


@dataclass(frozen=True)
class Missed:
    """What a socket's catch-up found: the events through `through` have all committed, and
    `events` (each with what it changes) are those it was not told of. Past MISSED_ROWS events
    they are not worth sorting out: `redraw`, and the page draws every region."""

    through: int
    events: Mapping[int, str]
    redraw: bool = False

    def changes(self, told: Collection[int]) -> frozenset[str]:
        """What the page redraws for these events, but for those in `told`: told of while the
        catch-up looked, their messages have drawn them."""
        if self.redraw:
            return frozenset({STATUS, PROGRESS})
        return frozenset(change for event, change in self.events.items() if event not in told)


@dataclass(frozen=True)
class Frame:
    """A live page's websocket message, and the cursor it sets: once its regions are
    swapped, every region of the page reflects every event up to that id."""

    cursor: int
    message: str  # "" when nothing on the page changed


def _render(names: Iterable[str], context: dict[str, Any], request: HttpRequest) -> list[str]:
    return [render_to_string(name, context, request).strip() for name in names]


def _inbox(show: str) -> Renderer:
    def render(request: HttpRequest, changes: frozenset[str]) -> list[str]:
        if STATUS not in changes:
            return []
        context = selectors.inbox(request.user.get_username(), show)
        return _render([INBOX], context, request)

    return render


def _run(run_id: uuid.UUID, every_event: bool) -> Renderer:
    def render(request: HttpRequest, changes: frozenset[str]) -> list[str]:
        run = Run.objects.select_related("session").filter(pk=run_id).first()
        if run is None or not changes:
            return []
        names = ([RUN_HEADER, RUN_SURGERY] if STATUS in changes else []) + list(RUN_BODY)
        context = selectors.run_detail(run, every_event=every_event)
        context.update(surgery_context(run))
        return _render(names, context, request)

    return render


def _interaction(interaction_id: uuid.UUID) -> Renderer:
    def render(request: HttpRequest, changes: frozenset[str]) -> list[str]:
        interaction = (
            Interaction.objects.select_related("run", "run__session", "work", "receipt")
            .filter(pk=interaction_id)
            .first()
        )
        if interaction is None or STATUS not in changes:
            return []
        detail = selectors.interaction_detail(interaction, request.user.get_username())
        # Read from the session now, not when the socket opened: the password may have been
        # entered since, and then the push must not ask for it again.
        detail["reauth_fresh"] = detail["work"]["reauth_required"] and reauth_fresh(request)
        return _render([INTERACTION], detail, request)

    return render


def _reconcile(run_id: uuid.UUID, key: str) -> Renderer:
    def render(request: HttpRequest, changes: frozenset[str]) -> list[str]:
        run = Run.objects.select_related("session").filter(pk=run_id).first()
        if run is None or STATUS not in changes:
            return []
        return _render([RECONCILE], selectors.reconcile_detail(run, key), request)

    return render


def live_page(
    name: str, ident: uuid.UUID | None, key: str = "", events: str = "", user: str = ""
) -> LivePage | None:
    """The live page `name` for object `ident`, or None if that object does not exist.

    `key`: the operation a reconcile page shows; `events`: "all" on a run page showing every
    event of its timeline; `user`: the username of the page's user."""
    if name == "inbox":
        # `key` is the inbox's filter ("mine", "unassigned", "urgent"), for the page's user.
        show = key if key in work.FILTERS else ""
        # The inbox shows nothing of its user but what "mine" keeps (tests/console/test_live.py
        # renders every filter for several users to hold this).
        shared = ("inbox", show, user if show == "mine" else "")
        return LivePage((live.INBOX_GROUP,), None, _inbox(show), shared)
    if ident is None:
        return None
    if name == "run" and Run.objects.filter(pk=ident).exists():
        return LivePage((live.run_group(ident),), ident, _run(ident, events == "all"))
    if name == "reconcile" and Run.objects.filter(pk=ident).exists():
        return LivePage((live.run_group(ident),), ident, _reconcile(ident, key))
    if name == "interaction":
        run_id = Interaction.objects.filter(pk=ident).values_list("run_id", flat=True).first()
        if run_id is not None:
            return LivePage((live.run_group(run_id),), run_id, _interaction(ident))
    return None


def socket_request(user: AbstractBaseUser | AnonymousUser, cookies: dict[str, str]) -> HttpRequest:
    """A request to render fragments for a websocket's user, with the browser's session and the
    CSRF secret of its cookie, so that pushed fragments show and post like the page's own."""
    request = HttpRequest()
    request.method = "GET"
    # Typed as the project's user model; a websocket scope's user is the abstract base.
    request.user = user  # type: ignore[assignment]
    request.COOKIES = dict(cookies)
    # The browser's session as it is stored now (read when first used), like a page request's.
    engine = import_module(settings.SESSION_ENGINE)
    request.session = engine.SessionStore(cookies.get(settings.SESSION_COOKIE_NAME))
    CsrfViewMiddleware(lambda _: HttpResponse()).process_request(request)
    return request
