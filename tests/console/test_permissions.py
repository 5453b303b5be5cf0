"""Permission checks: one query per user object, answering what Django's ModelBackend answers."""

from __future__ import annotations

import pytest
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Group, User
from django.db import connection
from django.db.models.sql.compiler import SQLCompiler
from django.test.utils import CaptureQueriesContext

from agentops.backends import PermissionsBackend
from runtime.models import Permission
from tests.support.personas import CONSOLE_PERSONAS, superuser, user_with

EVERY_CHECK = (
    Permission.VIEW,
    Permission.RESPOND,
    Permission.RESOLVE,
    Permission.CONTROL,
    Permission.MANAGE_VERSIONS,
)


def everyone(users: dict[str, User]) -> list[User]:
    """The personas, and users holding permissions directly, both ways, and all of them."""
    mixed = user_with("mixed", "control_run")
    mixed.groups.add(Group.objects.get(name="viewers"))
    return [
        *users.values(),
        user_with("direct", "view_run", "respond_run"),
        mixed,
        superuser("root"),
        User.objects.create(username="gone", is_active=False),
    ]


def fresh(user: User) -> User:
    """The user as a request loads them: a new object, nothing read yet."""
    return User.objects.get(pk=user.pk)


def test_it_reads_the_permissions_modelbackend_reads(users):
    for user in everyone(users):
        assert PermissionsBackend().get_all_permissions(fresh(user)) == (
            ModelBackend().get_all_permissions(fresh(user))
        ), user.username
        for perm in EVERY_CHECK:
            assert fresh(user).has_perm(perm) == ModelBackend().has_perm(fresh(user), perm), (
                user.username,
                perm,
            )


@pytest.mark.parametrize("persona", [*CONSOLE_PERSONAS, "direct"])
def test_every_check_on_a_user_object_costs_one_query_in_all(users, persona):
    user = fresh(users[persona] if persona in users else user_with(persona, "respond_run"))
    with CaptureQueriesContext(connection) as captured:
        # Granted and refused alike: a refusal goes on to ModelBackend, which reads the same cache.
        answers = [user.has_perm(perm) for perm in EVERY_CHECK * 3]
        assert user.get_all_permissions() == user.get_all_permissions()
    assert len(captured.captured_queries) == 1
    assert answers[: len(EVERY_CHECK)] == answers[len(EVERY_CHECK) : 2 * len(EVERY_CHECK)]


def test_the_read_builds_no_orm_query(users, monkeypatch):
    """Every request reads its user's permissions: building that query through the ORM cost
    ten times running it (a twentieth of the web process under load)."""
    built: list[str] = []
    as_sql = SQLCompiler.as_sql

    def counted(self: SQLCompiler, *args: object, **kwargs: object) -> object:
        built.append(self.query.model.__name__ if self.query.model else "?")
        return as_sql(self, *args, **kwargs)

    people = [fresh(users["operator"]), fresh(superuser("root"))]
    monkeypatch.setattr(SQLCompiler, "as_sql", counted)
    for user in people:
        assert PermissionsBackend().get_all_permissions(user)
    assert built == []


def test_a_page_reads_the_permissions_once_for_its_view_and_template(world, as_user):
    run = world.run("blocked")
    client = as_user("viewer")  # refused most of what the page checks: control, resolve
    client.get(f"/runs/{run.pk}/reconcile/")
    with CaptureQueriesContext(connection) as captured:
        html = client.get(f"/runs/{run.pk}/reconcile/").content.decode()
    assert "You can look but not reconcile" in html
    reads = [q["sql"] for q in captured.captured_queries if "auth_permission" in q["sql"]]
    assert len(reads) == 1


def test_logging_in_is_still_modelbackends(users, client):
    """The password is checked once, and the session names the backend it always named."""
    user = users["operator"]
    user.set_password("a long enough password")
    user.save()
    response = client.post(
        "/accounts/login/", {"username": "operator", "password": "a long enough password"}
    )
    assert response.status_code == 302
    assert client.session["_auth_user_backend"] == "django.contrib.auth.backends.ModelBackend"
