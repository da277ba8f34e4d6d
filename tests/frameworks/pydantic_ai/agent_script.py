"""An ordinary offline PydanticAI program that knows nothing of otel-breaker.

PydanticAI's scripted model (``FunctionModel``) asks for a tool whose backend is
down five times (``ToolFailed``: the run carries on), then answers "done". It
prints one JSON line: how often the tool body ran, the tool results the model
read and the output. The zero-code tests run it unchanged, guarded from the
environment.
"""

import json

from pydantic_ai import Agent
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

BODY_RUNS = 0
SEEN = []


def scripted_model(messages, info: AgentInfo) -> ModelResponse:
    returns = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]
    if len(returns) < 5:
        return ModelResponse(
            parts=[ToolCallPart("fetch_weather", {"city": "Oslo"}, tool_call_id=f"call_{len(returns) + 1}")]
        )
    SEEN.extend(p.model_response_str() for p in returns)
    return ModelResponse(parts=[TextPart("done")])


agent = Agent(FunctionModel(scripted_model), name="weather_agent", instructions="Answer with the weather.")


@agent.tool_plain
def fetch_weather(city: str) -> str:
    """The weather for a city (its backend is down)."""
    global BODY_RUNS
    BODY_RUNS += 1
    raise ToolFailed("weather backend unreachable")


result = agent.run_sync("Weather in Oslo?")
print(json.dumps({"body_runs": BODY_RUNS, "tool_results": SEEN, "final": result.output}))
