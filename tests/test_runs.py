"""The run: the unit of the loop guard and of the waste budget.

A breaker remembers a broken tool across runs; the loop guard and the waste budget
count within one run, and a new run starts clean."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

import otel_breaker
from otel_breaker import CircuitBreakerConfig, Guard, ToolCall, menu, runs, telemetry
from otel_breaker.classify import MISTAKE
from otel_breaker.config import load_settings, set_settings
from otel_breaker.loops import LOOPS
from otel_breaker.run_budget import RunBudgetError


class ArgumentError(ValueError):
    """The framework's "arguments do not match the schema" error."""


class Down(ConnectionError):
    """The tool's backend is down."""


class Adapter:
    """A framework whose rejection form is a string the model reads."""

    def result_error(self, call, result):
        return None

    def rejection(self, call, info):
        return f"REJECTED: {info.message}"

    def exception_hint(self, call, exc):
        return MISTAKE if isinstance(exc, ArgumentError) else None


def forecast(days):
    if not isinstance(days, int):
        raise ArgumentError(f"days: expected an integer, got {days!r}")
    return f"sunny for {days} days"


def down():
    raise Down("connection refused")


def ask(guard, fn, *args, tool="forecast", agent="weather", adapter=None, config=None):
    """What the model reads for one call (an exception as the loop shows it)."""
    call = ToolCall(tool, framework="test", agent_name=agent, arguments={"args": list(args)})
    try:
        return guard.call(call, fn, args, {}, adapter=adapter or Adapter(), config=config)
    except ArgumentError as exc:
        return f"raised: {exc}"
    except Down:
        return "raised: down"


# -- the run itself ---------------------------------------------------------------------------


def test_a_run_opens_and_closes_and_a_nested_one_joins_it():
    assert runs.current_run() is None
    with otel_breaker.run("conversation-7") as outer:
        assert runs.current_run() is outer and outer.id == "conversation-7"
        with otel_breaker.run("sub-agent") as inner:
            assert inner is outer  # a sub-agent or handoff joins the run it runs in
        assert runs.current_run() is outer
    assert runs.current_run() is None


def test_each_run_without_an_id_gets_its_own():
    with otel_breaker.run() as first:
        pass
    with otel_breaker.run() as second:
        pass
    assert first.id != second.id and len(first.id) == 32


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("abc\x1b[31mred\x00", "abcred"),
        ("x" * 10_000, "x" * runs.MAX_RUN_ID_CHARS),
        (42, "42"),
        ("\n\t ", None),
        (["a"], None),
        (True, None),
        (None, None),
    ],
)
def test_a_run_identity_from_outside_is_bounded_and_cleaned(given, kept):
    assert runs.run_identity(given) == kept
    with otel_breaker.run(given) as opened:
        assert opened.id == (kept if kept is not None else opened.id)
        assert len(opened.id) <= runs.MAX_RUN_ID_CHARS and opened.id.isprintable()


def test_the_decorator_opens_a_run_per_call_for_functions_and_coroutines():
    seen = []

    @otel_breaker.run()
    def handle():
        seen.append(runs.current_run())

    @otel_breaker.run()
    async def ahandle():
        seen.append(runs.current_run())

    handle()
    handle()
    asyncio.run(ahandle())
    assert all(r is not None for r in seen) and len({r.id for r in seen}) == 3
    assert runs.current_run() is None


def test_a_generator_run_is_current_only_while_it_steps_and_never_leaks_to_its_consumer():
    seen = []

    @otel_breaker.run("stream")
    def stream():
        for i in range(3):
            seen.append(runs.current_run())
            yield i

    iterator = stream()
    assert next(iterator) == 0
    assert runs.current_run() is None  # between steps, the consumer's context has no run
    assert next(iterator) == 1
    del iterator  # abandoned: nothing left behind
    assert runs.current_run() is None
    assert [r.id for r in seen] == ["stream", "stream"]


def test_an_async_generator_run_is_current_only_while_it_steps():
    seen = []

    @otel_breaker.run("astream")
    async def stream():
        for i in range(2):
            seen.append(runs.current_run())
            yield i

    async def consume():
        items = []
        async for item in stream():
            items.append(item)
            assert runs.current_run() is None
        return items

    assert asyncio.run(consume()) == [0, 1]
    assert [r.id for r in seen] == ["astream", "astream"]


