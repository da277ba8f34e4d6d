"""The loop guard on the one call path: identical repeated mistakes stop burning turns."""

from __future__ import annotations

import logging

import pytest

import otel_breaker
from otel_breaker import CircuitBreakerConfig, Guard, State, ToolCall, ToolLoopError, loop_ledger, loops
from otel_breaker.classify import MISTAKE, RETRY_REQUEST
from otel_breaker.config import load_settings, set_settings
from otel_breaker.loops import LOOPS, signature
from otel_breaker.registry import default_registry


class ArgumentError(ValueError):
    """The framework's "arguments do not match the schema" error (the adapter says: a mistake)."""


class RetryAsked(Exception):
    """The tool asks the model to try again (``ModelRetry``)."""


class Adapter:
    """A minimal framework adapter: its rejection form is a string the model reads."""

    def result_error(self, call, result):
        return None

    def rejection(self, call, info):
        return f"REJECTED: {info.message}"

    def exception_hint(self, call, exc):
        if isinstance(exc, ArgumentError):
            return MISTAKE
        if isinstance(exc, RetryAsked):
            return RETRY_REQUEST
        return None


def tool(x):
    if not isinstance(x, int):
        raise ArgumentError(f"x: expected an integer, got {x!r}")
    if x < 0:
        raise RuntimeError("service down")
    if x == 99:
        raise RetryAsked("not ready, ask again")
    return f"ok {x}"


def model_calls(arguments, times, agent="assistant", guard=None):
    """What the model reads for ``times`` calls with ``arguments`` (exceptions as the loop shows them)."""
    guard = guard or Guard()
    seen = []
    runs = [0]

    def body(x):
        runs[0] += 1
        return tool(x)

    for _ in range(times):
        call = ToolCall("search", framework="test", agent_name=agent, arguments={"x": arguments})
        try:
            seen.append(guard.call(call, body, (arguments,), {}, adapter=Adapter()))
        except (ArgumentError, RuntimeError, RetryAsked) as exc:
            seen.append(f"error: {exc}")
    return seen, runs[0]


def test_identical_invalid_arguments_get_the_loop_message_from_the_fourth_call():
    seen, runs = model_calls("ten", 20)
    assert runs == 3
    assert all(s.startswith("error:") for s in seen[:3])
    message = seen[3]
    assert message.startswith("REJECTED: Tool 'search' was not called: this exact call, with the same arguments")
    assert "failed 3 times" in message and "change the arguments" in message and "expected an integer" in message
    assert all(s == message for s in seen[4:])
    # Never counted toward health: the breaker (of the agent's tool) saw three neutral calls.
    (breaker,) = default_registry().find("search")
    assert breaker.state is State.CLOSED
    assert (breaker.stats.failure_count, breaker.stats.ignored_count, breaker.stats.rejected_requests) == (0, 3, 0)


def test_stop_raises_tool_loop_error_with_tool_count_and_last_error():
    set_settings(load_settings({"OTEL_BREAKER_LOOP_ACTION": "stop"}))
    with pytest.raises(ToolLoopError) as raised:
        model_calls("ten", 20)
    error = raised.value
    assert (error.tool, error.count) == ("search", 3)
    assert "expected an integer" in error.last_error
    assert not isinstance(error, Exception)  # framework handlers of Exception let it through


def test_warn_changes_nothing_and_counts_it(caplog):
    set_settings(load_settings({"OTEL_BREAKER_LOOP_ACTION": "warn"}))
    seen, runs = model_calls("ten", 6)
    assert runs == 6 and all(s.startswith("error:") for s in seen)
    assert [v for v, _ in LOOPS.detections(False)] == [3]
    assert list(LOOPS.detections(True)) == []


def test_other_arguments_always_run_and_a_success_forgets():
    guard = Guard()
    assert model_calls("ten", 3, guard=guard)[1] == 3
    seen, runs = model_calls("eleven", 3, guard=guard)
    assert runs == 3 and all(s.startswith("error:") for s in seen)
    assert model_calls(5, 3, guard=guard) == (["ok 5"] * 3, 3)


def test_other_runs_have_their_own_counts():
    model_calls("ten", 3, agent="a")
    _seen, runs = model_calls("ten", 3, agent="b")
    assert runs == 3


def test_failures_and_retries_are_untouched_by_default():
    seen, runs = model_calls(-1, 8)
    assert runs == 5  # the health breaker owns failures: its threshold (5) opens it
    assert not any("this exact call" in str(s) for s in seen)
    assert all("temporarily unavailable" in s for s in seen[5:])
    loops.reset()
    default_registry().clear(keep_counts=False)
    assert model_calls(99, 8)[1] == 8


