"""Thousands of hostile inputs to every verb that takes human-supplied data.

Each must end in an AgentOpsError with a clear message (never another exception or a database
error), and leave the database exactly as it was.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime import AgentOpsError, InvalidInput, cancel, jsonvalues, resolve, respond, retry, submit
from runtime.control import retry_many
from runtime.models import Event, Interaction, Operation, Run, Session
from runtime.testing import SimulatedCrash, crash_at, recover, run_until_idle
from tests.conftest import call, make_agent, one_call, say
from tests.fuzz.strategies import hostile_documents, json_texts, nasty_text

FUZZ = settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
KEY = "step-1/tool/toolu_01_0"


def snapshot() -> tuple:
    return (
        Session.objects.count(),
        list(Run.objects.order_by("pk").values_list("pk", "status", "fence", "blocked_operation")),
        list(Operation.objects.order_by("pk").values_list("pk", "status", "result")),
        list(Interaction.objects.order_by("pk").values_list("pk", "status", "response")),
        Event.objects.count(),
    )


def refused(action) -> str:
    with pytest.raises(AgentOpsError) as error:
        action()
    assert error.value.message
    return error.value.message


@pytest.fixture
def approval(define, effects):
    agent = define(make_agent(one_call("refund")))
    run = run_until_idle(submit(agent.name, "refund", actor="alice").pk)
    return run.interactions.get()


@pytest.fixture
def question(define, effects):
    agent = define(
        make_agent([call(("ask_operator", {"question": "?"}), step=1), say("ok")], name="asker")
    )
    run = run_until_idle(submit(agent.name, "hi", actor="alice").pk)
    return run.interactions.get()


@pytest.fixture
def blocked(define, effects):
    agent = define(make_agent(one_call("charge"), name="charger"))
    run = submit(agent.name, "charge", actor="alice")
    with crash_at("after_handler", tool="charge"), pytest.raises(SimulatedCrash):
        recover(run.pk)
    return recover(run.pk)


def valid_reason(reason: str) -> bool:
    """A rejection's reason the runtime must accept: storable, not blank, not too long."""
    try:
        jsonvalues.check_text(reason)
    except AgentOpsError:
        return False
    return bool(reason.strip()) and len(reason.strip()) <= 4000


@FUZZ
@given(
    response=st.one_of(
        hostile_documents,
        st.fixed_dictionaries(
            {"approved": st.one_of(st.booleans(), hostile_documents)},
            optional={"reason": hostile_documents, "extra": hostile_documents},
        ),
    )
)
def test_respond_to_an_approval_refuses_hostile_responses(approval, response):
    if (
        isinstance(response, dict)
        and isinstance(response.get("approved"), bool)
        and set(response) <= {"approved", "reason"}
        and isinstance(response.get("reason", ""), str)
        and (response["approved"] or valid_reason(response.get("reason", "")))
    ):
        return  # a valid approval or rejection; covered by the approval tests
    before = snapshot()
    refused(lambda: respond(approval.pk, response, actor="fuzz"))
    assert snapshot() == before


@FUZZ
@given(answer=st.one_of(hostile_documents, st.builds(lambda t: {"answer": t}, nasty_text)))
def test_respond_to_a_question_refuses_or_stores_cleanly(question, answer):
    before = snapshot()
    try:
        respond(question.pk, answer, actor="fuzz")
    except AgentOpsError as error:
        assert error.message
        assert snapshot() == before
    else:
        stored = Interaction.objects.get(pk=question.pk).response["answer"]
        jsonvalues.check_text(stored)
        Interaction.objects.filter(pk=question.pk).update(status="pending", response=None)
        Run.objects.filter(pk=question.run_id).update(status="waiting")


@FUZZ
@given(result=hostile_documents, evidence=nasty_text)
def test_resolve_refuses_hostile_results_and_evidence(blocked, result, evidence):
    before = snapshot()
    refused(lambda: resolve(blocked.pk, KEY, result, evidence=evidence, actor="fuzz"))
    assert snapshot() == before


@FUZZ
@given(text=json_texts)
def test_json_text_from_forms_is_parsed_strictly(text):
    try:
        value = jsonvalues.loads(text, what="result")
    except AgentOpsError as error:
        assert error.message.startswith("the result")
    else:
        jsonvalues.check(value)


@pytest.fixture
def fuzzed_agent(define):
    return define(make_agent([say("hi")], name="fuzzed"))


