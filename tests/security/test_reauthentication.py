"""Re-authentication for a high-risk approval, on every interface that can approve.

The rule (docs/approvals.md, docs/api.md): approving a call that an approval rule marks
`high_risk` needs proof of a recent sign-in. In the console (page and htmx) that is the
person's own password, entered within AGENTOPS_REAUTH_SECONDS in this session; through the API
(and so the CLI, which speaks it) it is a token carrying the `respond_high_risk` scope beside
`respond`, whose approval is audited under its service account. Without it: refused with
`reauthentication_required`, and nothing changed. Rejecting needs no password: it is the safe
way out.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.contrib.auth.models import Group, User

from agentops.api.cli import main
from agentops.views.common import REAUTH_KEY
from runtime.models import ApprovalRule, Event, EventKind, InteractionStatus
from tests.api.conftest import Api, error_of, keep_connections, make_account, make_token
from tests.console.test_decisions import desk, refund_waiting  # noqa: F401 - the fixture
from tests.security.conftest import everything
from tests.support.personas import ensure_groups, logged_in

__all__ = ["keep_connections"]

MESSAGE = "Please refund $20 of order 1003."
PASSWORD = "olga's long password"


@pytest.fixture
def high_risk(desk: None) -> Any:  # noqa: F811 - the fixture
    """A pending refund approval that a rule marks high-risk."""
    ensure_groups()
    ApprovalRule.objects.create(
        name="refunds",
        agent="refund-desk",
        tool="refund_order",
        condition={">": [{"var": "amount_cents"}, 1000]},
        approver_group=Group.objects.get(name="operators"),
        high_risk=True,
    )
    return refund_waiting(MESSAGE)


def operator(username: str = "olga") -> User:
    user = User.objects.create(username=username)
    user.set_password(PASSWORD)
    user.save()
    user.groups.add(Group.objects.get(name="operators"))
    return user


def status_of(interaction: Any) -> str:
    interaction.refresh_from_db()
    return str(interaction.status)


@pytest.mark.parametrize("htmx", [False, True], ids=["form", "htmx"])
def test_the_console_asks_for_the_password_on_the_page_and_in_htmx(high_risk, htmx):
    client = logged_in(operator())
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    url = f"/interactions/{high_risk.pk}/respond/"
    approve = {"decision": "approve", "confirm": "yes"}
    before = everything()
    for refused in (
        approve,  # no password
        {**approve, "password": "wrong"},
        {**approve, "password": ""},
    ):
        response = client.post(url, refused, **headers)
        assert response.status_code in (400, 409), refused
        page = response.content.decode()
        assert "sign in again" in page or "The password is not right" in page
        assert everything() == before
    assert REAUTH_KEY not in client.session
    done = client.post(url, {**approve, "password": PASSWORD}, **headers)
    assert done.status_code in (200, 302)
    assert status_of(high_risk) == InteractionStatus.ANSWERED
    assert Event.objects.filter(kind=EventKind.APPROVAL_GRANTED, actor="olga").exists()


def test_another_persons_password_does_not_count(high_risk):
    other = operator("oscar")
    other.set_password("oscar's own password")
    other.save()
    client = logged_in(operator())
    before = everything()
    response = client.post(
        f"/interactions/{high_risk.pk}/respond/",
        {"decision": "approve", "confirm": "yes", "password": "oscar's own password"},
    )
    assert response.status_code == 400
    assert "The password is not right" in response.content.decode()
    assert everything() == before
    assert REAUTH_KEY not in client.session


def test_a_password_entered_too_long_ago_does_not_count(high_risk, settings):
    client = logged_in(operator())
    session = client.session
    session[REAUTH_KEY] = time.time() - settings.AGENTOPS_REAUTH_SECONDS - 1
    session.save()
    before = everything()
    response = client.post(
        f"/interactions/{high_risk.pk}/respond/", {"decision": "approve", "confirm": "yes"}
    )
    assert response.status_code == 409
    assert everything() == before
    # Within the window, the same session approves without typing it again.
    session[REAUTH_KEY] = time.time()
    session.save()
    client.post(f"/interactions/{high_risk.pk}/respond/", {"decision": "approve", "confirm": "yes"})
    assert status_of(high_risk) == InteractionStatus.ANSWERED


def test_a_reauthentication_value_forged_into_the_session_shape_is_not_trusted(high_risk):
    client = logged_in(operator())
    session = client.session
    session[REAUTH_KEY] = "9999999999"  # not a float written by the password check
    session.save()
    before = everything()
    response = client.post(
        f"/interactions/{high_risk.pk}/respond/", {"decision": "approve", "confirm": "yes"}
    )
    assert response.status_code == 409
    assert everything() == before


def test_rejecting_a_high_risk_call_needs_no_password(high_risk):
    client = logged_in(operator())
    client.post(f"/interactions/{high_risk.pk}/respond/", {"decision": "reject", "reason": "no"})
    assert status_of(high_risk) == InteractionStatus.ANSWERED


def service_account() -> Any:
    return make_account("bot", groups=("operators",))


@pytest.mark.parametrize(
    "scopes, code",
    [
        (["respond"], "reauthentication_required"),
        (["respond_high_risk"], "scope_missing"),  # the high-risk scope alone approves nothing
        (["read", "submit", "resolve", "retry", "cancel"], "scope_missing"),
    ],
)
def test_the_api_refuses_a_high_risk_approval_without_the_scope(high_risk, scopes, code):
    api = Api(make_token(service_account(), scopes))
    before = everything()
    response = api.post(f"/interactions/{high_risk.pk}/respond", {"approved": True})
    assert response.status_code in (403, 409)
    assert error_of(response) == code
    assert everything() == before


def test_the_api_approves_with_the_scope_and_audits_it_under_the_account(high_risk):
    account = service_account()
    api = Api(make_token(account, ["respond", "respond_high_risk"]))
    response = api.post(f"/interactions/{high_risk.pk}/respond", {"approved": True})
    assert response.status_code == 200, response.content
    assert status_of(high_risk) == InteractionStatus.ANSWERED
    approved = Event.objects.filter(kind=EventKind.APPROVAL_GRANTED, actor=account.actor)
    assert approved.count() == 1


def test_the_scope_does_not_lift_the_accounts_permission(high_risk):
    account = make_account("viewer-bot", groups=("viewers",))
    api = Api(make_token(account, ["respond", "respond_high_risk"]))
    before = everything()
    response = api.post(f"/interactions/{high_risk.pk}/respond", {"approved": True})
    assert response.status_code == 403
    assert error_of(response) == "permission_denied"
    assert everything() == before


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("strong", [False, True], ids=["respond", "respond+high_risk"])
def test_the_cli_follows_the_apis_rule(  # noqa: PLR0917 - fixtures
    high_risk, strong, live_server, monkeypatch, capsys, keep_connections
):
    scopes = ["read", "respond", *(["respond_high_risk"] if strong else [])]
    monkeypatch.setenv("AGENTOPS_URL", live_server.url)
    monkeypatch.setenv("AGENTOPS_TOKEN", make_token(service_account(), scopes))
    before = everything()
    status = main(["approve", str(high_risk.pk)])
    out, err = capsys.readouterr()
    if strong:
        assert status == 0, err
        assert status_of(high_risk) == InteractionStatus.ANSWERED
        return
    assert status != 0
    assert "reauthentication_required" in err or "sign in again" in err
    assert out == ""
    assert everything() == before