@pytest.mark.parametrize(("count", "arguments"), [("failures", -1), ("retries", 99)])
def test_failures_and_retries_are_guarded_when_opted_in(count, arguments):
    set_settings(
        load_settings({"OTEL_BREAKER_LOOP_COUNT": f"mistakes,{count}", "OTEL_BREAKER_FAILURE_THRESHOLD": "50"})
    )
    seen, runs = model_calls(arguments, 10)
    assert runs == 3 and "this exact call" in seen[3]


def test_per_tool_settings():
    set_settings(load_settings({"OTEL_BREAKER_TOOLS": "search=loop_limit=1,loop_action=stop"}))
    with pytest.raises(ToolLoopError) as raised:
        model_calls("ten", 5)
    assert raised.value.count == 1
    default_registry().clear(keep_counts=False)
    loops.reset()
    set_settings(None)
    guard = Guard()
    call = ToolCall("other", framework="test", arguments={"x": "bad"})
    config = CircuitBreakerConfig(loop_limit=2)
    results = []
    with otel_breaker.run():
        for _ in range(4):
            try:
                results.append(guard.call(call, tool, ("bad",), {}, adapter=Adapter(), config=config))
            except ArgumentError:
                results.append("raised")
    assert results[:2] == ["raised", "raised"] and "failed 2 times" in results[2]


def test_without_an_adapter_the_rejection_is_a_dict():
    guard = Guard()
    set_settings(load_settings({"OTEL_BREAKER_LOOP_COUNT": "failures", "OTEL_BREAKER_FAILURE_THRESHOLD": "50"}))
    call = ToolCall("search", arguments={"x": -1})
    results = []
    with otel_breaker.run():
        for _ in range(4):
            try:
                results.append(guard.call(call, tool, (-1,), {}))
            except RuntimeError:
                results.append("raised")
    assert results[3]["loop"] is True and results[3]["count"] == 3 and results[3]["circuit_open"] is False


async def test_the_async_path_guards_too():
    guard = Guard()
    answers = []

    async def body(x):
        return tool(x)

    async with otel_breaker.run():
        for _ in range(5):
            call = ToolCall("search", framework="test", arguments={"x": "ten"})
            try:
                answers.append(await guard.acall(call, body, ("ten",), {}, adapter=Adapter()))
            except ArgumentError:
                answers.append("raised")
    assert answers[:3] == ["raised"] * 3 and answers[3].startswith("REJECTED: Tool 'search' was not called")


def test_a_call_outside_any_run_agent_or_session_is_a_run_of_its_own():
    """A directly invoked tool: each call is its own run, so the caller always gets the
    tool's own answer, however often the identical call is made."""
    guard = Guard()
    answers = []
    for _ in range(6):
        try:
            answers.append(
                guard.call(ToolCall("search", arguments={"x": "ten"}), tool, ("ten",), {}, adapter=Adapter())
            )
        except ArgumentError:
            answers.append("raised")
    assert answers == ["raised"] * 6


def test_the_guards_answer_remembers_that_the_identical_call_raised():
    """An adapter whose framework has an error policy for exceptions raises the answer
    (``RepeatedCallError``) where the identical call raised, so that policy decides."""

    class RaisingAdapter(Adapter):
        def rejection(self, call, info):
            if getattr(info, "raised", False):
                raise info.repeated_error()
            return f"REJECTED: {info.message}"

    guard = Guard()
    answers = []
    with otel_breaker.run():
        for _ in range(4):
            try:
                answers.append(
                    guard.call(ToolCall("search", arguments={"x": "ten"}), tool, ("ten",), {}, adapter=RaisingAdapter())
                )
            except ArgumentError:
                answers.append("raised")
            except loops.RepeatedCallError as repeated:
                answers.append(repeated)
    assert answers[:3] == ["raised"] * 3
    assert isinstance(answers[3], Exception) and "this exact call" in str(answers[3]) and answers[3].count == 3


def test_signature_is_key_order_independent_bounded_and_never_raises():
    assert signature("t", {"a": 1, "b": [1, 2]}) == signature("t", {"b": [1, 2], "a": 1})
    assert signature("t", {"a": 1}) != signature("t", {"a": 2})
    assert signature("t", {"a": 1}) != signature("u", {"a": 1})

    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

        def __repr__(self):
            raise RuntimeError("no repr")

    nested: dict = {}
    inner = nested
    for _ in range(1000):
        inner["k"] = {}
        inner = inner["k"]
    for weird in ({"x": Unhashable()}, {"big": "x" * 10_000_000}, nested, {"s": {1, 2}}, [float("nan")], b"\0" * 999):
        assert len(signature("t", weird)) == 24
    cyclic: list = []
    cyclic.append(cyclic)
    assert len(signature("t", cyclic)) == 24


