"""An ordinary offline LangGraph agent whose tool always fails (no otel-breaker import).

Prints JSON: how often the tool body ran and what the model read back.
"""

import json
import warnings

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

warnings.filterwarnings("ignore")
from langgraph.prebuilt import ToolNode, create_react_agent  # noqa: E402

BODY_RUNS = 0


@tool
def weather(city: str) -> str:
    """Looks up the weather."""
    global BODY_RUNS
    BODY_RUNS += 1
    raise RuntimeError("weather service down")


class ScriptedModel(FakeMessagesListChatModel):
    def bind_tools(self, tools, **kwargs):
        return self


def main() -> None:
    calls = [AIMessage("", tool_calls=[{"name": "weather", "args": {"city": "Oslo"}, "id": f"c{i}"}]) for i in range(5)]
    model = ScriptedModel(responses=[*calls, AIMessage("done")])
    graph = create_react_agent(model, ToolNode([weather], handle_tool_errors=True))
    result = graph.invoke({"messages": [HumanMessage("weather in Oslo?")]}, {"configurable": {"thread_id": "demo"}})
    seen = [m.content for m in result["messages"] if isinstance(m, ToolMessage)]
    print(json.dumps({"body_runs": BODY_RUNS, "tool_results": seen, "final": result["messages"][-1].content}))


if __name__ == "__main__":
    main()
