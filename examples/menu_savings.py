"""What a dead tool costs a PydanticAI agent: model turns and estimated tokens, four ways.

Offline and scripted: the model is PydanticAI's own ``FunctionModel`` following a
fixed policy, so the figures come from a scripted model, not from a real LLM.

The agent has two tools, offered in this order: ``primary_search`` (its backend
is dead: every call fails) and ``backup_search`` (healthy). Each user turn the
scripted model

* calls the first offered tool it has not given up on in this turn;
* after a failed result, calls the same tool once more (models do retry errors
  that read as transient), then moves to the next tool;
* after a result saying the tool is unavailable (the breaker's rejection), moves
  to the next tool at once;
* skips a tool the instructions' tool-status block lists as open;
* answers as soon as a tool succeeds.

Four cases: no breaker; breaker only; breaker + status block
(``OTEL_BREAKER_STATUS_IN_PROMPT``); breaker + hidden tools
(``OTEL_BREAKER_HIDE_OPEN_TOOLS``). The conversation keeps its history across
turns, so each request carries the earlier turns. Tokens are estimated with
the chars/4 rule over everything a request sends: instructions, tool
definitions (JSON) and messages. The breaker opens after 3 failures and stays
open for the whole run (a 1-hour cooldown).

Run:  pip install -e ".[pydantic-ai]"
      (in a clone of this repository; once released: pip install "otel-breaker[pydantic-ai]")
      python examples/menu_savings.py [turns]
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass

from pydantic_ai import Agent
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from otel_breaker.config import load_settings, set_settings
from otel_breaker.instrumentation import BreakerInstrumentor
from otel_breaker.registry import default_registry

CASES = ("no breaker", "breaker only", "breaker + status block", "breaker + hidden tools")
CHARS_PER_TOKEN = 4
UNAVAILABLE = "temporarily unavailable"
ATTEMPTS_PER_TOOL = 2  # a failed call is retried once


@dataclass
class Cost:
    model_turns: int = 0
    tokens: int = 0
    primary_runs: int = 0


def make_agent(cost: Cost) -> Agent:
    agent = Agent(name="shop_assistant", instructions="Find products for the user. Use the search tools.")

    @agent.tool_plain
    def primary_search(query: str) -> str:
        """Searches the product catalogue (fast, preferred)."""
        cost.primary_runs += 1
        raise ToolFailed("search backend unreachable")

    @agent.tool_plain
    def backup_search(query: str) -> str:
        """Searches a mirror of the product catalogue (slower)."""
        return f"3 results for {query!r}"

    return agent


def _open_in_status_block(instructions: str | None) -> set[str]:
    return set(re.findall(r"^- '([^']+)'[^\n]*\(open\)", instructions or "", re.MULTILINE))


def _estimate(messages, info: AgentInfo) -> int:
    chars = len(info.instructions or "")
    chars += sum(
        len(json.dumps({"name": t.name, "description": t.description, "parameters": t.parameters_json_schema}))
        for t in info.function_tools
    )
    for message in messages:
        for part in message.parts:
            content = getattr(part, "content", None)
            if content is None and isinstance(part, ToolCallPart):
                content = part.args_as_json_str()
            chars += len(content if isinstance(content, str) else json.dumps(content, default=str))
    return chars // CHARS_PER_TOKEN


def scripted_model(cost: Cost) -> FunctionModel:
    def respond(messages, info: AgentInfo) -> ModelResponse:
        cost.model_turns += 1
        cost.tokens += _estimate(messages, info)
        # This turn's tool results: everything after the last user prompt.
        start = max(i for i, m in enumerate(messages) if any(isinstance(p, UserPromptPart) for p in m.parts))
        results = [
            p for m in messages[start:] if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)
        ]
        if results and results[-1].outcome != "failed":
            return ModelResponse(parts=[TextPart(f"Found: {results[-1].content}")])
        skipped = _open_in_status_block(info.instructions)
        for tool in (t.name for t in info.function_tools):
            mine = [r for r in results if r.tool_name == tool]
            given_up = len(mine) >= ATTEMPTS_PER_TOOL or any(UNAVAILABLE in str(r.content) for r in mine)
            if tool not in skipped and not given_up:
                call_id = f"call_{cost.model_turns}"
                return ModelResponse(parts=[ToolCallPart(tool, {"query": "desk lamp"}, tool_call_id=call_id)])
        return ModelResponse(parts=[TextPart("Sorry, search is unavailable right now.")])

    return FunctionModel(respond)


def measure(case: str, turns: int = 10) -> Cost:
    """Model turns, estimated input tokens and runs of the dead tool over ``turns`` user turns."""
    if case not in CASES:
        raise ValueError(f"unknown case {case!r}; one of {CASES}")
    set_settings(
        load_settings(
            {
                "OTEL_BREAKER_FAILURE_THRESHOLD": "3",
                "OTEL_BREAKER_RECOVERY_TIMEOUT": "3600",
                "OTEL_BREAKER_STATUS_IN_PROMPT": "true" if case == "breaker + status block" else "false",
                "OTEL_BREAKER_HIDE_OPEN_TOOLS": "true" if case == "breaker + hidden tools" else "false",
            }
        )
    )
    default_registry().clear(keep_counts=False)
    instrumentor = BreakerInstrumentor()
    if case != "no breaker":
        instrumentor.instrument(frameworks=["pydantic_ai"])
    try:
        cost = Cost()
        agent = make_agent(cost)
        model = scripted_model(cost)
        history = None
        for turn in range(turns):
            result = agent.run_sync(f"Find me a desk lamp (request {turn + 1}).", model=model, message_history=history)
            history = result.all_messages()
        return cost
    finally:
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()
        default_registry().clear(keep_counts=False)
        set_settings(None)


def main(turns: int = 10) -> None:
    print(f"Scripted model (not a real LLM), {turns} user turns, dead primary tool, healthy backup.")
    print(f"{'case':<24} {'model turns':>11} {'est. tokens':>12} {'dead tool ran':>14}")
    for case in CASES:
        cost = measure(case, turns)
        print(f"{case:<24} {cost.model_turns:>11} {cost.tokens:>12} {cost.primary_runs:>14}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
