"""Where no tool is broken, a PydanticAI agent behaves exactly as it does without otel-breaker."""

from __future__ import annotations

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from otel_breaker.config import load_settings, set_settings


@pytest.fixture(autouse=True)
def default_threshold():
    set_settings(load_settings({"OTEL_BREAKER_RECOVERY_TIMEOUT": "600"}))


def scripted(tool: str, calls: int, args: dict) -> tuple[FunctionModel, list]:
    """Calls ``tool`` ``calls`` times, then answers with the last tool result it read."""
    seen: list = []

    def respond(messages, info: AgentInfo) -> ModelResponse:
        parts = [p for m in messages for p in getattr(m, "parts", ()) if isinstance(p, ToolReturnPart)]
        seen[:] = [(p.outcome, str(p.content)) for p in parts]
        if len(parts) < calls:
            return ModelResponse(parts=[ToolCallPart(tool, args, tool_call_id=f"c{len(parts)}")])
        return ModelResponse(parts=[TextPart(f"final: {parts[-1].content}")])

    return FunctionModel(respond), seen


def patient_agent() -> tuple[Agent, dict]:
    runs = {"n": 0}
    agent = Agent(name="patient")

    @agent.tool_plain(retries=7)
    def fetch(x: int) -> str:
        """Asks the model to retry six times, then succeeds."""
        runs["n"] += 1
        if runs["n"] <= 6:
            raise ModelRetry("not ready yet, call again")
        return "ready"

    return agent, runs


def run_patient() -> tuple[str, list]:
    agent, _ = patient_agent()
    model, seen = scripted("fetch", 7, {"x": 1})
    return agent.run_sync("go", model=model).output, list(seen)


def test_model_retry_within_the_tools_budget_is_not_a_failure(instrument, otel):
    """A tool declared with retries=7 that asks the model to retry six times then succeeds."""
    off = run_patient()
    instrument("pydantic_ai")
    on = run_patient()
    assert on == off
    assert on[0] == "final: ready"
    assert otel.metric_value("otel_breaker.calls", gen_ai_tool_name="fetch", otel_breaker_outcome="failure") == 0
    assert otel.metric_value("otel_breaker.calls.rejected", gen_ai_tool_name="fetch") == 0


def test_counting_model_retry_is_an_opt_in(instrument, otel):
    set_settings(load_settings({"OTEL_BREAKER_COUNT_MODEL_RETRY": "true"}))
    instrument("pydantic_ai")
    run_patient()
    assert otel.metric_value("otel_breaker.calls", gen_ai_tool_name="fetch", otel_breaker_outcome="failure") == 5


def test_malformed_and_unknown_calls_are_the_models_mistake(instrument, otel):
    """Arguments that fail validation and a tool name the agent does not have are
    retried by the framework and never reach a breaker."""

    def run() -> tuple[str, list]:
        agent, _ = patient_agent()

        def respond(messages, info: AgentInfo) -> ModelResponse:
            turn = sum(1 for m in messages if m.kind == "response")
            if turn == 0:
                return ModelResponse(parts=[ToolCallPart("fetch", '{"x": "not a number"', tool_call_id="bad")])
            if turn == 1:
                return ModelResponse(parts=[ToolCallPart("nope", {}, tool_call_id="unknown")])
            return ModelResponse(parts=[TextPart("gave up")])

        result = Agent.run_sync(agent, "go", model=FunctionModel(respond))
        seen = [type(p).__name__ for m in result.all_messages() for p in m.parts]
        return result.output, seen

    off = run()
    instrument("pydantic_ai")
    on = run()
    assert on == off
    assert otel.tool_spans("nope") == [] and otel.tool_spans("fetch") == []
