"""Hostile requests to every console form and endpoint that takes what a person typed.

Bodies are built byte by byte (the test client cannot send lone surrogates or broken encodings):
url-encoded, multipart, JSON, junk, oversized and with too many fields; values are malformed JSON,
NaN/Infinity, duplicate keys, deep nesting, huge numbers and bodies, NUL characters, lone
surrogates (as WTF-8 bytes), wrong types and extra fields. Every request must end below 500 with
no database error. A refusal is a 4xx with a message on the page, and changes nothing; what is
accepted was valid, and is stored clean. The tally is printed at the end of the run.

AGENTOPS_FUZZ_EXAMPLES sets the examples per test (default 150; `make soak` runs 2,000). The
gaps this fuzzing found are pinned by regression tests at the end.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any
from urllib.parse import quote_from_bytes, urlsplit

import pytest
from django.db import transaction
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentops.api.models import ApiToken
from runtime import jsonvalues
from runtime.models import (
    AgentVersion,
    ApprovalVote,
    BulkJob,
    Event,
    Interaction,
    Operation,
    Run,
    Session,
    WorkItem,
)
from tests.api.conftest import make_account
from tests.fuzz.conftest import TALLY
from tests.fuzz.strategies import json_texts, nasty_text
from tests.support import personas
from tests.support.personas import logged_in

EXAMPLES = int(os.environ.get("AGENTOPS_FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)
# What a page says when it refuses: a form's or an action's error, or the error page's card.
MESSAGES = (
    'class="error',
    'role="alert"',
    'class="card problem"',
    'class="errorlist',
)
BOUNDARY = "fuzzBoundary7MA4YWxkTrZu0gW"
DATA_MAX = 2_621_440  # Django's DATA_UPLOAD_MAX_MEMORY_SIZE

# --- hostile values and bodies -------------------------------------------------------------------

values = st.one_of(
    nasty_text,
    json_texts,
    st.sampled_from(
        [
            "approve",
            "reject",
            "APPROVE",
            "approve\x00",
            " reject ",
            "true",
            "1",
            "-0",
            "1e309",
            "NaN",
            "-Infinity",
            "[]",
            "{}",
            "[" * 3000,
            "9" * 4400,
            '{"receipt_id": "rcpt-1"}',
            '{"receipt_id": 5}',
            '{"receipt_id": "rcpt-1", "extra": true}',
            '{"receipt_id": "rcpt-1", "receipt_id": "rcpt-2"}',
            "step-1/tool/toolu_01_0",
            "step-1/model",
            "result",
            "not_run_again",
            "not_run_tell_model",
            "retry",
            "pause",
            "resume",
            "cancel",
            "on",
            "queued",
            "needs_attention",
            "00000000-0000-0000-0000-000000000000",
            "2024-01-01T00:00:00+00:00|00000000-0000-0000-0000-000000000000",
            "x" * 70_000,
        ]
    ),
    st.integers(min_value=-(2**80), max_value=2**80).map(str),
    st.floats().map(repr),
)


def _bytes(text: str) -> bytes:
    # WTF-8: a lone surrogate goes out as the bytes a broken client would send.
    return text.encode("utf-8", "surrogatepass")


def _pct(text: str) -> str:
    return quote_from_bytes(_bytes(text), safe="")


def urlencoded(pairs: list[tuple[str, str]]) -> bytes:
    return "&".join(f"{_pct(k)}={_pct(v)}" for k, v in pairs).encode("ascii")


def multipart(pairs: list[tuple[str, str]]) -> bytes:
    parts = []
    for name, value in pairs:
        quoted = _bytes(name).replace(b'"', b"%22").replace(b"\r", b"").replace(b"\n", b"")
        parts.append(
            b"--" + BOUNDARY.encode() + b'\r\nContent-Disposition: form-data; name="' + quoted
        )
        parts.append(b'"\r\n\r\n' + _bytes(value) + b"\r\n")
    return b"".join(parts) + b"--" + BOUNDARY.encode() + b"--\r\n"


MULTIPART = f"multipart/form-data; boundary={BOUNDARY}"
FORM = "application/x-www-form-urlencoded"
SPECIAL_BODIES = [
    (b"", FORM),
    (b"%", FORM),
    (b"a=%zz&=&&=x&%ff%fe=%ed%a0%80", FORM),
    (b"\xff\xfe\x00\x01", FORM),
    (b"decision=approve&" * 1001, FORM),  # more fields than Django accepts
    (b"reason=" + b"x" * (DATA_MAX + 10), FORM),  # larger than Django accepts
    (b"--" + BOUNDARY.encode() + b"\r\nContent-Disposition: form-data", MULTIPART),
    (b"garbage", "multipart/form-data"),  # no boundary
    (b"garbage", "multipart/form-data; boundary="),
    (b'{"decision": "approve", "decision": "reject"}', "application/json"),
    (b'{"answer": NaN}', "application/json"),
    (b"<xml/>", "text/xml"),
]


@st.composite
def bodies(draw: Any, fields: list[str]) -> tuple[bytes, str]:
    """A request body with `fields` (and others, repeated or missing), in some encoding."""
    names = st.one_of(st.sampled_from([*fields, "csrfmiddlewaretoken", "status", "pk"]), nasty_text)
    pairs = draw(st.lists(st.tuples(names, values), max_size=8))
    if draw(st.booleans()):  # the real fields, each once, most of the time
        pairs = [(name, draw(values)) for name in fields] + pairs[:2]
    encoding = draw(st.sampled_from(["form", "form", "form", "multipart", "json", "special"]))
    if encoding == "form":
        return urlencoded(pairs), FORM
    if encoding == "multipart":
        return multipart(pairs), MULTIPART
    if encoding == "json":
        text = "{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in pairs) + "}"
        return _bytes(text), "application/json"
    return draw(st.sampled_from(SPECIAL_BODIES))


@st.composite
def queries(draw: Any, fields: list[str]) -> str:
    """A query string of `fields` (and others) with hostile values, percent-encoded as bytes."""
    names = st.one_of(st.sampled_from([*fields, "page", "hx"]), nasty_text)
    pairs = draw(st.lists(st.tuples(names, values.filter(lambda v: len(v) < 9000)), max_size=7))
    return urlencoded(pairs).decode("ascii")


segments = st.one_of(nasty_text.filter(lambda t: len(t) < 500), st.sampled_from(["clerk", "1"]))

# --- judging a response --------------------------------------------------------------------------


def snapshot() -> tuple[Any, ...]:
    """Everything a console request may change."""
    return (
        list(Run.objects.order_by("pk").values_list("pk", "status", "fence", "updated_at")),
        list(Operation.objects.order_by("pk").values_list("pk", "status", "result", "attempts")),
        list(Interaction.objects.order_by("pk").values_list("pk", "status", "response")),
        list(Event.objects.order_by("pk").values_list("pk")),
        list(AgentVersion.objects.order_by("pk").values_list("pk", "unregistered_at")),
        Session.objects.count(),
        list(WorkItem.objects.order_by("pk").values_list("pk", "claimed_by", "arguments")),
        list(ApprovalVote.objects.order_by("pk").values_list("pk")),
        list(BulkJob.objects.order_by("pk").values_list("pk", "status")),
        list(ApiToken.objects.order_by("pk").values_list("pk", "scopes")),
    )


def stored_cleanly() -> None:
    """What an accepted request stored, both databases can keep as it is."""
    for data in Event.objects.values_list("data", flat=True):
        jsonvalues.check(data)
    for response in Interaction.objects.exclude(response=None).values_list("response", flat=True):
        jsonvalues.check(response)
    for result in Operation.objects.exclude(result=None).values_list("result", flat=True):
        jsonvalues.check(result)


def send(
    client: Client,
    method: str,
    path: str,
    body: bytes = b"",
    content_type: str = FORM,
    *options: bool,
) -> Any:
    """The response; a database error fails the test (it would be a 500)."""
    headers = {"HTTP_HX_REQUEST": "true"} if options and options[0] else {}
    # A savepoint: a database error inside the request must not abort the test's transaction.
    with transaction.atomic():
        if method == "GET":
            return client.get(path, **headers)
        return client.post(path, data=body, content_type=content_type, **headers)


def judge(
    endpoint: str,
    response: Any,
    before: tuple[Any, ...],
    *,
    may_change: bool,
) -> bool:
    """Assert the rules for one response; True when it changed the database (it was valid)."""
    TALLY[f"endpoint {endpoint}"] += 1
    if response.status_code >= 500:
        TALLY["500"] += 1
    assert response.status_code < 500
    changed = snapshot() != before
    if response.status_code >= 400:
        assert not changed, f"{endpoint}: refused with {response.status_code}, yet it changed"
        html = response.content.decode("utf-8", "replace")
        said = any(marker in html for marker in MESSAGES)
        assert said, (endpoint, response.status_code, html)
        TALLY["refused"] += 1
        return False
    if changed:
        assert may_change, f"{endpoint}: changed the database with {response.status_code}"
        stored_cleanly()
        TALLY["accepted"] += 1
    return changed


# --- the forms -----------------------------------------------------------------------------------


class Target:
    """The object a form acts on; replaced by a fresh one once a valid input used it up."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self.current = make()

    def renew(self) -> None:
        self.current = self._make()


