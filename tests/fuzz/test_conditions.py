"""The rule-condition language (runtime/conditions.py), fed hostile expressions.

Deep nesting, huge arrays, recursion-like constructs (map/reduce/filter over themselves), unknown
and code-looking operators, very long strings and type confusion. Saving such a rule is refused
with a clear reason (ConditionError, a form error in the admin, nothing saved); what passes the
check evaluates within the operation budget the library charges (its own count, not a clock);
nothing ever runs code. AGENTOPS_FUZZ_EXAMPLES sets the examples per test (default 150).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import datalogic_py
import pytest
from django.contrib.auth.models import User
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime import conditions
from runtime.conditions import BUDGET, ConditionError
from runtime.models import ApprovalRule
from tests.console.test_decisions import desk
from tests.fuzz.conftest import TALLY

__all__ = ["desk"]

EXAMPLES = int(os.environ.get("AGENTOPS_FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
SCHEMA = {
    "type": "object",
    "properties": {
        "amount_cents": {"type": "integer"},
        "order_id": {"type": "string"},
        "currency": {"enum": ["usd", "eur"]},
        "urgent": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
}
ENGINE = datalogic_py.Engine()
# Operators the language refuses, among them the library's iterators and anything that looks
# like a way out to Python.
FOREIGN = [
    "map", "reduce", "filter", "all", "some", "none", "merge", "cat", "substr", "missing",
    "missing_some", "if", "?:", "log", "method", "preserve", "throw", "try", "val", "exists",
    "eval", "exec", "__import__", "import", "open", "system", "getattr", "__class__", "+", "*",
]  # fmt: skip
KNOWN = sorted(conditions.OPERATORS)
FIELDS = [*SCHEMA["properties"], "__class__", "a.b.c", "", "0", "amount_cents.__init__"]


def literals() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=40),
        st.sampled_from(["x" * 5000, "__import__('os').system('id')", "\u202e\x00\ud800"[:2]]),
    )


def expressions() -> st.SearchStrategy[Any]:
    def wrap(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        operands = st.lists(children, max_size=5)
        return st.one_of(
            st.builds(lambda op, args: {op: args}, st.sampled_from(KNOWN + FOREIGN), operands),
            st.builds(lambda op, arg: {op: arg}, st.sampled_from(KNOWN + FOREIGN), children),
            st.builds(lambda f: {"var": f}, st.sampled_from(FIELDS)),
            st.builds(lambda f, d: {"var": [f, d]}, st.sampled_from(FIELDS), children),
            st.builds(lambda xs: {"in": [{"var": "order_id"}, xs]}, st.lists(children)),
            st.dictionaries(st.sampled_from(KNOWN), children, min_size=2, max_size=3),
            operands,
        )

    return st.recursive(literals(), wrap, max_leaves=40)


def nested(depth: int, operator: str = "!") -> dict[str, Any]:
    node: Any = {"var": "urgent"}
    for _ in range(depth):
        node = {operator: [node]}
    return node


HOSTILE = {
    "nested 13 deep": nested(13),
    "nested 300 deep": nested(300),
    "nested 50,000 deep": nested(50_000),
    "and of 10,000": {"and": [{"var": "urgent"}] * 10_000},
    "in a list of 100,000": {"in": [{"var": "order_id"}, ["o"] * 100_000]},
    "long string": {"==": [{"var": "order_id"}, "o" * 1_000_000]},
    "map over itself": {"map": [{"var": "tags"}, {"map": [{"var": ""}, {"var": ""}]}]},
    "reduce": {"reduce": [{"var": "tags"}, {"+": [{"var": "accumulator"}, 1]}, 0]},
    "unknown operator": {"os.system": ["id"]},
    "python in a var": {"var": "__class__.__mro__"},
    "type confusion": {">": [{"var": "order_id"}, 5]},
    "string against number field": {"==": [{"var": "amount_cents"}, "500"]},
    "not an operation": ["amount_cents", ">", 5],
    "two operators": {">": [{"var": "amount_cents"}, 5], "<": [{"var": "amount_cents"}, 9]},
    "a number": 5,
    "NaN": {">": [{"var": "amount_cents"}, float("nan")]},
    "a set": {"in": [{"var": "order_id"}, {"a", "b"}]},
}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_condition_is_refused_with_a_reason(name):
    with pytest.raises(ConditionError) as refused:
        conditions.check(HOSTILE[name], SCHEMA)
    assert refused.value.problems and all(problem.strip() for problem in refused.value.problems)
    TALLY["endpoint condition check (hostile catalogue)"] += 1
    TALLY["refused"] += 1


def test_evaluation_never_reaches_the_library_for_what_would_crash_it():
    """The library crashes the process on nesting some thousands deep: refused before it."""
    with pytest.raises(ConditionError, match="nested deeper"):
        conditions.matches(nested(50_000), {"urgent": True})


@FUZZ
@given(condition=expressions())
def test_the_check_refuses_or_accepts_and_what_it_accepts_runs_within_budget(condition):
    TALLY["endpoint condition check"] += 1
    try:
        conditions.check(condition, SCHEMA)
    except ConditionError as refused:
        assert refused.problems
        TALLY["refused"] += 1
        return
    TALLY["accepted"] += 1
    for arguments in ARGUMENTS:
        _result, charged = ENGINE.eval_metered(condition, arguments, BUDGET)
        assert charged <= BUDGET
        assert isinstance(conditions.matches(condition, arguments), bool)


@FUZZ
@given(condition=expressions())
def test_evaluating_anything_fails_closed_or_answers_within_budget(condition):
    """Even a condition that skipped the check: a ConditionError, or a bool within budget."""
    TALLY["endpoint condition evaluation (unchecked)"] += 1
    for arguments in ARGUMENTS:
        try:
            assert isinstance(conditions.matches(condition, arguments), bool)
        except ConditionError:
            continue
        _result, charged = ENGINE.eval_metered(condition, arguments, BUDGET)
        assert charged <= BUDGET


ARGUMENTS = [
    {"amount_cents": 1500, "order_id": "o-1", "currency": "usd", "urgent": True, "tags": ["a"]},
    {"amount_cents": -(2**63), "order_id": "", "currency": "eur", "urgent": False, "tags": []},
    {"amount_cents": 0, "order_id": "x" * 10_000, "tags": ["t"] * 1000},
]


def test_the_budget_stops_a_costly_evaluation_before_it_runs():
    """The library's own count: an iteration over a big list charges past the budget."""
    costly = {"map": [{"var": "tags"}, {"map": [{"var": ""}, {"cat": [{"var": ""}]}]}]}
    with pytest.raises(datalogic_py.DataLogicError) as over:
        ENGINE.eval_metered(costly, {"tags": [["x"] * 200] * 200}, BUDGET)
    assert "Budget" in str(over.value) or "budget" in str(over.value)
    with pytest.raises(ConditionError):  # and the language refuses it before that
        conditions.check(costly, SCHEMA)


