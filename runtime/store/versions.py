"""The writes of the registry (runtime/registry.py): agent version registrations."""

from __future__ import annotations

import datetime as dt

from runtime.models import AgentVersion


def add_version(
    *,
    agent: str,
    version: str,
    fingerprint: str,
    spec: dict[str, object],
    actor: str,
    now: dt.datetime,
) -> AgentVersion:
    """A new registration. Raises IntegrityError if (agent, version) was registered meanwhile."""
    return AgentVersion.objects.create(
        agent=agent,
        version=version,
        fingerprint=fingerprint,
        spec=spec,
        registered_at=now,
        registered_by=actor,
    )


def reactivate_version(row: AgentVersion, *, actor: str, now: dt.datetime) -> bool:
    """Register an unregistered version again, if its fingerprint is still `row`'s; whether it
    landed. `row` is updated to what was written."""
    landed = AgentVersion.objects.filter(
        pk=row.pk, unregistered_at__isnull=False, fingerprint=row.fingerprint
    ).update(registered_at=now, registered_by=actor, unregistered_at=None, unregistered_by="")
    if landed == 1:
        row.registered_at, row.registered_by = now, actor
        row.unregistered_at, row.unregistered_by = None, ""
    return landed == 1


def retire_version(row: AgentVersion, *, actor: str, now: dt.datetime) -> None:
    """Unregister (the row is kept: history, and who did it)."""
    AgentVersion.objects.filter(pk=row.pk).update(unregistered_at=now, unregistered_by=actor)
    row.unregistered_at, row.unregistered_by = now, actor
