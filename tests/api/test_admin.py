"""Service accounts and tokens in the admin: a token is shown once, stored hashed, revocable."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from agentops.api.models import ApiToken, ServiceAccount, token_digest
from tests.api.conftest import Api, error_of

# The tokens inline's management form, which every account form post carries.
INLINE = {"tokens-TOTAL_FORMS": "0", "tokens-INITIAL_FORMS": "0"}


@pytest.fixture
def admin(db: None) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "x"))
    return client


def test_an_account_gets_a_linked_user_in_the_chosen_groups(admin: Client) -> None:
    operators = Group.objects.get(name="operators")
    response = admin.post(
        "/admin/api/serviceaccount/add/",
        {
            "name": "ci",
            "description": "deploys",
            "groups": [operators.pk],
            "active": "on",
            **INLINE,
        },
    )
    assert response.status_code == 302
    account = ServiceAccount.objects.get(name="ci")
    assert account.user.username == "api:ci"
    assert not account.user.has_usable_password()
    assert list(account.user.groups.all()) == [operators]


def test_an_account_name_is_validated(admin: Client) -> None:
    response = admin.post(
        "/admin/api/serviceaccount/add/", {"name": "Bad Name!", "active": "on", **INLINE}
    )
    assert response.status_code == 200
    assert not ServiceAccount.objects.exists()
    assert not User.objects.filter(username__startswith="api:").exists()


def test_a_token_is_shown_once_and_stored_hashed(admin: Client) -> None:
    admin.post("/admin/api/serviceaccount/add/", {"name": "ci", "active": "on", **INLINE})
    account = ServiceAccount.objects.get()
    response = admin.post(
        "/admin/api/apitoken/add/",
        {"account": account.pk, "label": "deploy", "scopes": ["read", "submit"]},
    )
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    html = response.content.decode()
    start = html.index('<code id="api-token">') + len('<code id="api-token">')
    secret = html[start : html.index("</code>", start)]
    token = ApiToken.objects.get()
    assert token.digest == token_digest(secret)
    assert token.scopes == ["read", "submit"]
    assert token.created_by == "root"
    # The token authenticates; the account, in no group yet, may not read.
    assert error_of(Api(secret).get("/runs")) == "permission_denied"
    for page in (
        "/admin/api/apitoken/",
        f"/admin/api/apitoken/{token.pk}/change/",
        f"/admin/api/serviceaccount/{account.pk}/change/",
    ):
        shown = admin.get(page)
        assert shown.status_code == 200
        assert secret not in shown.content.decode()
        assert token.shown in shown.content.decode()


def test_a_token_needs_a_scope(admin: Client) -> None:
    admin.post("/admin/api/serviceaccount/add/", {"name": "ci", "active": "on", **INLINE})
    response = admin.post(
        "/admin/api/apitoken/add/", {"account": ServiceAccount.objects.get().pk, "scopes": []}
    )
    assert response.status_code == 200
    assert not ApiToken.objects.exists()


def test_revoke_from_the_admin(admin: Client, world: Any) -> None:
    admin.post("/admin/api/serviceaccount/add/", {"name": "ci", "active": "on", **INLINE})
    token = ApiToken(account=ServiceAccount.objects.get(), scopes=["read"])
    secret = token.issue()
    token.save()
    response = admin.post(
        "/admin/api/apitoken/",
        {"action": "revoke", "_selected_action": [token.pk]},
    )
    assert response.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None and token.revoked_by == "root"
    assert Api(secret).get("/runs").status_code == 401
