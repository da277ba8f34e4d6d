"""The shared framework contract, on PydanticAI's real agent loop."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai")
sys.path.insert(0, str(Path(__file__).parent))

from contract import FrameworkContract, Tool, call
from driver import PydanticAIDriver
from loop_contract import LOOP, LoopContract
from pydantic_ai.exceptions import ModelRetry
from run_contract import RunContract
from status_prompt import breaker_settings

from otel_breaker.registry import default_registry


class TestContract(FrameworkContract):
    driver = PydanticAIDriver()


class TestRunContract(RunContract):
    """``Agent.iter`` is the run (``run_sync`` goes through it). The contract's tools fail
    with ``ToolFailed``, which PydanticAI charges no retry for: neither is a rejection, so
    the stubborn run reaches its end as it does without otel-breaker."""

    driver = PydanticAIDriver()


class TestLoopContract(LoopContract):
    """PydanticAI ends a run itself once a tool's retry budget (default 1) is spent: an
    identical invalid call repeats at most twice. With a larger budget the loop guard
    answers the 4th identical call, and ``stop`` ends the run."""

    driver = PydanticAIDriver(retries=50)
    guards_unknown_tools = True

    def _retrying(self) -> tuple:
        def fn(x: int) -> str:
            raise ModelRetry("not ready yet, ask again")

        tool = Tool("poll", fn)
        agent = self.driver.build([tool], [call("poll", 1)] * 6 + ["done"])
        final = self.driver.run(agent)
        return final, tool.runs, self.driver.sent(agent)[-1].tool_results

    def test_loop_identical_model_retry_untouched_by_default_guarded_when_counted(self, instrument):
        baseline = self._retrying()
        assert baseline[:2] == ("done", 6)
        instrument(self.driver.framework)
        assert self._retrying() == baseline
        breaker_settings(loop_count="mistakes,retries")
        default_registry().clear(keep_counts=False)
        final, runs, seen = self._retrying()
        assert (final, runs) == ("done", 3)
        assert seen[:3] == baseline[2][:3] and all(LOOP in r for r in seen[3:])
