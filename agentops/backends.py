"""Permission checks answered from one read per user object.

Django's ModelBackend reads a user's permissions in two queries (the user's own, then those of
their groups) and keeps them on the user object for the request. Every console page checks
permissions (the view's decorator, then its template's `perms`): this reads both in one query,
into the cache ModelBackend keeps, so every check after it — this backend's and ModelBackend's
— is answered from there.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Permission
from django.db.models import Q


class PermissionsBackend(ModelBackend):
    """Answers permission checks; logs nobody in (ModelBackend, after it, does).

    Listed before ModelBackend: a check it answers yes ends there; one it answers no goes on to
    ModelBackend, which finds the permissions already read on the same user object.
    """

    def authenticate(
        self, request: Any, username: Any = None, password: Any = None, **kw: Any
    ) -> None:
        # Passwords stay ModelBackend's: checked once, and sessions name it as before.
        return None

    def get_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        if not user_obj.is_active or user_obj.is_anonymous or obj is not None:
            return set()
        # The attribute ModelBackend.get_all_permissions fills and reads.
        if not hasattr(user_obj, "_perm_cache"):
            user_obj._perm_cache = _read(user_obj)
        return user_obj._perm_cache  # type: ignore[no-any-return]

    async def aget_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        return await sync_to_async(self.get_all_permissions)(user_obj, obj)


def _read(user: Any) -> set[str]:
    """ "app_label.codename" of every permission `user` holds, their own and their groups', in
    one query (two subqueries of ids)."""
    found = Permission.objects.all()
    if not user.is_superuser:
        own = Permission.objects.filter(user=user).values("pk")
        of_groups = Permission.objects.filter(group__user=user).values("pk")
        found = found.filter(Q(pk__in=own) | Q(pk__in=of_groups))
    rows = found.values_list("content_type__app_label", "codename").order_by()
    return {f"{app_label}.{codename}" for app_label, codename in rows}
