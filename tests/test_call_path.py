"""The one entrance: every way in runs the shared decisions, and the sync and
async drivers of the one step sequence answer every scenario alike."""

from __future__ import annotations

import asyncio

import pytest

from otel_breaker import CircuitBreaker, CircuitBreakerConfig, State, guard
from otel_breaker import call_path as call_path_module
from otel_breaker.breaker import REJECTED
from otel_breaker.call_path import CallPath
from otel_breaker.classify import FAILURE, SUCCESS, ApprovalDeniedError
from otel_breaker.config import load_settings, set_settings
from otel_breaker.fallback import acall_with_fallback, call_with_fallback
from otel_breaker.guards import Guard
from otel_breaker.registry import BreakerRegistry
from otel_breaker.rejection import set_escalation
from otel_breaker.toolcall import ToolCall
from otel_breaker.upstream import UPSTREAM_PREFIX


def _entrances(registry: BreakerRegistry, tool):
    """Every way a guarded call happens, each as a zero-argument callable that makes one call."""

    async def atool():
        return tool()

    own = CircuitBreaker("tool", registry.settings.config_for("tool", None))
    decorated, adecorated = own(tool), own(atool)
    guarded = guard("tool", registry=registry)(tool)
    aguarded = guard("tool", registry=registry)(atool)
    call = ToolCall("tool")
    return {
        "breaker.call": lambda: own.call(tool),
        "breaker.acall": lambda: asyncio.run(own.acall(atool)),
        "@breaker": decorated,
        "@breaker async": lambda: asyncio.run(adecorated()),
        "@guard": guarded,
        "@guard async": lambda: asyncio.run(aguarded()),
        "Guard.call": lambda: Guard(registry).call(call, tool),
        "Guard.acall": lambda: asyncio.run(Guard(registry).acall(call, atool)),
        "fallback": lambda: call_with_fallback(("tool", tool), registry=registry),
        "fallback async": lambda: asyncio.run(acall_with_fallback(("tool", atool), registry=registry)),
    }


@pytest.mark.parametrize("traced", [False, True], ids=["quiet", "traced"])
def test_every_entrance_asks_the_one_state_machine(monkeypatch, request, traced):
    """Break the machine's admission (it rejects everything): every entrance must then
    reject without running the tool. And each call asks it exactly once."""
    if traced:
        request.getfixturevalue("otel")
    asked = []

    def rejecting(self, *args):
        asked.append(self.name)
        return REJECTED

    monkeypatch.setattr(CircuitBreaker, "try_acquire", rejecting)
    ran = []
    registry = BreakerRegistry()
    for name, make_call in _entrances(registry, lambda: ran.append(1) or "ran").items():
        asked.clear()
        result = make_call()
        assert ran == [], name
        assert isinstance(result, dict) and result["circuit_open"] is True, name
        assert asked == ["tool"], name


def test_every_entrance_runs_the_one_step_sequence_when_anything_watches(monkeypatch, otel):
    """With telemetry on, every entrance takes the step sequence (no copy of the steps elsewhere)."""
    real = call_path_module.steps
    taken = []

    def counting(*args, **kwargs):
        taken.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(call_path_module, "steps", counting)
    registry = BreakerRegistry()
    for name, make_call in _entrances(registry, lambda: "ran").items():
        taken.clear()
        assert make_call() == "ran", name
        assert taken == [1], name


def test_observe_counts_admission_and_outcome_together():
    registry = BreakerRegistry()
    path = CallPath(registry)
    breaker = path.observe(ToolCall("span_tool"), FAILURE)
    path.observe(ToolCall("span_tool"), SUCCESS)
    stats = breaker.stats
    assert (stats.total_requests, stats.failure_count, stats.success_count) == (2, 1, 1)
    assert breaker.is_idle()


def test_observe_gives_an_adapters_call_to_its_upstream_first():
    """As on the call path: a transport failure an adapter saw counts for the tool's
    upstream only (the tool is not to blame), an answer is the upstream's success, and
    an outcome without an adapter (a foreign span's status) leaves the upstream alone."""
    set_settings(load_settings({"OTEL_BREAKER_UPSTREAMS": "serp=tool", "OTEL_BREAKER_FAILURE_THRESHOLD": "2"}))
    registry = BreakerRegistry(clock=lambda: 1000.0)
    path, call, adapter = CallPath(registry), ToolCall("tool"), Adapter()
    upstream = registry.get(UPSTREAM_PREFIX + "serp")
    for _ in range(2):
        breaker = path.observe(call, FAILURE, exc=Transport(111, "Connection refused"), adapter=adapter)
    assert upstream.state is State.OPEN
    assert (breaker.stats.failure_count, breaker.state) == (0, State.CLOSED)
    path.observe(call, FAILURE, exc=RuntimeError("the tool's own bug"), adapter=adapter)  # not the upstream's
    path.observe(call, FAILURE)  # a span's status: the tool's alone
    assert (breaker.stats.failure_count, upstream.stats.failure_count) == (2, 2)
    path.observe(call, SUCCESS, "error: bad", adapter=adapter)  # the server answered
    assert (upstream.stats.success_count, upstream.stats.total_requests) == (1, 4)


