"""The one authorization matrix: each persona x each page and action, on pages, forms and htmx
endpoints; each API endpoint x each scope, and service accounts by their groups; approval rules
(approver group, four-eyes, quorum) and claims on pages, htmx and the API; the groups behind the
personas; unknown or swapped ids leak nothing. (Websockets, with the approval rules and claims
as pushed live: test_websockets.py.)

The matrix is written out in full below so that it reads as the policy it enforces.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import pytest
from django.contrib.auth.models import Group, User

from agentops.api.models import Scope
from runtime.models import ApprovalRule, ApprovalVote, Event, InteractionStatus
from runtime.testing import run_until_idle
from tests.api.conftest import ALL_SCOPES, Api, error_of, make_account, make_token
from tests.security.conftest import PERSONAS, everything
from tests.security.test_csrf import fill
from tests.support.personas import logged_in

# What differs between two renders of one page: the masked CSRF token, the server's clock.
VOLATILE = re.compile(r"[A-Za-z0-9]{64}|\d{4}-\d\d-\d\dT[\d:.]+\+00:00")
SEE = {"viewer", "approver", "reconciler", "operator", "agent_admin"}
PAGES = {
    "inbox": ("/", SEE),
    "runs": ("/runs/", SEE),
    "run": ("/runs/{waiting}/", SEE),
    "interaction": ("/interactions/{approval}/", SEE),
    "reconcile": ("/runs/{blocked}/reconcile/", SEE),
    "audit": ("/audit/", SEE),
    "version board": ("/versions/", SEE),
    "fork preview": ("/runs/{waiting}/fork/", SEE),
    "bulk preview": ("/runs/bulk/", SEE),
    "versions admin": ("/admin/agentops/agentversion/", {"agent_admin"}),
    "version admin page": ("/admin/agentops/agentversion/version/approvals/1/", {"agent_admin"}),
}
ACTIONS = {
    "approve": (
        "/interactions/{approval}/respond/",
        {"decision": "approve"},
        {"approver", "operator"},
    ),
    "answer": ("/interactions/{question}/respond/", {"answer": "o-7"}, {"approver", "operator"}),
    "resolve": (
        "/runs/{blocked}/resolve/",
        {"operation_key": "{key}", "result": '{{"receipt_id": "r-1"}}', "evidence": "ledger"},
        {"reconciler", "operator"},
    ),
    "retry": ("/runs/{failed}/retry/", {}, {"operator"}),
    "claim": ("/interactions/{to_claim}/claim/", {}, {"approver", "operator"}),
    "pause": ("/runs/{to_pause}/pause/", {"reason": "look"}, {"operator"}),
    "cancel": ("/runs/{to_cancel}/cancel/", {"reason": "no"}, {"operator"}),
    "unregister": (
        "/admin/agentops/agentversion/",
        {"action": "unregister", "_selected_action": "chatty:1"},
        {"agent_admin"},
    ),
}


@pytest.mark.parametrize("persona", [*PERSONAS, "anonymous"])
@pytest.mark.parametrize("htmx", [False, True], ids=["page", "htmx"])
def test_each_persona_sees_exactly_the_pages_it_may(personas, scene, persona, htmx):
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    client = personas(persona)
    for page, (url, allowed) in PAGES.items():
        response = client.get(fill(url, scene), **headers)
        if persona in allowed:
            assert response.status_code == 200, page
        elif persona == "anonymous" or url.startswith("/admin/"):
            assert response.status_code == 302, page  # to a login page (the admin's for its own)
            assert "login" in response["Location"]
        else:
            assert response.status_code == 403, page


@pytest.mark.parametrize("persona", [*PERSONAS, "anonymous"])
@pytest.mark.parametrize("htmx", [False, True], ids=["form", "htmx"])
def test_each_persona_does_exactly_the_actions_it_may(personas, scene, persona, htmx):
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    client = personas(persona)
    for action, (url, data, allowed) in ACTIONS.items():
        before = everything()
        form = {name: fill(value, scene) for name, value in data.items()}
        response = client.post(fill(url, scene), form, **headers)
        if persona in allowed:
            assert response.status_code in (200, 302), action
            assert everything() != before, action
            if not url.startswith("/admin/"):  # audited under the person who acted
                assert Event.objects.filter(actor=persona).exists(), action
            continue
        assert everything() == before, action
        if persona == "anonymous" or (url.startswith("/admin/") and persona != "agent_admin"):
            assert response.status_code == 302, action
            assert "login" in response["Location"]
        else:
            assert response.status_code == 403, action


def test_an_outsider_cannot_tell_a_real_id_from_a_made_up_one(personas, scene):
    outsider = personas("outsider")
    made_up = uuid.uuid4()
    for real, fake in [
        (f"/runs/{scene['waiting'].pk}/", f"/runs/{made_up}/"),
        (f"/interactions/{scene['approval'].pk}/", f"/interactions/{made_up}/"),
        (f"/runs/{scene['blocked'].pk}/reconcile/", f"/runs/{made_up}/reconcile/"),
    ]:
        first, second = outsider.get(real), outsider.get(fake)
        assert first.status_code == second.status_code == 403
        same = VOLATILE.sub("", first.content.decode()) == VOLATILE.sub("", second.content.decode())
        assert same
    for url in (f"/runs/{scene['failed'].pk}/retry/", f"/runs/{made_up}/retry/"):
        assert outsider.post(url).status_code == 403


def leaks(html: str, scene: dict[str, Any]) -> list[str]:
    """Ids and agent text of the scene's runs found in a page meant to show none of them."""
    secrets = [str(scene[name].pk) for name in ("waiting", "blocked", "failed", "completed")]
    secrets += [str(scene["approval"].pk), str(scene["question"].pk)]
    return [secret for secret in secrets if secret in html]