def test_tasks_and_copied_contexts_started_in_a_run_belong_to_it():
    found = {}

    async def tool_task():
        found["task"] = runs.current_run()

    async def main():
        async with otel_breaker.run("r1") as opened:
            await asyncio.create_task(tool_task())
            context = contextvars.copy_context()
            worker = threading.Thread(target=lambda: found.setdefault("thread", context.run(runs.current_run)))
            worker.start()
            worker.join(30)
            return opened

    opened = asyncio.run(main())
    assert found["task"] is opened and found["thread"] is opened


def test_a_failing_close_listener_never_reaches_the_caller():
    def broken(closed):
        raise RuntimeError("listener bug")

    runs.CLOSE_LISTENERS.insert(0, broken)
    try:
        with otel_breaker.run():
            pass
    finally:
        runs.CLOSE_LISTENERS.remove(broken)


# -- the loop guard counts within one run -----------------------------------------------------


def test_separate_runs_each_get_the_frameworks_own_answer():
    guard = Guard()
    answers = []
    for _ in range(5):  # five requests, each making one invalid call
        with otel_breaker.run():
            answers.append(ask(guard, forecast, "soon"))
    assert answers == ["raised: days: expected an integer, got 'soon'"] * 5


def test_within_one_run_the_identical_mistake_is_stopped_and_a_new_run_starts_clean():
    guard = Guard()
    with otel_breaker.run():
        answers = [ask(guard, forecast, "soon") for _ in range(5)]
    assert answers[:3] == ["raised: days: expected an integer, got 'soon'"] * 3
    assert all("this exact call, with the same arguments" in a for a in answers[3:])
    with otel_breaker.run():
        assert ask(guard, forecast, "soon").startswith("raised: ")


def test_the_ledger_forgets_a_run_when_it_ends():
    guard = Guard()
    with otel_breaker.run() as opened:
        ask(guard, forecast, "soon")
        assert LOOPS.might_repeat(f"r:{opened.id}", "forecast")
    assert not LOOPS.might_repeat(f"r:{opened.id}", "forecast")


# -- the waste budget ---------------------------------------------------------------------------

OPENS_AT_ONCE = {"failure_threshold": 1, "recovery_timeout": 600.0}


def open_breaker(guard, config):
    """One failure opens the tool's breaker (outside any run)."""
    assert ask(guard, down, tool="lookup", config=config) == "raised: down"


def test_a_run_that_keeps_calling_an_open_tool_loses_it_from_its_menu():
    config = CircuitBreakerConfig(**OPENS_AT_ONCE)
    guard = Guard()
    open_breaker(guard, config)
    with otel_breaker.run() as opened:
        answers = [ask(guard, down, tool="lookup", config=config) for _ in range(10)]
        assert opened.hides("lookup")
        tools = ["lookup", "forecast"]
        assert menu.visible_tools(tools, str) == ["forecast"]
        assert menu.hidden_names(tools) == {"lookup"}
    assert all("temporarily unavailable" in a for a in answers[:3])
    assert all("unavailable for the rest of this run" in a for a in answers[3:])
    # Another run keeps its menu, and is answered by the breaker as before.
    with otel_breaker.run():
        assert menu.visible_tools(tools, str) is tools
        assert "temporarily unavailable" in ask(guard, down, tool="lookup", config=config)


def test_outside_a_run_menus_are_untouched_and_no_budget_applies():
    config = CircuitBreakerConfig(**OPENS_AT_ONCE)
    guard = Guard()
    open_breaker(guard, config)
    answers = [ask(guard, down, tool="lookup", config=config) for _ in range(10)]
    assert all("temporarily unavailable" in a for a in answers)
    tools = ["lookup"]
    assert menu.visible_tools(tools, str) is tools


def test_stop_ends_the_run_with_run_budget_error():
    config = CircuitBreakerConfig(**OPENS_AT_ONCE, run_action="stop")
    guard = Guard()
    open_breaker(guard, config)
    with pytest.raises(RunBudgetError) as raised, otel_breaker.run():
        for _ in range(10):
            ask(guard, down, tool="lookup", config=config)
    assert raised.value.rejections == 3 and "lookup" in str(raised.value)
    assert isinstance(raised.value, otel_breaker.ToolLoopError)  # passes frameworks' Exception handlers
    assert "unavailable for the rest of this run" in raised.value.for_model()


def test_warn_changes_nothing_but_reports():
    config = CircuitBreakerConfig(**OPENS_AT_ONCE, run_action="warn")
    guard = Guard()
    open_breaker(guard, config)
    with otel_breaker.run():
        answers = [ask(guard, down, tool="lookup", config=config) for _ in range(10)]
    assert all("temporarily unavailable" in a for a in answers)