@pytest.fixture
def operator(as_user: Callable[[str], Client]) -> Client:
    return as_user("operator")


@FUZZ
@given(body=bodies(["decision", "reason"]), htmx=st.booleans())
def test_the_approval_form_refuses_hostile_input(world, operator, body, htmx):
    target = getattr(world, "_approval", None) or Target(
        lambda: world.pending(world.run("waiting"))
    )
    world._approval = target
    before = snapshot()
    response = send(operator, "POST", f"/interactions/{target.current.pk}/respond/", *body, htmx)
    if judge("respond (approve/reject)", response, before, may_change=True):
        target.renew()


@FUZZ
@given(body=bodies(["answer"]), htmx=st.booleans())
def test_the_answer_form_refuses_hostile_input(world, operator, body, htmx):
    target = getattr(world, "_question", None) or Target(
        lambda: world.pending(world.run("question"))
    )
    world._question = target
    before = snapshot()
    response = send(operator, "POST", f"/interactions/{target.current.pk}/respond/", *body, htmx)
    if judge("respond (answer)", response, before, may_change=True):
        target.renew()


@FUZZ
@given(body=bodies(["operation_key", "outcome", "result", "evidence"]), htmx=st.booleans())
def test_the_reconcile_form_refuses_hostile_input(world, operator, body, htmx):
    target = getattr(world, "_blocked", None) or Target(lambda: world.run("blocked"))
    world._blocked = target
    before = snapshot()
    response = send(operator, "POST", f"/runs/{target.current.pk}/resolve/", *body, htmx)
    if judge("resolve (result, or did not happen)", response, before, may_change=True):
        target.renew()