@pytest.mark.parametrize(
    "method, url",
    [
        ("get", "/runs/{made_up}/"),
        ("get", "/interactions/{made_up}/"),
        ("get", "/interactions/{waiting}/"),  # a run's id where an interaction's belongs
        ("get", "/runs/{approval}/"),  # and the other way round
        ("get", "/runs/{approval}/reconcile/"),
        ("post", "/interactions/{blocked}/respond/"),
        ("post", "/runs/{question}/cancel/"),
        ("post", "/runs/{approval}/retry/"),
        ("post", "/runs/{made_up}/resolve/"),
        ("get", "/admin/agentops/agentversion/version/nobody/9/"),
    ],
)
def test_unknown_or_swapped_ids_are_not_found_and_leak_nothing(personas, scene, method, url):
    client = personas("agent_admin" if "/admin/" in url else "operator")
    before = everything()
    target = url.format(
        made_up=uuid.uuid4(),
        **{name: scene[name].pk for name in ("waiting", "approval", "blocked", "question")},
    )
    response = getattr(client, method)(target, {"decision": "approve", "reason": "x"})
    assert response.status_code == 404
    assert everything() == before
    assert leaks(response.content.decode(), scene) == []


def test_a_resolve_posted_to_another_run_changes_nothing(personas, scene):
    """The blocked run's reconcile form, posted to a run that is not blocked: refused (409)."""
    before = everything()
    response = personas("operator").post(
        f"/runs/{scene['waiting'].pk}/resolve/",
        {
            "operation_key": scene["blocked"].blocked_operation,
            "result": '{"receipt_id": "r-1"}',
            "evidence": "ledger",
        },
    )
    assert response.status_code == 409
    assert everything() == before
    assert str(scene["blocked"].pk) not in response.content.decode()


def test_it_creates_the_groups_with_their_permissions(db):
    def codenames(name: str) -> set[str]:
        return set(Group.objects.get(name=name).permissions.values_list("codename", flat=True))

    view = {"view_run", "view_session", "view_operation", "view_interaction", "view_event"}
    assert codenames("viewers") == view
    assert codenames("approvers") == view | {"respond_run"}
    assert codenames("reconcilers") == view | {"resolve_run"}
    assert codenames("operators") == view | {
        "respond_run",
        "resolve_run",
        "control_run",
        "edit_arguments",
    }


# --- The API: each endpoint x each scope, and service accounts by their groups ----------------

