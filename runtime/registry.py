"""Agents known from code, and the registrations that let their versions run.

The code registry is every `Agent` defined at module level in AGENTOPS_AGENT_MODULES. A
registration (an `AgentVersion` row) says that one (agent, version) with one fingerprint may
run. `register` validates a whole batch before writing any; `unregister` refuses while any
unfinished run still needs the version.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.db import IntegrityError, transaction
from django.dispatch import receiver

from runtime import clock, store
from runtime.agents import Agent, spec_differences
from runtime.errors import AgentDefinitionError, DurableConflictError, RegistrationError
from runtime.llm import Model
from runtime.models import UNFINISHED_STATUSES, AgentVersion, AttentionReason, EventKind, Run

_loaded: dict[tuple[str, str], Agent] | None = None
_override: list[dict[tuple[str, str], Agent]] = []


def _load() -> dict[tuple[str, str], Agent]:
    agents: dict[tuple[str, str], Agent] = {}
    for module_name in settings.AGENTOPS_AGENT_MODULES:
        module = importlib.import_module(module_name)
        for value in vars(module).values():
            if isinstance(value, Agent):
                _add(agents, value)
    return agents


def _add(agents: dict[tuple[str, str], Agent], agent: Agent) -> None:
    known = agents.get(agent.key)
    if known is not None and known.fingerprint != agent.fingerprint:
        raise AgentDefinitionError(
            f"agent {agent.name!r} version {agent.version!r} is defined twice with different code"
        )
    agents[agent.key] = agent


@receiver(setting_changed)
def _forget_code(setting: str, **kwargs: Any) -> None:
    global _loaded  # noqa: PLW0603 - a cache of the configured modules
    if setting == "AGENTOPS_AGENT_MODULES":
        _loaded = None


def code_agents() -> dict[tuple[str, str], Agent]:
    """Every agent version defined in code, by (name, version)."""
    global _loaded  # noqa: PLW0603
    if _override:
        return _override[-1]
    if _loaded is None:
        _loaded = _load()
    return _loaded


def code_agent(name: str, version: str) -> Agent | None:
    return code_agents().get((name, version))


def code_fingerprints(name: str, version: str | None = None) -> dict[str, str]:
    """The fingerprint of each version of `name` (or of `version` alone) defined in code."""
    return {
        each: agent.fingerprint
        for (agent_name, each), agent in code_agents().items()
        if agent_name == name and version in (None, each)
    }


@contextmanager
def code_defines(*agents: Agent) -> Iterator[None]:
    """Use exactly `agents` as the code registry inside the block (tests, code-change drills)."""
    defined: dict[tuple[str, str], Agent] = {}
    for agent in agents:
        _add(defined, agent)
    _override.append(defined)
    try:
        yield
    finally:
        _override.remove(defined)


def default_model() -> Model:
    """The client for agents that name none: Claude when ANTHROPIC_API_KEY is set."""
    from runtime.llm.anthropic import AnthropicModel

    return AnthropicModel()


def model_client(agent: Agent) -> Model:
    return agent.llm if agent.llm is not None else default_model()


# --- registrations -----------------------------------------------------------------------------


@dataclass(frozen=True)
class VersionProblem:
    """Why a run of (agent, version, fingerprint) cannot run now."""

    reason: str
    message: str
    differences: list[dict[str, Any]]

    def detail(self) -> dict[str, Any]:
        return {"message": self.message, "differences": self.differences}


def version_problem(name: str, version: str, fingerprint: str) -> VersionProblem | None:
    """None when the code and the registration both match the run's fingerprint."""
    code = code_agent(name, version)
    registration = AgentVersion.objects.filter(agent=name, version=version).first()
    if code is None:
        return VersionProblem(
            AttentionReason.VERSION_MISSING,
            f"{name} version {version} is no longer defined in the code",
            [],
        )
    if registration is None or not registration.is_registered:
        return VersionProblem(
            AttentionReason.VERSION_UNREGISTERED,
            f"{name} version {version} is not registered: register it again, then retry",
            [],
        )
    if code.fingerprint != fingerprint or registration.fingerprint != fingerprint:
        return VersionProblem(
            AttentionReason.FINGERPRINT_MISMATCH,
            f"the code of {name} version {version} changed since the run started: "
            "restore that code (or bump the version for the new code), then retry",
            spec_differences(registration.spec, code.spec()),
        )
    return None


def _resolve(entry: Agent | tuple[str, str]) -> tuple[tuple[str, str], Agent | None]:
    key = entry.key if isinstance(entry, Agent) else (str(entry[0]), str(entry[1]))
    code = code_agent(*key)
    if isinstance(entry, Agent) and code is not None and code.fingerprint != entry.fingerprint:
        return key, None
    return key, code