@FUZZ
@given(body=bodies(["reason"]), htmx=st.booleans(), finished=st.booleans())
def test_the_cancel_form_refuses_hostile_input(world, operator, body, htmx, finished):
    if finished:  # a completed run: whatever the reason, cancel is refused
        run = getattr(world, "_completed", None) or world.run("completed")
        world._completed = run
        before = snapshot()
        response = send(operator, "POST", f"/runs/{run.pk}/cancel/", *body, htmx)
        judge("cancel", response, before, may_change=False)
        return
    target = getattr(world, "_cancellable", None) or Target(lambda: world.run("waiting"))
    world._cancellable = target
    before = snapshot()
    response = send(operator, "POST", f"/runs/{target.current.pk}/cancel/", *body, htmx)
    if judge("cancel", response, before, may_change=True):
        target.renew()


@FUZZ
@given(body=bodies(["reason", "now"]), htmx=st.booleans(), ident=st.one_of(st.none(), segments))
def test_the_retry_button_refuses_hostile_requests(world, operator, body, htmx, ident):
    run = getattr(world, "_waiting", None) or world.run("waiting")
    world._waiting = run  # a waiting run cannot be retried, whatever the request holds
    path = f"/runs/{run.pk if ident is None else _pct(ident)}/retry/"
    before = snapshot()
    response = send(operator, "POST", path, *body, htmx)
    judge("retry", response, before, may_change=False)