S = Scope
# Every operation of the schema, a request to it, and the scope it needs. Targets are real
# runs of the scene (or an id that does not exist, where the verb needs a state the scene lacks).
API_CALLS: dict[tuple[str, str], tuple[Any, str]] = {
    ("GET", "/runs"): (None, S.READ),
    ("GET", "/runs/{waiting}"): (None, S.READ),
    ("GET", "/interactions"): (None, S.READ),
    ("GET", "/bulk/{nowhere}"): (None, S.READ),
    ("POST", "/runs/{waiting}/fork/preview"): ({"operation_key": "step-1/model"}, S.READ),
    ("POST", "/bulk/preview"): ({"filters": {"status": ["failed"]}}, S.READ),
    ("POST", "/runs"): ({"agent": "chatty", "message": "hi"}, S.SUBMIT),
    ("POST", "/interactions/{approval}/respond"): ({"approved": True}, S.RESPOND),
    ("POST", "/runs/{blocked}/resolve"): (
        {"operation_key": "{key}", "result": {"receipt_id": "r-1"}, "evidence": "ledger"},
        S.RESOLVE,
    ),
    ("POST", "/runs/{failed}/retry"): (None, S.RETRY),
    ("POST", "/runs/{to_cancel}/cancel"): ({"reason": "no"}, S.CANCEL),
    ("POST", "/runs/{to_pause}/pause"): ({"reason": "look"}, S.PAUSE),
    ("POST", "/runs/{nowhere}/resume"): (None, S.PAUSE),
    ("POST", "/runs/{completed}/fork"): ({"operation_key": "step-1/model"}, S.FORK),
    ("POST", "/bulk"): ({"filters": {"status": ["failed"]}, "action": "retry"}, S.BULK),
    ("POST", "/bulk/{nowhere}/stop"): (None, S.BULK),
}
# What each console group lets a service account's tokens do (the scopes it covers).
GROUP_SCOPES = {
    "viewers": {S.READ},
    "approvers": {S.READ, S.RESPOND, S.RESPOND_HIGH_RISK},
    "reconcilers": {S.READ, S.RESOLVE},
    "operators": {S.READ, S.RESPOND, S.RESPOND_HIGH_RISK, S.RESOLVE, S.RETRY, S.CANCEL}
    | {S.PAUSE, S.FORK, S.BULK},
    "submitters": {S.READ, S.SUBMIT},
}


@pytest.fixture
def unlimited(settings: Any) -> None:
    """The matrix sends more than a minute's worth of one token's rate limit (its own test)."""
    settings.AGENTOPS_API_RATE_LIMIT = 100_000


def api_call(api: Api, method: str, path: str, body: Any, scene: dict[str, Any]) -> Any:
    ids = {
        name: scene[name].pk
        for name in ("waiting", "approval", "blocked", "failed", "to_cancel", "to_pause")
    }
    ids.update(completed=scene["completed"].pk, nowhere=uuid.UUID(int=7))
    ids["key"] = scene["blocked"].blocked_operation
    target = path.format(**ids)
    if body is not None:
        body = json.loads(json.dumps(body).replace("{key}", ids["key"]))
    return api.get(target) if method == "GET" else api.post(target, body)


def test_the_api_matrix_lists_every_operation_of_the_schema(client):
    served = client.get("/api/v1/openapi.json").json()["paths"]
    operations = {
        (method.upper(), re.sub(r"\{\w+\}", "{}", path.removeprefix("/api/v1")))
        for path, methods in served.items()
        for method in methods
    }
    listed = {(method, re.sub(r"\{\w+\}", "{}", path)) for method, path in API_CALLS}
    assert listed == operations


@pytest.mark.parametrize("scope", ALL_SCOPES)
def test_each_scope_calls_exactly_its_endpoints(scene, scope, unlimited):
    account = make_account("matrix", groups=("operators", "submitters"))
    api = Api(make_token(account, [scope]))
    for (method, path), (body, needed) in API_CALLS.items():
        before = everything()
        response = api_call(api, method, path, body, scene)
        assert response.status_code < 500, (method, path)
        if scope == needed:
            assert response.status_code != 403, (method, path, response.content)
            continue
        assert response.status_code == 403, (method, path)
        assert error_of(response) == "scope_missing", (method, path)
        assert everything() == before, (method, path)


@pytest.mark.parametrize("group", GROUP_SCOPES)
def test_a_service_account_never_does_more_than_its_groups_allow(scene, group, unlimited):
    """Every scope on the token; the account's group decides (403 permission_denied)."""
    api = Api(make_token(make_account("matrix", groups=(group,)), ALL_SCOPES))
    for (method, path), (body, needed) in API_CALLS.items():
        before = everything()
        response = api_call(api, method, path, body, scene)
        assert response.status_code < 500, (method, path)
        if needed in GROUP_SCOPES[group]:
            assert response.status_code != 403, (group, method, path, response.content)
            continue
        assert response.status_code == 403, (group, method, path)
        assert error_of(response) == "permission_denied", (group, method, path)
        assert everything() == before, (group, method, path)


