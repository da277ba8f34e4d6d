"""The run as the unit of the loop guard and of waste, on a framework's real loop.

A framework's ``TestContract`` adds :class:`RunContract` once its adapter marks the
framework's top-level invocation as a run (``run_patch``):

* four separate runs, each making one invalid call, get the framework's own answer
  four times, as without otel-breaker (the loop guard counts within one run);
* one run that keeps calling a tool whose breaker is open is cut by the waste budget:
  with ``hide`` (the default) the model reads from the 4th call on that the tool is
  unavailable for the rest of the run, and the tool leaves the run's menu where the
  framework sends one per request; with ``stop`` the run ends with ``RunBudgetError``;
* the next run starts with its budget whole, and another run keeps its menu;
* with no tool open, nothing changes.

A framework's ``test_runs.py`` goes beyond the contract (an agent run inside another's run
joins it; another entry point is a run too) with the helpers below: the breakers they open
and what the model must read are the same in every framework.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import pytest
from contract import FrameworkDriver, Tool, call
from loop_contract import INVALID, loop_error
from status_prompt import breaker_settings

from otel_breaker.run_budget import RunBudgetError

#: What the model reads once the breaker rejects a call.
UNAVAILABLE = "is temporarily unavailable"
#: What the model reads once the waste budget answers a call.
SPENT = "unavailable for the rest of this run"


def open_echo_for(driver: FrameworkDriver, instrument: Callable[..., object], *agents: str) -> Tool:
    """The driver's framework instrumented (``instrument`` is the fixture) with breakers that
    open at the first failure and stay open (a long cooldown); ``echo`` fails once for each
    agent in an earlier run, so its breaker is open for each (breakers are per agent)."""
    breaker_settings(failure_threshold="1", recovery_timeout="600")
    instrument(driver.framework)
    echo = Tool.flaky("echo", failures=len(agents))
    for name in agents:
        assert driver.run(driver.build([echo], [call("echo", 1), "done"], name=name)) == "done"
    assert echo.runs == len(agents)
    return echo


def assert_budget_answers(read: list[str], calls: int) -> None:
    """What one run's model read of ``calls`` calls of an open tool: the breaker's answer to
    the first three, the waste budget's to the rest."""
    assert len(read) == calls, read
    assert all(UNAVAILABLE in text for text in read[:3]), read
    assert all(SPENT in text for text in read[3:]), read


def assert_inner_agent_joined(inner_read: list[str], echo: Tool, outer_read: list[str] | None = None) -> None:
    """An outer agent called the open ``echo`` twice, then an inner agent twice, all in one run
    (``echo`` opened for both by :func:`open_echo_for`): had the inner agent started a run of
    its own, its second call would not read the waste budget's answer."""
    if outer_read is not None:
        assert len(outer_read) == 2 and all(UNAVAILABLE in text for text in outer_read), outer_read
    # The inner agent's first call is the run's 3rd, its second the 4th.
    assert len(inner_read) == 2, inner_read
    assert UNAVAILABLE in inner_read[0] and SPENT in inner_read[1], inner_read
    assert echo.runs == 2, "the open tool ran only in the runs that opened its breakers"


def assert_each_run_budgeted(
    driver: FrameworkDriver, echo: Tool, run_to_end: Callable[[Any], None], calls: int = 6
) -> None:
    """Two agents in a row keep calling the open ``echo``, each run to its end by
    ``run_to_end(agent)`` (the entry point under test): each is a run of its own, cut by the
    waste budget after three rejections, and the second starts with its budget whole."""
    steps = [call("echo", i) for i in range(2, 2 + calls)]
    ran = echo.runs
    for _ in range(2):
        agent = driver.build([echo], [*steps, "done"])
        run_to_end(agent)
        assert echo.runs == ran, "the open tool never ran"
        assert_budget_answers(driver.sent(agent)[-1].tool_results, calls)


