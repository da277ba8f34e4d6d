"""An ordinary CrewAI program with a broken tool; it knows nothing about circuit breakers.

Two crews run against the scripted model, one with native function calling and
one on the ReAct text path, each asking for the tool four times. It prints one
JSON line: how often the tool body ran and what the model read.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
os.environ.setdefault("OPENAI_API_KEY", "sk-local")

from crewai import Agent, Crew, Task
from crewai.tools import tool
from scripted_llm import ScriptedLLM

runs = {"native": 0, "react": 0}
path = "native"


@tool("inventory")
def inventory(q: str) -> str:
    """Check the inventory service."""
    runs[path] += 1
    raise ConnectionError("inventory service unreachable")


result = {"runs": runs}
for path in ("native", "react"):
    llm = ScriptedLLM(model="scripted", native=path == "native", tool_name="inventory", calls=4)
    clerk = Agent(role=f"{path} clerk", goal="count stock", backstory="-", llm=llm, tools=[inventory], verbose=False)
    task = Task(description="How many widgets are left?", expected_output="a number", agent=clerk)
    output = Crew(agents=[clerk], tasks=[task], verbose=False).kickoff()
    result[f"{path}_seen"] = llm.seen
    result[f"{path}_output"] = output.raw

print("RESULT " + json.dumps(result))
