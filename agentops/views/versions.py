"""The version board: runs a missing version or a code change stopped, by (agent, version).

For each group it shows what differs, whether the version is registered, and the way out:
restore the code, register the version (in the admin), then retry the group's runs — one POST
through `runtime.control.retry_many`, with a preview from `retry_problem`. Registering never
retries anything by itself.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from django.contrib import messages
from django.db.models import Count, F, Window
from django.db.models.functions import RowNumber
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse

from agentops.views.common import action, page
from runtime import control, registry
from runtime.control import RetryResult
from runtime.models import (
    VERSION_REASONS,
    AgentVersion,
    AttentionReason,
    Permission,
    Run,
    RunStatus,
)

# Runs listed by name in a group; the counts and the retry cover all of them.
SHOWN_RUNS = 25
SHOWN_DIFFERENCES = 10


def group_dom_id(agent: str, version: str) -> str:
    """A stable DOM id for a group: a digest, since version labels may hold dots."""
    digest = hashlib.sha256(f"{agent}\n{version}".encode()).hexdigest()[:12]
    return f"version-group-{digest}"


def run_url(run_id: Any) -> str:
    """The console's run page (the Run admin's page until the console has one)."""
    try:
        return reverse("console:run", args=[run_id])
    except NoReverseMatch:
        return reverse("admin:agentops_run_change", args=[run_id])


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


@dataclass
class Difference:
    """One differing part, as recorded when the runs were blocked (or as the code is now)."""

    part: str
    saved: str
    current: str
    saved_label: str = "registered"
    current_label: str = "in the code now"
    runs: int = 1
    # A part only one side has (a tool added or removed): shown whole rather than as a diff.
    only_saved: bool = False
    only_current: bool = False

    @property
    def lines(self) -> list[tuple[str, str]]:
        """A unified diff of the two values as (kind, line): kind is "del", "add" or "ctx"."""
        diff = difflib.unified_diff(
            self.saved.splitlines(), self.current.splitlines(), lineterm="", n=2
        )
        lines: list[tuple[str, str]] = []
        for line in diff:
            if line.startswith(("---", "+++", "@@")):
                # Between two hunks, mark the lines left out.
                if line.startswith("@@") and lines:
                    lines.append(("ctx", "…"))
                continue
            kind = {"-": "del", "+": "add"}.get(line[:1], "ctx")
            lines.append((kind, line))
        return lines


def differences(details: list[tuple[str, dict[str, Any]]]) -> list[Difference]:
    """The distinct differences in (reason, attention detail) pairs, with how many runs share
    each."""
    found: dict[tuple[str, str, str], Difference] = {}
    for reason, detail in details:
        labels = (
            ("saved input", "built by the code now")
            if reason == AttentionReason.INPUT_MISMATCH
            else ("registered", "in the code now")
        )
        for item in detail.get("differences") or []:
            saved, current = item.get("saved"), item.get("current")
            diff = Difference(
                part=str(item.get("part", "")),
                saved=_text(saved),
                current=_text(current),
                saved_label=labels[0],
                current_label=labels[1],
                only_saved=current is None and saved is not None,
                only_current=saved is None and current is not None,
            )
            key = (diff.part, diff.saved, diff.current)
            if key in found:
                found[key].runs += 1
            else:
                found[key] = diff
    return list(found.values())


@dataclass
class Group:
    """The blocked runs of one (agent, version), what stopped them, and the way out.

    `total`, `reasons` and `fingerprints` count every blocked run of the group; `runs` holds
    only the oldest SHOWN_RUNS of them, so the board reads the same few rows at any scale.
    """

    agent: str
    version: str
    runs: list[Run] = field(default_factory=list)
    total: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    # fingerprint -> how many of the group's runs started on it.
    fingerprints: Counter[str] = field(default_factory=Counter)
    registration: AgentVersion | None = None
    results: list[RetryResult] | None = None

    def __post_init__(self) -> None:
        code = registry.code_agent(self.agent, self.version)
        self.code_defined = code is not None
        self.code_fingerprint = code.fingerprint if code is not None else ""
        # Compared with the code: the runs' fingerprint, or once none is left the registration's.
        registered = self.registration.fingerprint if self.registration is not None else ""
        self.run_fingerprint = min(self.fingerprints) if self.fingerprints else registered
        # What stops these runs now (they all started on one registration, so one fingerprint).
        self.problem = (
            registry.version_problem(self.agent, self.version, self.run_fingerprint)
            if self.total
            else None
        )
        # As recorded on the runs shown: the details of the rest are not loaded.
        self.recorded = differences([(r.attention_reason, r.attention_detail) for r in self.runs])
        self.live = (
            differences([(self.problem.reason, self.problem.detail())]) if self.problem else []
        )
        # The preview of the retry: a version-blocked run's refusal depends only on its
        # (agent, version, fingerprint), so each fingerprint is checked once for all its runs.
        problems = {
            fingerprint: control.version_retry_problem(self.agent, self.version, fingerprint)
            for fingerprint in self.fingerprints
        }
        self.preview = [(run, problems[run.fingerprint]) for run in self.runs]
        refused: Counter[str] = Counter()
        for fingerprint, n in self.fingerprints.items():
            problem = problems[fingerprint]
            if problem:
                refused[problem] += n
        self.refusals = sorted(refused.items())
        self.refused = sum(refused.values())
        self.retryable = self.total - self.refused

    @property
    def dom_id(self) -> str:
        return group_dom_id(self.agent, self.version)

    @property
    def is_registered(self) -> bool:
        return self.registration is not None and self.registration.is_registered

    @property
    def code_changed(self) -> bool:
        return self.code_defined and self.code_fingerprint != self.run_fingerprint

    @property
    def input_mismatch(self) -> bool:
        return AttentionReason.INPUT_MISMATCH in self.reasons

    @property
    def shown_runs(self) -> list[tuple[Run, str | None]]:
        return self.preview[:SHOWN_RUNS]

    @property
    def shown_differences(self) -> list[Difference]:
        """What differs now if the registry still sees a difference, else what was recorded."""
        return (self.live or self.recorded)[:SHOWN_DIFFERENCES]

    @property
    def differences_are_live(self) -> bool:
        return bool(self.live)

    @property
    def hidden_differences(self) -> int:
        return max(0, len(self.live or self.recorded) - SHOWN_DIFFERENCES)

    @property
    def reason_labels(self) -> list[tuple[str, int]]:
        return [
            (str(AttentionReason(reason).label), n) for reason, n in sorted(self.reasons.items())
        ]

    @property
    def retried(self) -> list[RetryResult]:
        return [r for r in self.results or [] if r.retried]

    @property
    def not_retried(self) -> list[RetryResult]:
        return [r for r in self.results or [] if not r.retried]


def blocked_groups(only: tuple[str, str] | None = None) -> list[Group]:
    """The version-blocked runs, grouped by (agent, version), oldest run first in each group.

    Three queries whatever the number of runs: the counts of each group by reason and
    fingerprint, its oldest SHOWN_RUNS runs (one windowed query for every group) and the
    registrations."""
    blocked = Run.objects.filter(
        status=RunStatus.NEEDS_ATTENTION, attention_reason__in=VERSION_REASONS
    )
    registrations = AgentVersion.objects.all()
    if only is not None:
        blocked = blocked.filter(agent=only[0], version=only[1])
        registrations = registrations.filter(agent=only[0], version=only[1])
    counts = (
        blocked.values_list("agent", "version", "attention_reason", "fingerprint")
        .annotate(n=Count("pk"))
        .order_by("agent", "version")
    )
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for agent, version, reason, fingerprint, n in counts:
        group = groups.setdefault(
            (agent, version), {"total": 0, "reasons": Counter(), "fingerprints": Counter()}
        )
        group["total"] += n
        group["reasons"][reason] += n
        group["fingerprints"][fingerprint] += n
    if only is not None:
        groups.setdefault(only, {})
    # The ids first, numbered off the index alone; then only those rows are read.
    first_ids = (
        blocked.annotate(
            position=Window(
                RowNumber(), partition_by=[F("agent"), F("version")], order_by="created_at"
            )
        )
        .filter(position__lte=SHOWN_RUNS)
        .values("pk")
    )
    first = (
        Run.objects.filter(pk__in=first_ids)
        .defer("transcript", "input", "output")
        .order_by("agent", "version", "created_at")
    )
    shown: dict[tuple[str, str], list[Run]] = {}
    for run in first:
        shown.setdefault((run.agent, run.version), []).append(run)
    registered = {(row.agent, row.version): row for row in registrations}
    return [
        Group(
            agent=key[0],
            version=key[1],
            runs=shown.get(key, []),
            registration=registered.get(key),
            **counts_of_group,
        )
        for key, counts_of_group in groups.items()
    ]


def _context(request: HttpRequest, group: Group) -> dict[str, Any]:
    user = request.user
    can_manage = user.has_perm(Permission.MANAGE_VERSIONS) and user.is_staff
    register_url = ""
    if can_manage and group.code_defined and not group.is_registered and not group.code_changed:
        register_url = (
            reverse("admin:agentops_agentversion_version", args=[group.agent, group.version])
            + "#register"
        )
    return {
        "group": group,
        "can_retry": user.has_perm(Permission.CONTROL),
        "can_manage": can_manage,
        "register_url": register_url,
        "runs": [(run, problem, run_url(run.pk)) for run, problem in group.shown_runs],
    }


@page
def board(request: HttpRequest) -> HttpResponse:
    """Every group of version-blocked runs, with what differs and the way out."""
    groups = [_context(request, group) for group in blocked_groups()]
    return render(request, "agentops/versions/board.html", {"groups": groups})


@action(Permission.CONTROL)
def retry_group(request: HttpRequest, agent: str, version: str) -> HttpResponse:
    """Retry every version-blocked run of (agent, version); each is refused or retried alone."""
    run_ids = list(
        Run.objects.filter(
            agent=agent,
            version=version,
            status=RunStatus.NEEDS_ATTENTION,
            attention_reason__in=VERSION_REASONS,
        )
        .order_by("created_at")
        .values_list("pk", flat=True)
    )
    results = control.retry_many(run_ids, actor=request.user.get_username())
    group = blocked_groups(only=(agent, version))[0]
    group.results = results
    if getattr(request, "htmx", False):  # django_htmx's middleware sets it
        return render(request, "agentops/versions/group.html", _context(request, group))
    retried = len(group.retried)
    summary = f"{agent} {version}: retried {retried} of {len(results)} run(s)."
    if group.not_retried:
        messages.warning(
            request,
            summary + " Not retried: " + "; ".join(r.problem for r in group.not_retried[:5]),
        )
    else:
        messages.success(request, summary)
    return redirect(f"{reverse('versions:board')}#{group.dom_id}")
