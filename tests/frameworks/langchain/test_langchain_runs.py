"""LangChain's own error policy wins, and a directly invoked tool is a run of its own.

Real langchain-core tools, invoked directly (no agent, no graph) as application code
does, with otel-breaker on and off."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_core")

from langchain_core.tools import StructuredTool
from pydantic import ValidationError

import otel_breaker
from otel_breaker.loops import RepeatedCallError

LOOP = "this exact call, with the same arguments"


def forecast(days: int) -> str:
    return f"sunny for {days} days"


def new_tool(**options) -> StructuredTool:
    """One tool object per request, as a server builds them."""
    return StructuredTool.from_function(forecast, name="foo", description="The forecast.", **options)


def outcomes(make, times: int) -> list[str]:
    """What a caller gets for ``times`` invokes with invalid arguments: the answer, or the error's class."""
    seen = []
    for _ in range(times):
        try:
            seen.append(str(make().invoke({"days": "soon"})))
        except Exception as exc:  # the caller's own except
            seen.append(type(exc).__name__)
    return seen


def test_separate_direct_invokes_each_get_langchains_own_error(instrument):
    plain = outcomes(new_tool, 5)
    assert plain == ["ValidationError"] * 5
    instrument("langchain")
    assert outcomes(new_tool, 5) == plain


def test_handled_validation_errors_stay_langchains_own_text(instrument):
    def make():
        return new_tool(handle_validation_error=True)

    plain = outcomes(make, 5)
    instrument("langchain")
    assert outcomes(make, 5) == plain and not any(LOOP in answer for answer in plain)


def test_within_a_run_the_loop_answer_raises_where_the_call_raised(instrument):
    instrument("langchain")
    tool = new_tool()
    raised = []
    with otel_breaker.run():
        for _ in range(5):
            try:
                tool.invoke({"days": "soon"})
            except ValidationError:
                raised.append("ValidationError")
            except RepeatedCallError as repeated:
                raised.append(repeated)
    assert raised[:3] == ["ValidationError"] * 3
    assert all(isinstance(r, RepeatedCallError) and LOOP in str(r) and r.count == 3 for r in raised[3:])
