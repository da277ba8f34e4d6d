"""A rejection counts against PydanticAI's own retry budget, as the tool's failure would
have: a run whose model keeps calling a tool whose breaker is open ends where it ends
without otel-breaker, never at ``request_limit``. And ``Agent.iter`` is a run: a sub-agent
a tool runs joins it, a new ``run_sync`` starts clean."""

from __future__ import annotations

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelRetry, ToolFailed, UnexpectedModelBehavior
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from status_prompt import breaker_settings

from otel_breaker.runs import current_run


class Stubborn:
    """A model that calls ``tool`` on every request, up to ``calls`` times, then answers."""

    def __init__(self, tool: str, calls: int = 60) -> None:
        self.tool = tool
        self.calls = calls
        self.requests = 0

    def respond(self, messages: list, info: AgentInfo) -> ModelResponse:
        self.requests += 1
        if self.requests > self.calls:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart(self.tool, {"x": self.requests}, tool_call_id=f"c{self.requests}")])


def _retrying(x: int) -> str:
    """Always asks the model to try again."""
    raise ModelRetry("backend down, try again")


def _failing(x: int) -> str:
    """Always fails, which PydanticAI hands the model without charging a retry."""
    raise ToolFailed("backend down")


def _requests(fn, retries: int, calls: int = 60) -> tuple[int, str]:
    """(model requests, how the run ended) for one run of the stubborn model (its calls
    within PydanticAI's default ``request_limit`` of 50, or past it)."""
    model = Stubborn(fn.__name__, calls)
    agent = Agent(FunctionModel(model.respond), retries=retries)
    agent.tool_plain(name=fn.__name__)(fn)
    try:
        agent.run_sync("go")
    except UnexpectedModelBehavior as exc:
        return model.requests, type(exc).__name__
    return model.requests, "done"


@pytest.mark.parametrize("retries", [1, 2])
@pytest.mark.parametrize("threshold", ["1", "2"])
def test_an_open_tool_takes_no_more_requests_than_without_us(retries: int, threshold: str, instrument) -> None:
    without = _requests(_retrying, retries)
    assert without == (retries + 1, "UnexpectedModelBehavior")
    breaker_settings(failure_threshold=threshold, recovery_timeout="600", count_model_retry="true")
    instrument("pydantic_ai")
    opening = _requests(_retrying, retries)  # this run opens the breaker
    assert opening[1] == "UnexpectedModelBehavior" and opening[0] <= without[0]
    rejected = _requests(_retrying, retries)  # every call of this one is rejected
    assert rejected[1] == "UnexpectedModelBehavior" and rejected[0] <= without[0], rejected


def test_a_tool_failed_tool_is_charged_nothing_as_without_us(instrument) -> None:
    without = _requests(_failing, 1, calls=20)
    assert without == (21, "done")
    breaker_settings(failure_threshold="1", recovery_timeout="600", run_rejections="off")
    instrument("pydantic_ai")
    assert _requests(_failing, 1, calls=20) == without


def test_a_sub_agent_a_tool_runs_joins_the_run_and_each_run_sync_is_new(instrument) -> None:
    instrument("pydantic_ai")
    seen: list = []

    def inner_model(messages: list, info: AgentInfo) -> ModelResponse:
        seen.append(("inner", current_run()))
        return ModelResponse(parts=[TextPart("inner done")])

    inner = Agent(FunctionModel(inner_model), name="inner")

    async def ask(x: int) -> str:
        """Asks the inner agent."""
        seen.append(("tool", current_run()))
        return (await inner.run("sub")).output

    outer_model = Stubborn("ask", calls=1)
    outer = Agent(FunctionModel(outer_model.respond), name="outer")
    outer.tool_plain(name="ask")(ask)
    outer.run_sync("go")
    first = {place: opened for place, opened in seen}
    assert first["tool"] is not None and first["inner"] is first["tool"]
    seen.clear()
    outer_model.requests = 0
    outer.run_sync("again")
    assert seen[0][1] is not None and seen[0][1] is not first["tool"]
    assert current_run() is None
