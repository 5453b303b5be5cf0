"""Thousands of hostile inputs to every verb that takes human-supplied data.

Each must end in an AgentOpsError with a clear message (never another exception or a database
error), and leave the database exactly as it was.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime import AgentOpsError, jsonvalues, resolve, respond, submit
from runtime.models import Event, Interaction, Operation, Run
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
        and response.get("approved") is True
        and set(response) <= {"approved", "reason"}
        and isinstance(response.get("reason", ""), str)
    ):
        return  # a valid approval; covered by the approval tests
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
