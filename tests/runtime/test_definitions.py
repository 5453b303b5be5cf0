"""Agent and tool definitions fail at definition time with a clear message."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from runtime import Agent, AgentDefinitionError, ModelRetry, ToolContext, tool
from tests.conftest import TOOLS, make_agent


class In(BaseModel):
    x: int


class Out(BaseModel):
    y: int


def test_it_reads_schemas_and_description_from_the_handler():
    @tool(recovery="safe")
    def double(args: In, ctx: ToolContext) -> Out:
        """Double a number."""
        return Out(y=args.x * 2)

    assert (double.name, double.description, double.recovery) == (
        "double",
        "Double a number.",
        "safe",
    )
    assert double.model_spec().input_schema["properties"] == {
        "x": {"title": "X", "type": "integer"}
    }
    assert double.validate_output({"y": 2}) == {"y": 2}


def test_it_rejects_an_unknown_policy():
    with pytest.raises(AgentDefinitionError, match="unknown recovery policy 'sometimes'"):

        @tool(recovery="sometimes")  # type: ignore[arg-type]
        def f(args: In, ctx: ToolContext) -> Out: ...


def test_it_rejects_a_handler_without_models():
    with pytest.raises(AgentDefinitionError, match="annotate"):

        @tool
        def f(args, ctx): ...


def test_it_rejects_duplicate_tool_names():
    with pytest.raises(AgentDefinitionError, match=r"duplicate tool names \['charge'\]"):
        Agent(name="a", version="1", model="m", instructions="", tools=[TOOLS["charge"]] * 2)


def test_it_rejects_a_policy_for_a_missing_tool():
    with pytest.raises(AgentDefinitionError, match="names missing tool 'search'"):
        Agent(name="a", version="1", model="m", instructions="", recovery={"search": "safe"})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_attempts": 0}, "max_attempts must be >= 1"),
        ({"initial_delay": 0}, "initial_delay must be > 0"),
        ({"initial_delay": 5, "max_delay": 1}, "must be >= initial_delay"),
    ],
)
def test_it_rejects_bad_retry_numbers(kwargs, message):
    with pytest.raises(AgentDefinitionError, match=message):
        ModelRetry(**kwargs)


@pytest.mark.parametrize("bad", [{"name": "has space"}, {"version": ""}, {"max_steps": 0}])
def test_it_rejects_bad_agent_fields(bad):
    fields = {"name": "a", "version": "1", "model": "m", "instructions": "", **bad}
    with pytest.raises(AgentDefinitionError):
        Agent(**fields)


def test_the_fingerprint_is_deterministic_and_covers_behaviour():
    base = make_agent([])
    assert base.fingerprint == make_agent([]).fingerprint
    assert base.fingerprint != make_agent([], instructions="Other").fingerprint
    overridden = Agent(
        name="clerk",
        version="1",
        model="claude-test",
        instructions="Help the customer.",
        tools=base.tools,
        recovery={"charge": "report"},
    )
    assert overridden.fingerprint != base.fingerprint
    assert overridden.policy_for(TOOLS["charge"]) == "report"
    # Retry numbers and the model client do not change replay behaviour.
    assert make_agent([], model_retry=ModelRetry()).fingerprint == base.fingerprint
