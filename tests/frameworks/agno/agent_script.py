"""An ordinary offline Agno program, with no breaker code in it.

A scripted OpenAI-compatible model on 127.0.0.1 asks an Agent to call a tool
whose backend is down five times, then answers "done". It prints one JSON
line: how often the tool body ran, the tool results the model read and the
final answer.
"""

import json
import os
import sys

os.environ.setdefault("AGNO_TELEMETRY", "false")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from agno.agent import Agent
from agno.models.openai import OpenAIChat
from scripted_openai import ScriptedOpenAI

BODY_RUNS = [0]


def inventory(x: int) -> str:
    """Looks up the stock of product x."""
    BODY_RUNS[0] += 1
    raise ConnectionError("inventory service unreachable")


def main():
    server = ScriptedOpenAI().start()
    try:
        model_id = server.script([("inventory", {"x": i}) for i in range(5)] + ["done"])
        model = OpenAIChat(id=model_id, base_url=server.base_url, api_key="sk-local")
        agent = Agent(name="shop", model=model, tools=[inventory])
        final = agent.run("check the stock").content
        results = server.sent_by_model[model_id][-1][1]
    finally:
        server.stop()
    print(json.dumps({"body_runs": BODY_RUNS[0], "tool_results": results, "final": final}))


if __name__ == "__main__":
    main()
