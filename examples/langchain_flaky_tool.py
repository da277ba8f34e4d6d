"""A LangGraph agent's flaky tool trips its circuit breaker, the model is told why, and the breaker recovers.

Offline: the chat model is langchain-core's own fake model, scripted to call the tool.
Run:  pip install -e ".[langchain]"   (langchain-core + langgraph)
      (in a clone of this repository; once released: pip install "otel-breaker[langchain]")
      python examples/langchain_flaky_tool.py
"""

from __future__ import annotations

import time
import warnings

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from otel_breaker import CircuitBreakerConfig, get_circuit_breaker
from otel_breaker.breaker import add_global_listener
from otel_breaker.instrumentation import BreakerInstrumentor

warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", message=".*create_react_agent.*")
from langgraph.prebuilt import ToolNode, create_react_agent  # noqa: E402

BACKEND_UP = False
BODY_RUNS = 0


@tool
def search(query: str) -> str:
    """Searches the product catalogue."""
    global BODY_RUNS
    BODY_RUNS += 1
    if not BACKEND_UP:
        raise ConnectionError("catalogue backend unreachable")
    return f"3 results for {query!r}"


class ScriptedModel(FakeMessagesListChatModel):
    """Asks for the tool ``len(responses) - 1`` times, then answers."""

    def bind_tools(self, tools, **kwargs):
        return self


def run_agent(n_calls: int, label: str) -> None:
    calls = [
        AIMessage("", tool_calls=[{"name": "search", "args": {"query": "lamps"}, "id": f"{label}_{i}"}])
        for i in range(n_calls)
    ]
    model = ScriptedModel(responses=[*calls, AIMessage("done")])
    graph = create_react_agent(model, ToolNode([search], handle_tool_errors=True))
    result = graph.invoke({"messages": [HumanMessage("find lamps")]})
    for message in result["messages"]:
        if isinstance(message, ToolMessage):
            print(f"  model reads [{message.status}] {message.content[:110].replace(chr(10), ' ')}")
    print(f"  agent finished: {result['messages'][-1].content!r}")


def main() -> None:
    BreakerInstrumentor().instrument(frameworks=["langchain"])
    # Open after 2 failures; allow a probe after a short cooldown; close after one good probe.
    get_circuit_breaker("search", CircuitBreakerConfig(failure_threshold=2, recovery_timeout=0.5, success_threshold=1))
    add_global_listener(
        lambda change: print(f"  breaker {change.breaker.name}: {change.from_state.value} -> {change.to_state.value}")
    )
    global BACKEND_UP

    print("1) backend down: 4 tool calls")
    run_agent(4, "a")
    print(f"   tool body ran {BODY_RUNS} times (2 failures, then the breaker answered instead)")

    print("2) backend back; cooldown passes; 2 tool calls")
    BACKEND_UP = True
    time.sleep(0.6)
    run_agent(2, "b")
    print(f"   tool body ran {BODY_RUNS} times in total")


if __name__ == "__main__":
    main()
