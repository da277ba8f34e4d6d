"""An ordinary PydanticAI service worker that knows nothing of otel-breaker.

Each request builds its agents anew (the usual server pattern): an agent named
``weather_agent`` whose ``fetch_weather`` tool has a dead backend, and another
agent of the same name whose ``fetch_weather`` is a *different* function that
works. Every run of the dead tool is counted in Redis (``COUNTER_KEY``), across
every worker. Prints one JSON line.
"""

import json
import os
import sys

import redis
from pydantic_ai import Agent, Tool
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

REQUESTS, CALLS = int(sys.argv[1]), int(sys.argv[2])
counter = redis.Redis.from_url(os.environ["COUNTER_URL"])
COUNTER_KEY = os.environ["COUNTER_KEY"]


def scripted_model(messages, info: AgentInfo) -> ModelResponse:
    returns = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]
    if len(returns) < CALLS:
        return ModelResponse(parts=[ToolCallPart("fetch_weather", {"city": "Oslo"}, tool_call_id=f"c{len(returns)}")])
    return ModelResponse(parts=[TextPart(json.dumps([p.model_response_str() for p in returns]))])


def dead_fetch_weather(city: str) -> str:
    """The weather for a city (its backend is down)."""
    counter.incr(COUNTER_KEY)
    raise ToolFailed("weather backend unreachable")


def cached_fetch_weather(city: str) -> str:
    """The weather for a city, from a cache that works."""
    return f"sunny in {city}"


dead_results, healthy_results = [], []
for _request in range(REQUESTS):
    dead = Agent(
        FunctionModel(scripted_model), name="weather_agent", tools=[Tool(dead_fetch_weather, name="fetch_weather")]
    )
    dead_results.append(json.loads(dead.run_sync("Weather?").output))
    healthy = Agent(
        FunctionModel(scripted_model), name="weather_agent", tools=[Tool(cached_fetch_weather, name="fetch_weather")]
    )
    healthy_results.append(json.loads(healthy.run_sync("Weather?").output))
print(json.dumps({"dead": dead_results, "healthy": healthy_results}))