def test_an_account_in_no_group_reads_nothing(scene, unlimited):
    api = Api(make_token(make_account("nobody", groups=()), ALL_SCOPES))
    before = everything()
    for (method, path), (body, _needed) in API_CALLS.items():
        response = api_call(api, method, path, body, scene)
        assert response.status_code == 403, (method, path)
        assert scene["waiting"].input not in response.content.decode()
    assert everything() == before


# --- Approval rules and claims: the same answer on every interface ----------------------------

INTERFACES = ["form", "htmx", "api"]
PEOPLE = {"alice": ("approvers", "submitters"), "ann": ("approvers",), "bob": ("approvers",)}
PEOPLE["olaf"] = ("operators",)


class Desk:
    """The people of an approval rule's test, as console users or as service accounts."""

    def __init__(self, interface: str) -> None:
        self.interface = interface
        self.tokens: dict[str, str] = {}
        for name, groups in PEOPLE.items():
            if interface == "api":
                self.tokens[name] = make_token(make_account(name, groups), ["respond", "submit"])
            else:
                User.objects.create(username=name).groups.add(
                    *Group.objects.filter(name__in=groups)
                )

    def start(self, world: Any) -> Any:
        """A refund run started by alice, waiting for approval."""
        if self.interface != "api":
            return world.pending(world.run("waiting"))
        started = Api(self.tokens["alice"]).post(
            "/runs", {"agent": "approvals", "message": "please refund order A1"}
        )
        assert started.status_code in (200, 201), started.content
        return world.pending(run_until_idle(started.json()["id"]))

    def approve(self, name: str, interaction: Any) -> Any:
        if self.interface == "api":
            api = Api(self.tokens[name])
            return api.post(f"/interactions/{interaction.pk}/respond", {"approved": True})
        headers = {"HTTP_HX_REQUEST": "true"} if self.interface == "htmx" else {}
        client = logged_in(User.objects.get(username=name))
        url = f"/interactions/{interaction.pk}/respond/"
        return client.post(url, {"decision": "approve"}, **headers)


def refused(response: Any, interface: str) -> None:
    assert response.status_code == 409, response.content[:300]
    if interface == "api":
        assert error_of(response) == "approval_refused"
    else:  # the page or fragment that says no offers the refused person no Approve either
        assert 'name="decision" value="approve"' not in response.content.decode()


@pytest.mark.parametrize("interface", INTERFACES)
def test_an_approval_rule_is_enforced_alike_on_every_interface(world, interface, unlimited):
    ApprovalRule.objects.create(
        name="two approvers",
        agent="approvals",
        tool="refund",
        approver_group=Group.objects.get(name="approvers"),
        quorum=2,
        four_eyes=True,
    )
    desk = Desk(interface)
    ruled = desk.start(world)
    before = everything()
    refused(desk.approve("olaf", ruled), interface)  # an operator, not in the group
    refused(desk.approve("alice", ruled), interface)  # four-eyes: she started the run
    assert everything() == before
    assert desk.approve("ann", ruled).status_code in (200, 302)  # one of two
    desk.approve("ann", ruled)  # the same person twice is still one
    ruled.refresh_from_db()
    assert ruled.status == InteractionStatus.PENDING
    assert ApprovalVote.objects.filter(interaction=ruled).count() == 1
    assert desk.approve("bob", ruled).status_code in (200, 302)
    ruled.refresh_from_db()
    assert ruled.status == InteractionStatus.ANSWERED


@pytest.mark.parametrize("htmx", [False, True], ids=["form", "htmx"])
def test_a_claim_is_the_claimers_to_release(personas, scene, htmx):
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    url = f"/interactions/{scene['to_claim'].pk}/"
    approver, operator = personas("approver"), personas("operator")
    assert approver.post(url + "claim/", **headers).status_code in (200, 302)
    before = everything()
    # Another person can neither claim it over the holder nor release the holder's claim.
    assert operator.post(url + "claim/", **headers).status_code == 409
    assert operator.post(url + "release/", **headers).status_code == 409
    assert personas("viewer").post(url + "release/", **headers).status_code == 403
    assert everything() == before
    assert approver.post(url + "release/", **headers).status_code in (200, 302)
    assert everything() != before