# -- the sync and async drivers answer alike ---------------------------------------------


class Transport(ConnectionRefusedError):
    pass


class Adapter:
    """A framework adapter: an error result is a failure, a rejection is a string."""

    error_results_are_answers = True

    def result_error(self, call, result):
        return "tool_error" if isinstance(result, str) and result.startswith("error") else None

    def rejection(self, call, info):
        return f"rejected: {info.state.value}"


def _body(kind: str):
    if kind == "fail":
        raise RuntimeError("tool failed")
    if kind == "deny":
        raise ApprovalDeniedError("not approved")
    if kind == "transport":
        raise Transport(111, "Connection refused")
    if kind == "error_result":
        return "error: bad"
    return "ok"


SCENARIOS = {
    "healthy": ["ok", "ok"],
    "opens_then_rejects": ["fail", "fail", "ok", "ok"],
    "denials_are_neutral": ["deny", "deny", "ok"],
    "error_results_count": ["error_result", "error_result", "ok"],
    "upstream_opens_on_transport_failures": ["transport", "transport", "ok", "ok"],
}


def _run_scenario(kinds, use_async: bool, adapter, escalate: bool, otel):
    set_settings(load_settings({"OTEL_BREAKER_UPSTREAMS": "serp=tool", "OTEL_BREAKER_FAILURE_THRESHOLD": "2"}))
    registry = BreakerRegistry(clock=lambda: 1000.0)
    config = CircuitBreakerConfig(failure_threshold=2, high_stakes=escalate)
    path = CallPath(registry)
    answers = []
    for kind in kinds:

        def tool(kind=kind):
            return _body(kind)

        async def atool(kind=kind):
            return _body(kind)

        try:
            if use_async:
                answer = asyncio.run(path.arun(ToolCall("tool"), atool, adapter=adapter, config=config))
            else:
                answer = path.run(ToolCall("tool"), tool, adapter=adapter, config=config)
        except BaseException as exc:
            answer = ("raised", type(exc).__name__)
        if isinstance(answer, dict):
            answer = {k: v for k, v in answer.items() if k != "retry_after"}
        answers.append(answer)
    breakers = {b.name: (b.state, b.stats.failure_count, b.stats.success_count) for b in registry.breakers()}
    spans = [
        (s.name, {k: v for k, v in s.attributes.items() if "duration" not in k}, s.status.status_code)
        for s in otel.finished_spans()
    ]
    otel.spans.clear()
    set_settings(None)
    return answers, breakers, spans


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("with_adapter", [False, True], ids=["plain", "adapter"])
def test_the_sync_and_async_drivers_answer_alike(otel, scenario, with_adapter):
    adapter = Adapter() if with_adapter else None
    sync = _run_scenario(SCENARIOS[scenario], False, adapter, False, otel)
    async_ = _run_scenario(SCENARIOS[scenario], True, adapter, False, otel)
    assert sync == async_
    assert sync[0]  # something was answered


def test_an_escalated_call_through_an_open_upstream_is_marked_alike(otel):
    """A human approves a high-stakes call while its upstream is open: it runs, and
    its span says it was escalated, on both drivers."""
    set_escalation(lambda call, info: True)
    try:
        results = []
        for use_async in (False, True):
            set_settings(load_settings({"OTEL_BREAKER_UPSTREAMS": "serp=tool"}))
            registry = BreakerRegistry(clock=lambda: 1000.0)
            registry.get(UPSTREAM_PREFIX + "serp").force_open()
            path = CallPath(registry)
            config = CircuitBreakerConfig(high_stakes=True)

            async def atool():
                return "sent"

            if use_async:
                answer = asyncio.run(path.arun(ToolCall("tool"), atool, config=config))
            else:
                answer = path.run(ToolCall("tool"), lambda: "sent", config=config)
            spans = [s for s in otel.finished_spans() if s.attributes.get("gen_ai.tool.name") == "tool"]
            otel.spans.clear()
            assert answer == "sent"
            results.append([s.attributes.get("otel_breaker.escalated") for s in spans])
            assert registry.get(UPSTREAM_PREFIX + "serp").state is State.OPEN
            set_settings(None)
        assert results[0] == results[1] == [True]
    finally:
        set_escalation(None)