def register(entries: Iterable[Agent | tuple[str, str]], *, actor: str) -> list[AgentVersion]:
    """Register agent versions defined in code; all or nothing.

    Refused for the whole batch when any entry is not defined in code, repeats in the batch,
    is registered already, or was registered before with different code (a registration is
    never replaced: bump the version instead).
    """
    batch: list[Agent] = []
    problems: list[str] = []
    seen: set[tuple[str, str]] = set()
    for entry in entries:
        key, agent = _resolve(entry)
        label = f"{key[0]} {key[1]}"
        if key in seen:
            problems.append(f"{label} appears twice in the batch")
        elif agent is None:
            problems.append(f"{label} is not defined in the code (or differs from the code)")
        seen.add(key)
        if agent is not None:
            batch.append(agent)
    existing = {
        (row.agent, row.version): row
        for row in AgentVersion.objects.filter(agent__in={a.name for a in batch})
    }
    for agent in batch:
        row = existing.get(agent.key)
        if row is not None and row.is_registered:
            problems.append(f"{agent.name} {agent.version} is already registered")
        elif row is not None and row.fingerprint != agent.fingerprint:
            problems.append(
                f"{agent.name} {agent.version} was registered before with different code "
                f"(fingerprint {row.fingerprint[:12]}); bump the version"
            )
    if problems:
        raise RegistrationError("nothing was registered: " + "; ".join(problems))
    if not batch:
        raise RegistrationError("nothing was registered: the batch is empty")
    now = clock.now()
    rows = []
    try:
        with transaction.atomic():
            for agent in batch:
                row = existing.get(agent.key)
                if row is None:
                    row = store.add_version(
                        agent=agent.name,
                        version=agent.version,
                        fingerprint=agent.fingerprint,
                        spec=agent.spec(),
                        actor=actor,
                        now=now,
                    )
                elif not store.reactivate_version(row, actor=actor, now=now):
                    raise RegistrationError(
                        f"nothing was registered: {agent.name} {agent.version} changed meanwhile"
                    )
                store.event(
                    None,
                    EventKind.AGENT_REGISTERED,
                    actor,
                    agent=agent.name,
                    version=agent.version,
                    fingerprint=agent.fingerprint,
                )
                rows.append(row)
    except IntegrityError:
        raise RegistrationError(
            "nothing was registered: a version in the batch was registered meanwhile"
        ) from None
    return rows


def runs_needing(name: str, version: str) -> Any:
    """Unfinished runs of a version: queued work, running attempts, approvals, waits, blocks."""
    return Run.objects.filter(agent=name, version=version, status__in=UNFINISHED_STATUSES)


def unregister(name: str, version: str, *, actor: str) -> bool:
    """Unregister (agent, version); False if it was not registered.

    Raises DurableConflictError naming the runs while any unfinished run still needs it.
    History and deduplication records are kept.
    """
    with transaction.atomic():
        # The row lock orders this against a concurrent submit choosing this version.
        row = (
            AgentVersion.objects.select_for_update()
            .filter(agent=name, version=version, unregistered_at__isnull=True)
            .first()
        )
        if row is None:
            return False
        needing = list(
            runs_needing(name, version).order_by("created_at").values_list("pk", "status")
        )
        if needing:
            by_status: dict[str, list[str]] = {}
            for run_id, status in needing:
                by_status.setdefault(status, []).append(str(run_id))
            summary = "; ".join(
                f"{len(ids)} {status} ({', '.join(ids[:5])}{', …' if len(ids) > 5 else ''})"
                for status, ids in sorted(by_status.items())
            )
            raise DurableConflictError(
                f"{name} {version} is still needed by {len(needing)} unfinished run(s): {summary}",
                run_ids=[str(run_id) for run_id, _ in needing],
            )
        now = clock.now()
        store.retire_version(row, actor=actor, now=now)
        store.event(None, EventKind.AGENT_UNREGISTERED, actor, agent=name, version=version)
    return True


def unregister_many(keys: Iterable[tuple[str, str]], *, actor: str) -> list[tuple[str, str]]:
    """Unregister every (agent, version) in `keys`, or none of them.

    Each entry goes through `unregister`, all in one transaction that is rolled back whole
    (events included) when any entry fails: DurableConflictError naming the runs of every
    version still needed, else RegistrationError when an entry is not registered.
    """
    # Sorted, so two batches lock their rows in the same order and cannot deadlock.
    batch = sorted({(str(name), str(version)) for name, version in keys})
    if not batch:
        raise RegistrationError("nothing was unregistered: the batch is empty")
    conflicts: list[DurableConflictError] = []
    problems: list[str] = []
    with transaction.atomic():
        for name, version in batch:
            try:
                if not unregister(name, version, actor=actor):
                    problems.append(f"{name} {version} is not registered")
            except DurableConflictError as exc:
                conflicts.append(exc)
        message = "nothing was unregistered: " + "; ".join(
            [exc.message for exc in conflicts] + problems
        )
        if conflicts:
            raise DurableConflictError(
                message, run_ids=[run_id for exc in conflicts for run_id in exc.run_ids]
            )
        if problems:
            raise RegistrationError(message)
    return batch


def registered_version(
    name: str, version: str | None = None, *, lock: bool = False
) -> Agent | None:
    """The code of the newest registered version of `name` (or of `version`) that matches it."""
    rows = AgentVersion.objects.filter(agent=name, unregistered_at__isnull=True)
    if version is not None:
        rows = rows.filter(version=version)
    if lock:
        rows = rows.select_for_update()
    for row in rows.order_by("-registered_at", "-pk"):
        code = code_agent(row.agent, row.version)
        if code is not None and code.fingerprint == row.fingerprint:
            return code
    return None


def known_versions() -> Sequence[tuple[str, str]]:
    """Every (agent, version) known from code or from a registration."""
    keys = set(code_agents()) | set(AgentVersion.objects.values_list("agent", "version"))
    return sorted(keys)
