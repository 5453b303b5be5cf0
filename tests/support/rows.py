"""A model instance's values as a comparison sees them: for "as the ORM reads it" checks."""

from __future__ import annotations

from django.db.models import Model


def as_read(instance: Model) -> dict[str, tuple[type, object]]:
    """Every column's value with its type: type-exact (a uuid and its hex, 1 and True, differ),
    but a choice is its text."""
    values = {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}
    return {name: (str if isinstance(v, str) else type(v), v) for name, v in values.items()}