@FUZZ
@given(
    message=nasty_text,
    session=st.one_of(st.none(), nasty_text),
    agent=st.one_of(nasty_text, st.just("fuzzed")),
)
def test_submit_refuses_hostile_messages_sessions_and_agents(fuzzed_agent, message, session, agent):
    before = snapshot()
    try:
        run = submit(agent, message, actor="fuzz", session=session)
    except AgentOpsError as error:
        assert error.message
        assert snapshot() == before
    else:  # only the real agent with a storable message, in a new session, gets here
        assert (run.agent, session) == ("fuzzed", None)
        assert run.input == message.strip()
        jsonvalues.check_text(run.input)


# Arguments of the wrong type or that no audit can hold: what a script or an API client sends.
not_text = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
    st.lists(st.text(max_size=5), max_size=3),
    st.binary(max_size=10),
)
unstorable_text = st.one_of(
    st.text(min_size=1, max_size=20).map(lambda t: t[:10] + "\x00" + t[10:]),
    st.text(min_size=1, max_size=20).map(lambda t: t + "\ud800"),
    st.sampled_from(["\udfff", "a\udc00b"]),
)
blank_text = st.text(alphabet=" \t\n\r\u3000\u00a0", max_size=10)
hostile_actors = st.one_of(
    not_text,
    unstorable_text,
    blank_text,
    st.text(min_size=151, max_size=400).filter(lambda t: len(t.strip()) > 150),
    st.just("runtime"),
)


@pytest.fixture
def states(define, effects):
    define(
        make_agent(one_call("refund"), name="approvals"),
        make_agent(one_call("charge"), name="charger"),
        make_agent([RuntimeError("down")] * 5, name="broken"),
    )
    waiting = run_until_idle(submit("approvals", "refund", actor="alice").pk)
    run = submit("charger", "charge", actor="alice")
    with crash_at("after_handler", tool="charge"), pytest.raises(SimulatedCrash):
        recover(run.pk)
    blocked = recover(run.pk)
    failed = run_until_idle(submit("broken", "hi", actor="alice").pk)
    return {"waiting": waiting, "blocked": blocked, "failed": failed}


def typed_refusal(action) -> None:
    before = snapshot()
    with pytest.raises(InvalidInput) as error:
        action()
    assert error.value.code == "invalid_input"
    assert error.value.message
    assert snapshot() == before


# Each example tries every verb: fewer examples reach as many refusals.
FEW = settings(FUZZ, max_examples=100)


@FEW
@given(actor=hostile_actors)
def test_every_verb_refuses_hostile_actors_with_a_typed_error(states, actor):
    waiting, blocked, failed = states["waiting"], states["blocked"], states["failed"]
    interaction = waiting.interactions.get()
    for action in (
        lambda: submit("broken", "hello", actor=actor),
        lambda: submit("broken", "hello", actor=actor, session=failed.session_id),
        lambda: respond(interaction.pk, {"approved": True}, actor=actor),
        lambda: resolve(blocked.pk, KEY, {"receipt_id": "r"}, evidence="seen", actor=actor),
        lambda: resolve(blocked.pk, KEY, evidence="seen", actor=actor, outcome="not_run_again"),
        lambda: retry(failed.pk, actor=actor),
        lambda: retry_many([failed.pk], actor=actor),
        lambda: cancel(waiting.pk, actor=actor),
    ):
        typed_refusal(action)


@FEW
@given(reason=st.one_of(not_text, unstorable_text, st.text(min_size=4001, max_size=4100)))
def test_cancel_refuses_hostile_reasons_with_a_typed_error(states, reason):
    typed_refusal(lambda: cancel(states["waiting"].pk, actor="ops", reason=reason))


@FEW
@given(
    key=st.one_of(not_text, unstorable_text, blank_text),
    outcome=st.one_of(not_text, st.text(max_size=30)),
    evidence=st.one_of(not_text, unstorable_text, blank_text),
)
def test_resolve_refuses_hostile_keys_outcomes_and_evidence(states, key, outcome, evidence):
    blocked = states["blocked"]
    before = snapshot()
    with pytest.raises(AgentOpsError) as error:
        resolve(
            blocked.pk, key, {"receipt_id": "r"}, evidence=evidence, actor="ops", outcome=outcome
        )
    assert error.value.message
    assert snapshot() == before
