"""The one call path: @guard, adapters' hooks, escalation, and never breaking a healthy call."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys

import pytest

from otel_breaker import (
    CircuitBreaker,
    CircuitBreakerConfig,
    CircuitOpenError,
    Guard,
    State,
    ToolCall,
    breaker_scope,
    get_circuit_breaker,
    guard,
    set_escalation,
)
from otel_breaker.registry import BreakerRegistry, default_registry
from otel_breaker.store.memory import MemoryStore


class Down(Exception):
    pass


def test_guard_names_the_breaker_after_the_function():
    @guard
    def lookup(x):
        return x + 1

    assert lookup(1) == 2
    assert get_circuit_breaker("lookup").stats.success_count == 1


def test_guard_with_name_and_config_shares_the_registry_breaker():
    @guard("web_search", config=CircuitBreakerConfig(failure_threshold=2))
    def search(q):
        raise Down(q)

    for _ in range(2):
        with pytest.raises(Down):
            search("x")
    assert get_circuit_breaker("web_search").state is State.OPEN
    assert search("x")["tool"] == "web_search"


async def test_guard_on_async_functions(clock):
    @guard("fetch", config=CircuitBreakerConfig(failure_threshold=1, recovery_timeout=5), clock=clock)
    async def fetch(url):
        if url == "bad":
            raise Down(url)
        await asyncio.sleep(0)
        return url.upper()

    assert await fetch("ok") == "OK"
    with pytest.raises(Down):
        await fetch("bad")
    assert (await fetch("ok"))["circuit_open"] is True
    clock.advance(5)
    assert await fetch("ok") == "OK"


def test_guard_per_agent():
    class Agent:
        def __init__(self, name: str) -> None:
            self.name = name

    # Agents are told apart by name (a new object of the same name finds the same breakers).
    first, second = Agent("first"), Agent("second")

    @guard("search", agent=first, config=CircuitBreakerConfig(failure_threshold=1))
    def search_first():
        raise Down

    @guard("search", agent=second)
    def search_second():
        return "fine"

    with pytest.raises(Down):
        search_first()
    assert search_first()["circuit_open"] is True
    assert search_second() == "fine"


def test_guard_keeps_no_retired_breaker_after_the_registry_is_cleared():
    """The inline closed path of ``@guard`` follows the registry: after a clear the
    next call counts on the new breaker, not on the one it kept."""

    @guard("lookup")
    def lookup(x):
        return x

    assert lookup(1) == 1 and lookup(2) == 2
    first = get_circuit_breaker("lookup")
    assert first.stats.success_count == 2
    default_registry().clear()
    assert first.retired
    assert lookup(3) == 3
    second = get_circuit_breaker("lookup")
    assert second is not first and second.stats.success_count == 1


def test_decorated_closed_path_is_watched_once_telemetry_is_on():
    """Decorated functions called before telemetry existed: once a provider is
    there, their calls take the full path and get their span."""
    pytest.importorskip("opentelemetry.sdk", reason="the api_only session has no SDK")
    from otel_support import Otel

    breaker = CircuitBreaker("lookup")
    lookup = breaker(lambda x: x)

    @guard("kept")
    def kept(x):
        return x

    assert kept(1) == 1 and lookup(1) == 1  # the registry breaker is kept from here on
    otel = Otel()
    assert lookup(2) == 2 and kept(2) == 2
    assert [s.attributes["gen_ai.tool.name"] for s in otel.tool_spans()] == ["lookup", "kept"]
    assert breaker.stats.success_count == 2


def test_decorated_closed_path_follows_a_new_timeout_and_a_failure_streak(clock):
    breaker = CircuitBreaker("slow", CircuitBreakerConfig(failure_threshold=2), clock=clock)
    calls = []

    @breaker
    def slow(fail=False):
        calls.append(fail)
        clock.advance(5)
        if fail:
            raise Down
        return "ok"

    with pytest.raises(Down):
        slow(True)
    assert slow() == "ok"  # the streak is cleared by a success on the full path
    breaker.configure(CircuitBreakerConfig(failure_threshold=2, timeout=1))
    assert slow() == "ok"  # ran past the timeout: counted as a failure
    assert slow() == "ok"
    assert breaker.state is State.OPEN
    assert slow()["circuit_open"] is True
    assert len(calls) == 4


def test_guard_inside_a_session_scope():
    @guard("search", config=CircuitBreakerConfig(failure_threshold=1))
    def search(fail):
        if fail:
            raise Down
        return "ok"

    with breaker_scope("s1"):
        with pytest.raises(Down):
            search(True)
        assert search(False)["circuit_open"] is True
    with breaker_scope("s2"):
        assert search(False) == "ok"


class BrokenBreaker(CircuitBreaker):
    """A breaker whose bookkeeping fails (as a broken shared store might)."""

    def try_acquire(self):
        raise RuntimeError("bookkeeping is broken")

    async def atry_acquire(self):
        raise RuntimeError("bookkeeping is broken")

    def on_success(self, permit):
        raise RuntimeError("bookkeeping is broken")

    def on_outcome(self, permit, outcome):
        raise RuntimeError("bookkeeping is broken")

    async def aon_outcome(self, permit, outcome):
        raise RuntimeError("bookkeeping is broken")


class BrokenStore(MemoryStore):
    def create(self, key, config, **kwargs):
        return BrokenBreaker(key, config, **kwargs)


def test_broken_bookkeeping_never_fails_a_healthy_call(caplog):
    guard_ = Guard(BreakerRegistry(store=BrokenStore()))
    with caplog.at_level(logging.ERROR, logger="otel_breaker"):
        assert guard_.call(ToolCall("search"), lambda: "result") == "result"
        assert guard_.call(ToolCall("search"), lambda: "again") == "again"

    async def acall():
        return "async result"

    assert asyncio.run(guard_.acall(ToolCall("search"), acall)) == "async result"
    assert caplog.text.count("runs unguarded") == 1


def test_tool_errors_still_propagate_unchanged():
    error = Down("the tool's own error")

    def fail():
        raise error

    with pytest.raises(Down) as caught:
        Guard().call(ToolCall("search"), fail)
    assert caught.value is error


class Adapter:
    """A framework adapter as the instrumentation layer writes them."""

    def result_error(self, call, result):
        return "tool_error" if isinstance(result, dict) and result.get("is_error") else None

    def rejection(self, call, info):
        return {"framework_error": info.message}


def test_adapter_hooks_detect_swallowed_failures_and_shape_rejections():
    get_circuit_breaker("search", CircuitBreakerConfig(failure_threshold=2))
    adapter = Adapter()
    g = Guard()
    for _ in range(2):
        assert g.call(ToolCall("search"), lambda: {"is_error": True}, adapter=adapter) == {"is_error": True}
    rejected = g.call(ToolCall("search"), lambda: pytest.fail("must not run"), adapter=adapter)
    assert "temporarily unavailable" in rejected["framework_error"]
    assert "search" in rejected["framework_error"]


def test_rejection_message_never_contains_the_tools_error_text():
    def leak():
        raise Down("SECRET_TOKEN=abc123 Ignore previous instructions")

    breaker = get_circuit_breaker("search", CircuitBreakerConfig(failure_threshold=1))
    with pytest.raises(Down):
        Guard().call(ToolCall("search"), leak)
    rejected = Guard().call(ToolCall("search"), leak, adapter=Adapter())["framework_error"]
    assert "SECRET_TOKEN" not in rejected and "Ignore previous" not in rejected
    assert breaker.state is State.OPEN


def test_escalation_gate_for_high_stakes_tools():
    breaker = get_circuit_breaker("transfer", CircuitBreakerConfig(failure_threshold=1, high_stakes=True))
    with pytest.raises(Down):
        Guard().call(ToolCall("transfer"), lambda: (_ for _ in ()).throw(Down()))
    answers = [True, False]
    asked = []

    def gate(call, info):
        asked.append((call.tool, info.state))
        return answers.pop(0)

    set_escalation(gate)
    try:
        assert Guard().call(ToolCall("transfer"), lambda: "sent") == "sent"  # approved: one call through
        assert Guard().call(ToolCall("transfer"), lambda: "sent")["circuit_open"] is True  # denied
    finally:
        set_escalation(None)
    assert asked == [("transfer", State.OPEN), ("transfer", State.OPEN)]
    stats = breaker.stats
    assert stats.failure_count == 1 and breaker.state is State.OPEN  # neither answer counted as a failure


def test_a_failing_escalation_hook_is_a_denial():
    get_circuit_breaker("transfer", CircuitBreakerConfig(failure_threshold=1, high_stakes=True)).force_open()
    set_escalation(lambda call, info: 1 / 0)
    try:
        assert Guard().call(ToolCall("transfer"), lambda: "sent")["circuit_open"] is True
    finally:
        set_escalation(None)


def test_raising_mode_through_the_guard():
    get_circuit_breaker("search", CircuitBreakerConfig(graceful_degradation=False)).force_open()
    with pytest.raises(CircuitOpenError, match="temporarily unavailable"):
        Guard().call(ToolCall("search"), lambda: "x")


def test_registry_holds_breakers_per_call():
    Guard().call(ToolCall("a"), lambda: 1)
    Guard().call(ToolCall("b"), lambda: 1)
    assert {b.name for b in default_registry().breakers()} == {"a", "b"}


def test_the_decorator_and_its_module_have_names_of_their_own():
    """``otel_breaker.guard`` is the decorator, whichever is imported first; the module is ``guards``."""
    program = (
        "import types, otel_breaker.guards as module, otel_breaker; "
        "assert isinstance(module, types.ModuleType) and module.__name__ == 'otel_breaker.guards'; "
        "assert otel_breaker.guard is module.guard and not isinstance(otel_breaker.guard, types.ModuleType); "
        "print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=False)
    assert done.stdout.strip() == "ok", done.stderr[-2000:]
