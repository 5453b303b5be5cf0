"""What the approval-policy tests share: the people, the groups and a rule maker."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib.auth.models import Group, Permission, User

from runtime.models import ApprovalRule

# finance decides refunds; leads are told on escalation; otto is in no group.
PEOPLE = {"finance": ("ann", "ben", "cat"), "leads": ("lee",)}


def people() -> dict[str, Group]:
    """The groups with their members, each able to respond and to edit arguments."""
    perms = Permission.objects.filter(
        content_type__app_label="agentops", codename__in=["respond_run", "edit_arguments"]
    )
    groups = {}
    for name, members in PEOPLE.items():
        group = Group.objects.create(name=name)
        group.permissions.add(*perms)
        for username in members:
            User.objects.create(username=username).groups.add(group)
        groups[name] = group
    User.objects.create(username="otto").user_permissions.add(*perms)
    return groups


def rule(
    tool: str = "charge",
    *,
    agent: str = "clerk",
    condition: Any = None,
    group: str | None = "finance",
    seconds: dict[str, float] | None = None,
    **fields: Any,
) -> ApprovalRule:
    """Save a rule (validated like any save). `seconds` holds expires_after/escalate_after."""
    durations = {k: dt.timedelta(seconds=v) for k, v in (seconds or {}).items()}
    return ApprovalRule.objects.create(
        name=fields.pop("name", f"{tool} rule"),
        agent=agent,
        tool=tool,
        condition={} if condition is None else condition,
        approver_group=Group.objects.get(name=group) if group else None,
        escalation_group=Group.objects.get(name=fields.pop("escalation_group"))
        if "escalation_group" in fields
        else None,
        **durations,
        **fields,
    )


OVER_1000 = {">": [{"var": "amount_cents"}, 1000]}
