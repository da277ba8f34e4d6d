"""The loop guard's scenarios, on a framework's real loop with its own offline model.

A framework's ``TestContract`` adds :class:`LoopContract` beside ``FrameworkContract``
once its adapter reports the model's invalid arguments to the call path:

* identical invalid arguments x20: with the defaults, from the 4th identical call the
  model reads the loop message (the first three answers are the framework's own, as
  without otel-breaker); with ``loop_action=stop`` the run raises ``ToolLoopError`` to
  its caller after at most 4 calls;
* a varying-argument sequence: untouched (identical with and without otel-breaker);
* identical tool failures: untouched by default, guarded with ``OTEL_BREAKER_LOOP_COUNT``;
* on/off identical where nothing repeats.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from contract import FrameworkDriver, Tool, call
from status_prompt import breaker_settings

from otel_breaker import ToolLoopError
from otel_breaker.registry import default_registry

#: What the model reads once the loop guard stops running an identical call.
LOOP = "this exact call, with the same arguments"
#: Arguments the tool's schema (``x: int``) rejects.
INVALID = {"x": "not a number"}


def invalid(times: int, vary: bool = False, arguments: dict[str, Any] | None = None) -> list[Any]:
    if vary:
        return [("echo", {"x": f"not a number {i}"} if arguments is None else {"y": i}) for i in range(times)]
    return [("echo", dict(arguments or INVALID)) for _ in range(times)]


def loop_error(exc: BaseException) -> ToolLoopError | None:
    """The ``ToolLoopError`` a run ended with: itself, or inside the exception group of a
    framework whose run is a task group (MCP's ``Client`` wraps what its body raises)."""
    if isinstance(exc, ToolLoopError):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = loop_error(inner)
        if found is not None:
            return found
    return None


class LoopContract:
    driver: ClassVar[FrameworkDriver]
    #: How many identical invalid calls the framework's own loop lets the model make
    #: before it ends the run itself (None: no limit of its own).
    loop_calls: ClassVar[int] = 20
    #: Whether the model's invalid arguments reach the patched tool path (False: the
    #: framework refuses them before it, so the loop guard never sees them there).
    sees_invalid_arguments: ClassVar[bool] = True
    #: Why ``loop_action=stop`` does not reach the caller of the run yet (None: it does).
    stop_not_reaching: ClassVar[str | None] = None
    #: Why the framework's own loop ends repeated identical failures before the scenario
    #: can show anything (None: it does not).
    stops_repeated_failures: ClassVar[str | None] = None
    #: Whether the adapter sees a call to a tool name no tool has (the loop guard's unknown-tool case).
    guards_unknown_tools: ClassVar[bool] = False
    #: Arguments the framework refuses before the tool body runs (some frameworks do not
    #: check types, only names: an unexpected argument then).
    invalid_arguments: ClassVar[dict[str, Any] | None] = None

    def _run(self, steps: list[Any], tool: Tool | None = None) -> tuple[str, int, list[str], int]:
        tool = tool or Tool.healthy("echo")
        agent = self.driver.build([tool], [*steps, "done"])
        final = self.driver.run(agent)
        sent = self.driver.sent(agent)
        return final, tool.runs, sent[-1].tool_results, len(sent)

    def _needs_invalid_arguments(self) -> None:
        if not self.sees_invalid_arguments:
            pytest.skip("the framework refuses invalid arguments before the patched tool path")

    def test_loop_identical_invalid_arguments_get_the_loop_message(self, instrument):
        self._needs_invalid_arguments()
        n = self.loop_calls
        final, runs, plain, _ = self._run(invalid(n, arguments=self.invalid_arguments))
        assert final == "done" and runs == 0 and len(plain) == n
        assert not any(LOOP in r for r in plain)
        instrument(self.driver.framework)
        final, runs, seen, _ = self._run(invalid(n, arguments=self.invalid_arguments))
        assert final == "done" and runs == 0 and len(seen) == n
        assert seen[:3] == plain[:3]  # the framework's own answers, as without otel-breaker
        assert all(LOOP in r and "'echo'" in r and "3 times" in r for r in seen[3:])

    def test_loop_stop_ends_the_run_with_tool_loop_error(self, instrument):
        self._needs_invalid_arguments()
        if self.stop_not_reaching:
            pytest.skip(self.stop_not_reaching)
        breaker_settings(loop_action="stop")
        instrument(self.driver.framework)
        tool = Tool.healthy("echo")
        agent = self.driver.build([tool], [*invalid(self.loop_calls, arguments=self.invalid_arguments), "done"])
        with pytest.raises(BaseException) as raised:
            self.driver.run(agent)
        error = loop_error(raised.value)
        assert error is not None, f"the run ended with {raised.value!r}, not ToolLoopError"
        assert (error.tool, error.count) == ("echo", 3)
        assert len(self.driver.sent(agent)) <= 4  # the model was asked at most 4 times

    def test_loop_unknown_tool_name(self, instrument):
        if not self.guards_unknown_tools:
            pytest.skip("the framework answers a tool name no tool has itself, before any patched tool path")
        n = self.loop_calls
        steps = [("no_such_tool", {"x": 1})] * n
        final, runs, plain, _ = self._run(steps)
        assert final == "done" and runs == 0 and len(plain) == n
        instrument(self.driver.framework)
        final, runs, seen, _ = self._run(steps)
        assert final == "done" and len(seen) == n
        assert seen[:3] == plain[:3]
        assert all("no tool of that name exists" in r and "3 times" in r for r in seen[3:])
        breaker_settings(loop_action="stop")
        agent = self.driver.build([Tool.healthy("echo")], [*steps, "done"])
        with pytest.raises(BaseException) as raised:
            self.driver.run(agent)
        error = loop_error(raised.value)
        assert error is not None and (error.tool, error.count) == ("no_such_tool", 3)

    def test_loop_varying_arguments_untouched(self, instrument):
        n = min(self.loop_calls, 8)
        baseline = self._run(invalid(n, vary=True, arguments=self.invalid_arguments))
        instrument(self.driver.framework)
        assert self._run(invalid(n, vary=True, arguments=self.invalid_arguments)) == baseline

    def test_loop_identical_failures_untouched_by_default_guarded_when_counted(self, instrument):
        if self.stops_repeated_failures:
            pytest.skip(self.stops_repeated_failures)
        steps = [call("echo", 1)] * min(6, self.loop_calls)
        baseline = self._run(steps, Tool.failing("echo"))
        assert baseline[1] == len(steps)
        breaker_settings(failure_threshold="50")
        instrument(self.driver.framework)
        assert self._run(steps, Tool.failing("echo")) == baseline
        breaker_settings(failure_threshold="50", loop_count="mistakes,failures")
        default_registry().clear(keep_counts=False)  # breakers made under the earlier settings go
        final, runs, seen, _ = self._run(steps, Tool.failing("echo"))
        assert final == "done" and runs == 3
        assert seen[:3] == baseline[2][:3] and all(LOOP in r for r in seen[3:])

    def test_loop_on_off_identical_when_nothing_repeats(self, instrument):
        steps = [call("echo", 1), call("echo", 2), ("echo", dict(self.invalid_arguments or INVALID)), call("echo", 3)]
        baseline = self._run(steps)
        instrument(self.driver.framework)
        assert self._run(steps) == baseline
