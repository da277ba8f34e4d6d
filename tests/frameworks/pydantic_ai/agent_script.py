"""An ordinary offline PydanticAI program that knows nothing of otel-breaker.

One agent whose tool always fails (``ToolFailed``: the run carries on) is
asked for four tool calls; the script prints JSON: how often the tool body
ran, what the model read back, and the output. The zero-code tests run it
unchanged, guarded from the environment.
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
    if len(returns) < 4:
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
print(json.dumps({"body_runs": BODY_RUNS, "seen": SEEN, "final_output": result.output}))