def test_no_budget_lets_a_run_call_an_open_tool_as_before():
    config = CircuitBreakerConfig(**OPENS_AT_ONCE, run_rejections=None)
    guard = Guard()
    open_breaker(guard, config)
    with otel_breaker.run() as opened:
        answers = [ask(guard, down, tool="lookup", config=config) for _ in range(10)]
    assert all("temporarily unavailable" in a for a in answers) and not opened.hidden


def test_a_healthy_tool_never_spends_a_budget():
    guard = Guard()
    with otel_breaker.run() as opened:
        answers = [ask(guard, forecast, 3) for _ in range(20)]
    assert answers == ["sunny for 3 days"] * 20 and not opened.rejections


def test_the_budget_spent_is_an_event_and_each_answered_call_a_rejection(otel):
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    telemetry.configure(logger_provider=provider)
    config = CircuitBreakerConfig(**OPENS_AT_ONCE)
    guard = Guard()
    open_breaker(guard, config)
    with otel_breaker.run("conversation-1"):
        for _ in range(10):
            ask(guard, down, tool="lookup", config=config)
    provider.force_flush()
    spent = [d.log_record for d in exporter.get_finished_logs() if d.log_record.event_name == "otel_breaker.run_budget"]
    assert len(spent) == 1
    attributes = spent[0].attributes
    assert attributes["otel_breaker.run.action"] == "hide" and attributes["otel_breaker.run.rejections"] == 3
    assert attributes["otel_breaker.run.id"] == "conversation-1"
    budget = otel.value("otel_breaker.calls.rejected", otel_breaker_reason="run_budget")
    assert budget == 7
    points = otel.metrics()["otel_breaker.calls.rejected"]
    assert not any("otel_breaker.run.id" in p.attributes for p in points)  # never a metric label
    provider.shutdown()


def test_run_settings_from_the_environment_and_bad_values_fall_back(monkeypatch, caplog):
    monkeypatch.setenv("OTEL_BREAKER_RUN_REJECTIONS", "off")
    monkeypatch.setenv("OTEL_BREAKER_RUN_ACTION", "stop")
    defaults = load_settings().defaults
    assert defaults.run_rejections is None and defaults.run_action == "stop"
    monkeypatch.setenv("OTEL_BREAKER_RUN_REJECTIONS", "-2")
    monkeypatch.setenv("OTEL_BREAKER_RUN_ACTION", "explode\x1b[2J")
    with caplog.at_level("WARNING", logger="otel_breaker"):
        defaults = load_settings(strict=False).defaults
    assert defaults.run_rejections == 3 and defaults.run_action == "hide"
    lines = [r.getMessage() for r in caplog.records]
    assert any("OTEL_BREAKER_RUN_REJECTIONS" in line for line in lines)
    assert any("OTEL_BREAKER_RUN_ACTION" in line and "\x1b" not in line for line in lines)
    set_settings(None)


def test_a_bad_config_value_is_a_clear_error():
    with pytest.raises(ValueError, match="run_action"):
        CircuitBreakerConfig(run_action="explode")
    with pytest.raises(ValueError, match="run_rejections"):
        CircuitBreakerConfig(run_rejections=0)


def test_a_hidden_tool_comes_back_to_its_run_once_its_breaker_recovers(registry_clock):
    config = CircuitBreakerConfig(**OPENS_AT_ONCE)
    guard = Guard()
    open_breaker(guard, config)
    tools = ["lookup", "forecast"]
    with otel_breaker.run() as opened:
        answers = [ask(guard, down, tool="lookup", config=config) for _ in range(5)]
        assert "unavailable for the rest of this run" in answers[3]
        assert menu.visible_tools(tools, str) == ["forecast"]
        registry_clock.advance(601)  # the cooldown ends: half-open, a probe may go through
        assert menu.visible_tools(tools, str) is tools and not opened.hidden
        assert ask(guard, forecast, 2, tool="lookup", config=config) == "sunny for 2 days"  # the probe
        # Its budget is whole again: a new outage gets three rejections before it hides.
        assert ask(guard, down, tool="lookup", config=config) == "raised: down"
        again = [ask(guard, down, tool="lookup", config=config) for _ in range(4)]
    assert all("temporarily unavailable" in a for a in again[:3]) and "rest of this run" in again[3]