def test_no_expression_runs_code(tmp_path: Path):
    marker = tmp_path / "ran"
    payloads = [
        {"var": f"__import__('pathlib').Path('{marker}').touch()"},
        {"==": [{"var": "order_id"}, f"{{{{ open('{marker}', 'w') }}}}"]},
        {"method": [{"var": "order_id"}, "__class__"]},
        {"eval": [f"open('{marker}','w')"]},
    ]
    for payload in payloads:
        for call in (
            lambda p=payload: conditions.check(p, SCHEMA),
            lambda p=payload: conditions.matches(p, {"order_id": "o"}),
        ):
            with contextlib.suppress(ConditionError):
                call()
    assert not marker.exists()


@pytest.fixture
def admin_client(db: None) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(User.objects.create(username="root", is_staff=True, is_superuser=True))
    return client


def save_rule(client: Client, condition: str) -> Any:
    return client.post(
        "/admin/agentops/approvalrule/add/",
        {
            "name": "hostile",
            "agent": "refund-desk",
            "tool": "refund_order",
            "condition": condition,
            "quorum": "1",
            "priority": "0",
            "on_expiry": "reject",
            "enabled": "on",
        },
    )


@pytest.mark.parametrize(
    "text, reason",
    [
        ("[" * 100_000, "nested too deeply"),  # deeper than Python's parser goes
        ('{"!": ' * 5_000 + "true" + "}" * 5_000, "nested too deeply"),
        ('{">": [{"var": "amount_cents"}, "5"]', "Enter a valid JSON"),
        ('{"!": ' * 20 + "true" + "}" * 20, "nested deeper than 12 levels"),
        ('{"map": [[1, 2], {"var": ""}]}', "the condition must be true or false"),
        ('{"os.system": ["id"]}', "the condition must be true or false"),
        ('{"==": [{"var": "__class__"}, 1]}', "__class__"),
        ('{"in": [{"var": "order_id"}, [' + ", ".join(['"o"'] * 5000) + "]]}", "larger than"),
    ],
    ids=["deep array", "deep object", "broken JSON", "deep", "map", "unknown", "var", "huge"],
)
def test_the_admin_refuses_to_save_a_bad_condition_with_a_reason(desk, admin_client, text, reason):
    response = save_rule(admin_client, text)
    assert response.status_code == 200  # the form again, not a 500
    page = response.content.decode()
    assert 'class="errorlist' in page
    assert reason in page.replace("&#x27;", "'").replace("&quot;", '"')
    assert not ApprovalRule.objects.exists()


def test_the_admin_saves_a_good_condition(desk, admin_client):
    """The refusals above are the condition's: the same form with a valid one saves."""
    response = save_rule(admin_client, '{">": [{"var": "amount_cents"}, 1000]}')
    assert response.status_code == 302, response.content[:2000]
    assert ApprovalRule.objects.get().condition == {">": [{"var": "amount_cents"}, 1000]}
