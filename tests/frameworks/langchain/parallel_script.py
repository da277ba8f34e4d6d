"""An ordinary offline LangGraph agent whose first model turn asks for 8 tool calls at once
(no otel-breaker import). ToolNode runs them in parallel threads.

Prints JSON: how many tool bodies ran and what the model read back.
"""

import json
import threading
import warnings

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

warnings.filterwarnings("ignore")
from langgraph.prebuilt import ToolNode, create_react_agent  # noqa: E402

CALLS = 8
RUNS = []
_lock = threading.Lock()


@tool
def lookup(item: int) -> str:
    """Looks an item up."""
    with _lock:
        RUNS.append(item)
    return f"item {item} found"


class ScriptedModel(FakeMessagesListChatModel):
    def bind_tools(self, tools, **kwargs):
        return self


def main() -> None:
    first_turn = AIMessage(
        "", tool_calls=[{"name": "lookup", "args": {"item": i}, "id": f"call_{i}"} for i in range(CALLS)]
    )
    model = ScriptedModel(responses=[first_turn, AIMessage("done")])
    graph = create_react_agent(model, ToolNode([lookup]))
    result = graph.invoke({"messages": [HumanMessage("look up 8 items")]})
    seen = sorted(m.content for m in result["messages"] if isinstance(m, ToolMessage))
    print(json.dumps({"body_runs": len(RUNS), "tool_results": seen, "final": result["messages"][-1].content}))


if __name__ == "__main__":
    main()
