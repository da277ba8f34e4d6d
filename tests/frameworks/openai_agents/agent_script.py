"""An ordinary offline OpenAI Agents SDK program that knows nothing of otel-breaker.

The SDK's scripted model asks one agent for a tool whose backend is down five
times, then answers "done". It prints one JSON line: how often the tool body
ran, the tool results the model read and the final output. The zero-code tests
run it unchanged, guarded from the environment.
"""

import json

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

set_tracing_disabled(True)

BODY_RUNS = 0


@function_tool
def fetch_weather(city: str) -> str:
    """The weather for a city (its backend is down)."""
    global BODY_RUNS
    BODY_RUNS += 1
    raise ConnectionError("weather backend unreachable")


model = ScriptedModel(
    [[function_call("fetch_weather", {"city": "Oslo"}, call_id=f"call_{i}")] for i in range(1, 6)]
    + [[assistant_message("done")]]
)
agent = Agent(name="weather_agent", instructions="Answer with the weather.", model=model, tools=[fetch_weather])
result = Runner.run_sync(agent, "Weather in Oslo?")
seen = [
    item["output"]
    for item in model.calls[-1].input
    if isinstance(item, dict) and item.get("type") == "function_call_output"
]
print(json.dumps({"body_runs": BODY_RUNS, "tool_results": seen, "final": result.final_output}))