@FUZZ
@given(
    query=queries(["status", "agent", "version", "session", "q", "before", "after"]),
    htmx=st.booleans(),
)
def test_the_runs_list_refuses_hostile_filters(world, operator, query, htmx):
    if not getattr(world, "_some", None):
        world._some = [world.run(state) for state in ("waiting", "completed", "failed")]
    before = snapshot()
    response = send(operator, "GET", f"/runs/?{query}", b"", FORM, htmx)
    judge("runs list filters and search", response, before, may_change=False)


@FUZZ
@given(query=queries(["actor", "kind", "run", "before", "after"]), htmx=st.booleans())
def test_the_audit_log_refuses_hostile_filters(world, operator, query, htmx):
    if not getattr(world, "_some", None):
        world._some = [world.run(state) for state in ("cancelled", "waiting")]
    before = snapshot()
    response = send(operator, "GET", f"/audit/?{query}", b"", FORM, htmx)
    judge("audit filters", response, before, may_change=False)


# --- the approval policy's forms, run surgery and bulk jobs ---------------------------------------


@FUZZ
@given(
    body=bodies(["arg-order_id", "arg-amount_cents", "reason"]),
    htmx=st.booleans(),
    then_approve=st.booleans(),
)
def test_the_argument_edit_and_its_approval_refuse_hostile_input(
    world, operator, body, htmx, then_approve
):
    """Edit the arguments of a pending approval, then (sometimes) approve what was edited."""
    target = getattr(world, "_editable", None) or Target(
        lambda: world.pending(world.run("waiting"))
    )
    world._editable = target
    before = snapshot()
    path = f"/interactions/{target.current.pk}/edit/"
    judge("edit arguments", send(operator, "POST", path, *body, htmx), before, may_change=True)
    if then_approve:
        before = snapshot()
        path = f"/interactions/{target.current.pk}/respond/"
        approve = urlencoded([("decision", "approve")])
        if judge("approve edited arguments", send(operator, "POST", path, approve, FORM, htmx),
                 before, may_change=True):  # fmt: skip
            target.renew()


@FUZZ
@given(
    verb=st.sampled_from(["claim", "release", "assign"]),
    body=bodies(["assignee"]),
    htmx=st.booleans(),
)
def test_the_claim_buttons_refuse_hostile_input(world, operator, verb, body, htmx):
    interaction = getattr(world, "_claimable", None) or world.pending(world.run("waiting"))
    world._claimable = interaction
    before = snapshot()
    response = send(operator, "POST", f"/interactions/{interaction.pk}/{verb}/", *body, htmx)
    judge(f"claims ({verb})", response, before, may_change=True)


@FUZZ
@given(
    verb=st.sampled_from(["pause", "resume"]),
    body=bodies(["reason"]),
    htmx=st.booleans(),
    ident=st.one_of(st.none(), segments),
)
def test_pause_and_resume_refuse_hostile_input(world, operator, verb, body, htmx, ident):  # noqa: PLR0917
    target = getattr(world, "_pausable", None) or Target(lambda: world.run("waiting"))
    world._pausable = target
    path = f"/runs/{target.current.pk if ident is None else _pct(ident)}/{verb}/"
    before = snapshot()
    judge(verb, send(operator, "POST", path, *body, htmx), before, may_change=True)


@FUZZ
@given(query=queries(["at", "version", "input", "acknowledge"]), htmx=st.booleans())
def test_the_fork_preview_refuses_hostile_input(world, operator, query, htmx):
    run = getattr(world, "_forkable", None) or world.run("completed")
    world._forkable = run
    before = snapshot()
    response = send(operator, "GET", f"/runs/{run.pk}/fork/?{query}", b"", FORM, htmx)
    judge("fork preview", response, before, may_change=False)


