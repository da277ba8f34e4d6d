"""``OTEL_BREAKER_HIDE_OPEN_TOOLS`` on a framework's real loop.

A framework's suite adds ``menus(agent)`` to its :class:`~contract.FrameworkDriver`
(the names of the tools offered on each model call so far) and runs::

    class TestHiddenTools(HiddenToolsContract):
        driver = MyDriver()

A dead ``weather`` tool has a healthy alternative, ``backup``. Off (the
default) and with nothing open, the model is offered exactly what it is offered
without otel-breaker; on, an open tool leaves the menu until its cooldown ends,
and a model that calls it anyway gets the usual rejection.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

from contract import UNAVAILABLE, FrameworkDriver, Tool, call
from status_prompt import COOLDOWN, quick_breaker_settings

BOTH = ["backup", "weather"]  # menus are compared sorted: some frameworks sort their tools


class MenuDriver(FrameworkDriver, Protocol):
    def menus(self, agent: Any) -> list[list[str]]:
        """The names of the tools offered on each model call so far, in the order sent."""


class HiddenToolsContract:
    driver: ClassVar[MenuDriver]

    def _menus(self, agent: Any) -> list[list[str]]:
        return [sorted(menu) for menu in self.driver.menus(agent)]

    def _run(self, weather: Tool, steps: list) -> tuple[Any, Tool]:
        backup = Tool.healthy("backup")
        agent = self.driver.build([weather, backup], steps)
        assert self.driver.run(agent) == "done"
        return agent, backup

    def _dead_then_backup(self) -> tuple[list[list[str]], list, tuple[int, int]]:
        weather = Tool.failing("weather")
        agent, backup = self._run(weather, [call("weather", 1), call("weather", 2), call("backup", 3), "done"])
        return self._menus(agent), self.driver.sent(agent), (weather.runs, backup.runs)

    def test_switch_off_offers_exactly_the_uninstrumented_tools(self, instrument):
        baseline = self._dead_then_backup()
        assert baseline[0] == [BOTH] * 4
        instrument(self.driver.framework)
        quick_breaker_settings()  # the breaker opens; hiding is off
        assert self._dead_then_backup() == baseline

    def test_switch_on_nothing_open_offers_the_same_tools(self, instrument):
        def healthy_run() -> tuple[list[list[str]], list]:
            agent, _ = self._run(Tool.healthy("weather"), [call("weather", 1), call("backup", 2), "done"])
            return self._menus(agent), self.driver.sent(agent)

        baseline = healthy_run()
        instrument(self.driver.framework)
        quick_breaker_settings(hide_open_tools="true")
        assert healthy_run() == baseline

    def test_open_tool_leaves_the_menu_and_the_alternative_stays(self, instrument):
        instrument(self.driver.framework)
        quick_breaker_settings(hide_open_tools="true")
        menus, _, runs = self._dead_then_backup()
        assert menus == [BOTH, BOTH, ["backup"], ["backup"]]
        assert runs == (2, 1)

    def test_tool_returns_after_the_cooldown(self, instrument, registry_clock):
        instrument(self.driver.framework)
        quick_breaker_settings(hide_open_tools="true")
        weather, backup = Tool.flaky("weather", failures=2), Tool.healthy("backup")
        agent = self.driver.build(
            [weather, backup], [call("weather", 1), call("weather", 2), "first", call("weather", 3), "done"]
        )
        assert self.driver.run(agent) == "first"
        assert self._menus(agent)[-1] == ["backup"]
        registry_clock.advance(COOLDOWN * 2)  # half-open: back on the menu for the probe
        assert self.driver.run(agent, "again") == "done"
        assert self._menus(agent)[3:] == [BOTH, BOTH]
        assert weather.runs == 3 and "weather ok 3" in self.driver.sent(agent)[-1].tool_results[-1]

    def test_calling_a_hidden_tool_anyway_gets_the_rejection(self, instrument):
        instrument(self.driver.framework)
        quick_breaker_settings(hide_open_tools="true")
        weather = Tool.failing("weather")
        agent, _ = self._run(weather, [call("weather", 1), call("weather", 2), call("weather", 3), "done"])
        assert weather.runs == 2
        assert self._menus(agent)[2:] == [["backup"], ["backup"]]
        results = self.driver.sent(agent)[-1].tool_results
        assert UNAVAILABLE in results[-1] and "Tool 'weather'" in results[-1]
