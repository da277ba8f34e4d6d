"""An ordinary CrewAI program with a broken tool; it knows nothing about circuit breakers.

A scripted model (CrewAI's own ``BaseLLM``) asks a crew's agent, with native
function calling, to call a tool whose backend is down five times, then answers
"done". It prints one JSON line: how often the tool body ran, the tool results
the model read and the final answer.
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
os.environ.setdefault("OPENAI_API_KEY", "sk-local")

from crewai import Agent, Crew, Task
from crewai.llms.base_llm import BaseLLM
from crewai.tools import tool

BODY_RUNS = [0]
SEEN: list[str] = []


class Model(BaseLLM):
    def supports_function_calling(self) -> bool:
        return True

    def call(self, messages, tools=None, *args, **kwargs):
        SEEN[:] = [str(m.get("content")) for m in messages if m.get("role") == "tool"]
        if len(SEEN) >= 5:
            return "done"
        arguments = json.dumps({"x": len(SEEN)})
        return [
            {"id": f"call_{len(SEEN)}", "type": "function", "function": {"name": "inventory", "arguments": arguments}}
        ]


@tool("inventory")
def inventory(x: int) -> str:
    """Check the stock of product x."""
    BODY_RUNS[0] += 1
    raise ConnectionError("inventory service unreachable")


clerk = Agent(role="clerk", goal="count stock", backstory="-", llm=Model(model="scripted"), tools=[inventory])
task = Task(description="How many widgets are left?", expected_output="a number", agent=clerk)
final = Crew(agents=[clerk], tasks=[task], verbose=False).kickoff().raw
print(json.dumps({"body_runs": BODY_RUNS[0], "tool_results": SEEN, "final": final}))