@FUZZ
@given(body=bodies(["at", "version", "input", "acknowledge", "start"]), htmx=st.booleans())
def test_the_fork_start_refuses_hostile_input(world, operator, body, htmx):
    run = getattr(world, "_forkable", None) or world.run("completed")
    world._forkable = run
    before = snapshot()
    response = send(operator, "POST", f"/runs/{run.pk}/fork/start/", *body, htmx)
    judge("fork start", response, before, may_change=True)


BULK_FIELDS = ["status", "agent", "version", "created_from", "created_to", "error", "tool"]


@FUZZ
@given(query=queries(BULK_FIELDS), htmx=st.booleans())
def test_the_bulk_preview_refuses_hostile_filters(world, operator, query, htmx):
    if not getattr(world, "_bulk_some", None):
        world._bulk_some = [world.run(state) for state in ("failed", "waiting")]
    before = snapshot()
    response = send(operator, "GET", f"/runs/bulk/?{query}", b"", FORM, htmx)
    judge("bulk preview", response, before, may_change=False)


@FUZZ
@given(body=bodies([*BULK_FIELDS, "action", "key", "reason"]), htmx=st.booleans())
def test_the_bulk_start_refuses_hostile_input(world, operator, body, htmx):
    if not getattr(world, "_bulk_some", None):
        world._bulk_some = [world.run(state) for state in ("failed", "waiting")]
    before = snapshot()
    response = send(operator, "POST", "/runs/bulk/start/", *body, htmx)
    judge("bulk start", response, before, may_change=True)


@FUZZ
@given(ident=segments, body=bodies([]), htmx=st.booleans())
def test_the_bulk_stop_refuses_hostile_ids(world, operator, ident, body, htmx):
    before = snapshot()
    response = send(operator, "POST", f"/bulk/{_pct(ident)}/stop/", *body, htmx)
    judge("bulk stop", response, before, may_change=False)


@FUZZ
@given(body=bodies(["account", "label", "scopes", "_save"]))
def test_the_token_creation_refuses_hostile_input(world, body):
    """The admin's token form: a form error (200) or a new token; never a 500."""
    admin = getattr(world, "_root", None)
    if admin is None:
        admin = world._root = logged_in(personas.superuser("root"))
        world._account = make_account("fuzzed")
    before = snapshot()
    response = send(admin, "POST", "/admin/api/apitoken/add/", *body)
    judge("admin token creation", response, before, may_change=True)


# --- the versions admin and board ----------------------------------------------------------------


@pytest.fixture
def agent_admin(world) -> Client:
    return logged_in(personas.agent_admin("ada"))


@FUZZ
@given(
    body=bodies(["action", "_selected_action", "next", "index", "select_across"]),
    keys=st.lists(st.one_of(segments, st.sampled_from(["chatty:1", "approvals:1", "x:1"]))),
    action=st.sampled_from(["register", "unregister", "", "delete_selected", "\x00"]),
    next_url=st.sampled_from(["", "//evil.example/", "https://evil.example/x", "/admin/", "\\\\x"]),
)
def test_the_version_actions_refuse_hostile_input(world, agent_admin, body, keys, action, next_url):  # noqa: PLR0917
    """Register/unregister: a redirect with a message, or a 4xx; never off-site, never a 500."""
    if not getattr(world, "_needed", None):
        world._needed = world.run("waiting")  # keeps approvals 1 needed: unregister is refused
    pairs = [("action", action), ("next", next_url)] + [("_selected_action", k) for k in keys]
    raw, content_type = (urlencoded(pairs), FORM) if keys or action else body
    before = snapshot()
    response = send(agent_admin, "POST", "/admin/agentops/agentversion/", raw, content_type)
    changed = judge("admin register/unregister", response, before, may_change=True)
    if response is not None and response.status_code == 302:
        target = urlsplit(response["Location"])
        assert not target.netloc and not target.scheme, response["Location"]
        shown = [m.level_tag for m in response.wsgi_request._messages]
        assert shown, "the action said nothing"
        assert changed or set(shown) & {"error", "warning"}