def test_plumbing_arguments_do_not_hide_a_repeat():
    args = ({"x": "ten"},)
    first = loops.arguments_of(ToolCall("t"), args, {"tool_call_id": "1", "callbacks": object()})
    second = loops.arguments_of(ToolCall("t"), args, {"tool_call_id": "2", "callbacks": object()})
    assert signature("t", first) == signature("t", second)


def test_bad_loop_settings_are_one_line_each_and_the_defaults(caplog):
    with caplog.at_level(logging.WARNING, logger="otel_breaker"):
        settings = load_settings(
            {"OTEL_BREAKER_LOOP_LIMIT": "0", "OTEL_BREAKER_LOOP_COUNT": "all", "OTEL_BREAKER_LOOP_ACTION": "x"},
            strict=False,
        )
    defaults = settings.defaults
    assert (defaults.loop_limit, defaults.loop_count, defaults.loop_action) == (3, ("mistakes",), "reject")
    lines = [r.getMessage() for r in caplog.records]
    assert len([line for line in lines if "OTEL_BREAKER_LOOP" in line]) == 3
    with pytest.raises(ValueError, match="loop_action"):
        CircuitBreakerConfig(loop_action="explode")
    with pytest.raises(ValueError, match="loop_count"):
        CircuitBreakerConfig(loop_count=("everything",))
    assert CircuitBreakerConfig(loop_count="mistakes+failures").loop_count == ("mistakes", "failures")


def test_idle_entries_are_forgotten_and_the_table_is_bounded(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(LOOPS, "clock", lambda: clock[0])
    model_calls("ten", 3)
    clock[0] += loop_ledger.IDLE_SECONDS + 1
    assert model_calls("ten", 3)[1] == 3  # forgotten: counted afresh
    monkeypatch.setattr(loop_ledger, "MAX_ENTRIES", 10)
    for index in range(50):
        LOOPS.counted("s", "t", f"sig{index}", None)
    assert len(LOOPS._entries) <= 10


def test_telemetry_event_rejected_metric_loops_counter_and_tokens_saved(otel):
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

    from otel_breaker import telemetry

    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    telemetry.configure(logger_provider=provider)
    model_calls("ten", 5)  # two calls answered by the loop guard
    events = [d.log_record for d in exporter.get_finished_logs() if d.log_record.event_name == "otel_breaker.loop"]
    assert len(events) == 2
    assert events[0].attributes["gen_ai.tool.name"] == "search"
    assert events[0].attributes["otel_breaker.loop.action"] == "reject"
    assert events[0].attributes["otel_breaker.loop.count"] == 3
    assert otel.value("otel_breaker.calls.rejected", gen_ai_tool_name="search", otel_breaker_reason="loop") == 2
    # each saved a model turn: priced by the estimate (the configured one: no usage observed)
    assert otel.value("otel_breaker.tokens.saved", gen_ai_tool_name="search") == 2 * 1500
    set_settings(load_settings({"OTEL_BREAKER_LOOP_ACTION": "warn"}))
    default_registry().clear(keep_counts=False)  # the breaker made under the earlier settings goes
    model_calls("eleven", 5)
    assert otel.value("otel_breaker.loops", gen_ai_tool_name="search", otel_breaker_loop_action="warn") == 2
    provider.shutdown()


def test_detection_counts_stay_bounded_with_a_hundred_thousand_agents(otel):
    """One count per (tool, agent, action), at most ``MAX_DETECTION_SERIES`` of them: past
    that the one detected longest ago is folded into its action's ``_other`` count, so
    memory and each metric collection stay bounded and no exported total goes down."""
    import tracemalloc

    agents = 100_000
    LOOPS.detected(ToolCall("search", agent_name="agent-warmup"), "reject", 3)  # first-use allocations
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for index in range(agents):
        LOOPS.detected(ToolCall("search", agent_name=f"agent-{index}"), "reject", 3)
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert grown < 2_000_000, f"{grown} bytes for {agents} agents"
    counts = list(LOOPS.detections(True))
    assert len(counts) == loop_ledger.MAX_DETECTION_SERIES + 1  # the kept ones and the folded one
    assert sum(value for value, _ in counts) == agents + 1  # nothing lost
    folded = [attributes for _, attributes in counts if attributes["gen_ai.tool.name"] == "_other"]
    assert folded == [
        {"gen_ai.tool.name": "_other", "otel_breaker.loop.action": "reject", "otel_breaker.reason": "loop"}
    ]
    rejected = otel.metrics()["otel_breaker.calls.rejected"]
    points = [point for point in rejected if point.attributes.get("otel_breaker.reason") == "loop"]
    assert len(points) == loop_ledger.MAX_DETECTION_SERIES + 1
    assert sum(point.value for point in points) == agents + 1