class RunContract:
    driver: ClassVar[FrameworkDriver]
    #: Why the adapter cannot see the framework's run (None: it marks it).
    run_not_seen: ClassVar[str | None] = None
    #: Whether the model's invalid arguments reach the patched tool path (see ``LoopContract``).
    sees_invalid_arguments: ClassVar[bool] = True
    invalid_arguments: ClassVar[dict[str, Any] | None] = None
    #: Why a stop cannot reach the caller of the run (None: it does; see ``LoopContract``).
    stop_not_reaching: ClassVar[str | None] = None
    #: How many calls of the open tool the run's script makes.
    stubborn_calls: ClassVar[int] = 6

    def _needs_runs(self) -> None:
        if self.run_not_seen:
            pytest.skip(self.run_not_seen)

    def _separate_runs(self, runs: int = 4) -> list[list[str]]:
        read = []
        arguments = dict(self.invalid_arguments or INVALID)
        for _ in range(runs):
            agent = self.driver.build([Tool.healthy("echo")], [("echo", arguments), "done"], name="weather")
            assert self.driver.run(agent) == "done"
            read.append(self.driver.sent(agent)[-1].tool_results)
        return read

    def test_run_separate_runs_each_get_the_frameworks_own_answer(self, instrument):
        self._needs_runs()
        if not self.sees_invalid_arguments:
            pytest.skip("the framework refuses invalid arguments before the patched tool path")
        plain = self._separate_runs()
        assert len({tuple(r) for r in plain}) == 1
        instrument(self.driver.framework)
        assert self._separate_runs() == plain

    def _open_echo(self) -> Tool:
        """``echo`` fails once in an earlier run: its breaker opens (threshold 1, a long cooldown)."""
        tool = Tool.flaky("echo", failures=1)
        agent = self.driver.build([tool, Tool.healthy("other")], [call("echo", 1), "done"])
        assert self.driver.run(agent) == "done"
        assert tool.runs == 1
        return tool

    def _stubborn(self, tool: Tool) -> tuple[Any, list[str]]:
        steps = [call("echo", i) for i in range(2, 2 + self.stubborn_calls)]
        agent = self.driver.build([tool, Tool.healthy("other")], [*steps, "done"])
        assert self.driver.run(agent) == "done"
        return agent, self.driver.sent(agent)[-1].tool_results

    def test_run_budget_hides_an_open_tool_from_its_run(self, instrument):
        self._needs_runs()
        breaker_settings(failure_threshold="1", recovery_timeout="600")
        instrument(self.driver.framework)
        tool = self._open_echo()
        agent, read = self._stubborn(tool)
        assert tool.runs == 1  # the open tool never ran again
        assert_budget_answers(read, self.stubborn_calls)
        menus = self.driver.tools_sent(agent)
        if menus and any(menus):
            assert all("echo" in menu for menu in menus[:4])
            assert all("echo" not in menu and "other" in menu for menu in menus[4:]), menus[4:]
        # The next run starts with its budget whole: the breaker answers it again.
        _, again = self._stubborn(tool)
        assert all(UNAVAILABLE in r for r in again[:3]) and SPENT in again[3]

    def test_run_budget_stop_ends_the_run(self, instrument):
        self._needs_runs()
        if self.stop_not_reaching:
            pytest.skip(self.stop_not_reaching)
        breaker_settings(failure_threshold="1", recovery_timeout="600", run_action="stop")
        instrument(self.driver.framework)
        tool = self._open_echo()
        steps = [call("echo", i) for i in range(2, 12)]
        agent = self.driver.build([tool, Tool.healthy("other")], [*steps, "done"])
        with pytest.raises(BaseException) as raised:
            self.driver.run(agent)
        error = loop_error(raised.value)
        assert isinstance(error, RunBudgetError), f"the run ended with {raised.value!r}"
        assert (error.tool, error.rejections) == ("echo", 3)
        assert len(self.driver.sent(agent)) <= 4  # the model was asked at most 4 times

    def test_run_budget_off_changes_nothing(self, instrument):
        self._needs_runs()
        breaker_settings(failure_threshold="1", recovery_timeout="600", run_rejections="off")
        instrument(self.driver.framework)
        tool = self._open_echo()
        _, read = self._stubborn(tool)
        assert all(UNAVAILABLE in r for r in read) and tool.runs == 1

    def test_run_healthy_tools_are_untouched(self, instrument):
        steps = [call("echo", i) for i in range(1, 1 + self.stubborn_calls)]
        baseline_agent = self.driver.build([Tool.healthy("echo")], [*steps, "done"])
        assert self.driver.run(baseline_agent) == "done"
        baseline = self.driver.sent(baseline_agent)[-1].tool_results
        instrument(self.driver.framework)
        agent = self.driver.build([Tool.healthy("echo")], [*steps, "done"])
        assert self.driver.run(agent) == "done"
        assert self.driver.sent(agent)[-1].tool_results == baseline
