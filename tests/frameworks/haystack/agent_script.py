"""An ordinary offline Haystack program, with no breaker code in it.

Haystack's MockChatGenerator asks an Agent to call a tool whose backend is down
five times, then answers "done". It prints one JSON line: how often the tool
body ran, the tool results the model read and the final answer.
"""

import json
import os

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

from haystack.components.agents import Agent
from haystack.components.generators.chat.mock import MockChatGenerator
from haystack.dataclasses import ChatMessage, ToolCall
from haystack.tools import create_tool_from_function

BODY_RUNS = [0]
SEEN = []


def inventory(x: int) -> str:
    """Looks up the stock of product x."""
    BODY_RUNS[0] += 1
    raise ConnectionError("inventory service unreachable")


def model(messages):
    results = [str(m.tool_call_result.result) for m in messages if m.tool_call_result is not None]
    SEEN[:] = results
    if len(results) < 5:
        return ChatMessage.from_assistant(tool_calls=[ToolCall(tool_name="inventory", arguments={"x": len(results)})])
    return ChatMessage.from_assistant("done")


def main():
    agent = Agent(chat_generator=MockChatGenerator(response_fn=model), tools=[create_tool_from_function(inventory)])
    final = agent.run(messages=[ChatMessage.from_user("check the stock")])["messages"][-1].text
    print(json.dumps({"body_runs": BODY_RUNS[0], "tool_results": SEEN, "final": final}))


if __name__ == "__main__":
    main()