@FUZZ
@given(agent=segments, version=segments)
def test_the_version_pages_refuse_hostile_names(world, agent_admin, agent, version):
    path = f"/admin/agentops/agentversion/version/{_pct(agent)}/{_pct(version)}/"
    before = snapshot()
    response = send(agent_admin, "GET", path)
    judge("admin version page", response, before, may_change=False)


@FUZZ
@given(agent=segments, version=segments, body=bodies([]), htmx=st.booleans())
def test_the_board_retry_refuses_hostile_names(world, operator, agent, version, body, htmx):  # noqa: PLR0917
    path = f"/versions/{_pct(agent)}/{_pct(version)}/retry/"
    before = snapshot()
    response = send(operator, "POST", path, *body, htmx)
    judge("versions board retry", response, before, may_change=False)


# --- the login form ------------------------------------------------------------------------------


@FUZZ
@given(body=bodies(["username", "password", "next"]))
def test_the_login_form_refuses_hostile_input(world, body):
    """A failed login shows the form again (200) or, after repeated failures, the lockout."""
    before = snapshot()
    response = send(Client(), "POST", "/accounts/login/", *body)
    TALLY["endpoint login"] += 1
    if response.status_code >= 500:
        TALLY["500"] += 1
    assert response.status_code in (200, 400, 403, 429)
    assert snapshot() == before
    assert "_auth_user_id" not in response.wsgi_request.session
    TALLY["refused"] += 1


# --- what this fuzzing found, pinned -------------------------------------------------------------


def test_a_refused_cancel_of_a_finished_run_says_why(world, operator):
    run = world.run("completed")
    response = operator.post(f"/runs/{run.pk}/cancel/", {"reason": "a\x00b"})
    assert response.status_code == 400
    assert "NUL" in response.content.decode() or "Null characters" in response.content.decode()


@pytest.mark.parametrize(("key", "status"), [("", 400), ("step-9/tool/x", 409)])
def test_a_resolve_of_another_operation_says_which_one_is_blocked(world, operator, key, status):
    run = world.run("blocked")
    data = {"operation_key": key, "result": '{"receipt_id": "r"}', "evidence": "seen"}
    response = operator.post(f"/runs/{run.pk}/resolve/", data)
    assert response.status_code == status
    html = response.content.decode()
    assert 'class="error' in html
    assert "This run is not blocked on an uncertain operation" not in html


@pytest.mark.parametrize(
    "method, path, data",
    [
        ("GET", "/admin/agentops/agentversion/version/a%00/1/", None),
        ("POST", "/versions/a%00/1/retry/", {}),
        ("GET", "/runs/{run}/reconcile/?key=a%00", None),
        (
            "POST",
            "/runs/{run}/resolve/",
            {"operation_key": "a\x00", "result": "{}", "evidence": "e"},
        ),
    ],
    ids=["admin version page", "board retry", "reconcile page", "resolve"],
)
def test_a_nul_in_a_name_or_key_is_not_a_server_error(  # noqa: PLR0917
    world, users, agent_admin, method, path, data
):
    run = world.run("blocked")
    client = agent_admin if path.startswith("/admin/") else Client()
    if client is not agent_admin:
        client.force_login(users["operator"])
    with transaction.atomic():
        if method == "GET":
            response = client.get(path.format(run=run.pk))
        else:
            response = client.post(path.format(run=run.pk), data)
    assert response.status_code == 400
    html = response.content.decode()
    assert any(marker in html for marker in MESSAGES), html


def test_a_refused_release_says_why(world, operator, as_user):
    """Found by the claims fuzzing: a refused claim, release or assign answered 409 with no
    message (the view passed it, no template showed it)."""
    interaction = world.pending(world.run("waiting"))
    as_user("approver").post(f"/interactions/{interaction.pk}/claim/")
    before = snapshot()
    for htmx in ({}, {"HTTP_HX_REQUEST": "true"}):
        response = operator.post(f"/interactions/{interaction.pk}/release/", **htmx)
        assert response.status_code == 409
        assert 'role="alert"' in response.content.decode()
    assert snapshot() == before
