"""Retries below the model, side-effect classes and the retry budget (docs/retries.md).

Every back-off goes through an injected sleeper that moves the breakers' fake clock:
no test sleeps.
"""

from __future__ import annotations

import asyncio
import errno
import logging

import httpx
import pytest

from otel_breaker import Guard, ToolCall, effects, guard, retry_policy
from otel_breaker.breaker import CircuitBreaker, CircuitBreakerConfig, State
from otel_breaker.call_steps import OutcomeUnknownError
from otel_breaker.config import load_settings, set_settings
from otel_breaker.registry import default_registry

RETRY = {"OTEL_BREAKER_RETRY": "transient"}


class Backend:
    """A tool body whose first ``failures`` calls raise ``error()``, then answer."""

    def __init__(self, failures: int, error=lambda: ConnectionResetError(errno.ECONNRESET, "reset by peer")):
        self.failures = failures
        self.error = error
        self.runs = 0

    def __call__(self, query: str = "q") -> str:
        self.runs += 1
        if self.runs <= self.failures:
            raise self.error()
        return f"answer to {query}"


def _status(code: int, headers: dict[str, str] | None = None) -> httpx.HTTPStatusError:
    response = httpx.Response(code, headers=headers, request=httpx.Request("GET", "http://127.0.0.1/search"))
    try:
        response.raise_for_status()
    except httpx.HTTPStatusError as exc:
        return exc
    raise AssertionError("no error")


@pytest.fixture(autouse=True)
def sleeper(registry_clock):
    """Back-offs move the registry's fake clock and are recorded; nothing sleeps."""
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        registry_clock.advance(seconds)

    async def asleep(seconds: float) -> None:
        sleep(seconds)

    retry_policy.set_retry_timing(sleep, asleep)
    yield waits
    retry_policy.set_retry_timing()
    effects.clear_registered_effects()


def settings(**env: str) -> None:
    set_settings(load_settings({f"OTEL_BREAKER_{k.upper()}": v for k, v in env.items()}))


def test_without_retries_nothing_is_retried(sleeper):
    settings(tool_effects="search=read_only")
    backend = Backend(1)
    with pytest.raises(ConnectionResetError):
        guard("search")(backend)()
    assert backend.runs == 1 and sleeper == []


def test_a_transient_failure_of_a_read_only_tool_is_retried_once(sleeper, otel):
    settings(retry="transient", tool_effects="search=read_only")
    backend = Backend(1)
    assert guard("search")(backend)("x") == "answer to x"
    assert backend.runs == 2
    assert len(sleeper) == 1 and 0 < sleeper[0] <= retry_policy.MAX_BACKOFF
    assert otel.metric_value("otel_breaker.retries", otel_breaker__outcome="success") == 1
    # Each attempt is its own outcome: one failure and one success.
    breaker = default_registry().find("search")[0]
    assert breaker.lifetime_counts()[:2] == (1, 1)


@pytest.mark.parametrize("kind", ["unknown", "destructive"])
def test_a_tool_not_known_safe_to_repeat_is_never_retried(kind, sleeper):
    settings(retry="transient", retry_attempts="10", tool_effects=f"send={kind}")
    backend = Backend(5, lambda: _status(503))
    with pytest.raises(httpx.HTTPStatusError):
        guard("send")(backend)()
    assert backend.runs == 1 and sleeper == []


def test_mistakes_and_unrecognised_failures_are_not_retried(sleeper):
    settings(retry="transient", tool_effects="*=read_only")
    errors = {"lookup_404": lambda: _status(404), "lookup_500": lambda: _status(500)}
    for name, error in {**errors, "crash": lambda: RuntimeError("crashed")}.items():
        backend = Backend(1, error)
        with pytest.raises((httpx.HTTPStatusError, RuntimeError)):
            guard(name)(backend)()
        assert backend.runs == 1
    assert sleeper == []


@pytest.mark.parametrize("code", [502, 503, 504])
def test_gateway_statuses_are_retried(code, sleeper):
    settings(retry="transient", tool_effects="*=idempotent")
    backend = Backend(1, lambda: _status(code))
    assert guard("lookup")(backend)() == "answer to q"
    assert backend.runs == 2


def test_at_most_retry_attempts_then_the_last_failure_with_the_attempts(sleeper):
    settings(retry="transient", tool_effects="*=read_only", failure_threshold="50")
    backend = Backend(10)
    with pytest.raises(ConnectionResetError) as raised:
        guard("search")(backend)()
    assert backend.runs == 3, "the first attempt and two retries (the default)"
    assert any("3 times" in note for note in raised.value.__notes__)
    assert sleeper[1] > sleeper[0] / 2, "the back-off grows (jittered)"


def test_the_last_failure_the_model_reads_says_how_many_attempts_were_made(sleeper):
    """Frameworks show the model ``str()`` or ``repr()`` of a tool's exception: after
    retries, its message ends with the number of attempts; its type is its own."""
    settings(retry="transient", tool_effects="*=read_only", failure_threshold="50")
    backend = Backend(10, lambda: _status(503))
    with pytest.raises(httpx.HTTPStatusError) as raised:
        guard("search")(backend)()
    note = "(otel-breaker: the call failed 3 times; retried 2 times below the model)"
    assert str(raised.value).startswith("Server error '503 Service Unavailable'")
    assert str(raised.value).endswith(note) and note in repr(raised.value)
    assert raised.value.response.status_code == 503, "the exception is the tool's own"


def test_a_message_attribute_says_how_many_attempts_too(sleeper):
    class Unreachable(ConnectionError):
        def __init__(self, message: str) -> None:
            self.message = message
            super().__init__(message)

    settings(retry="transient", tool_effects="*=read_only", failure_threshold="50")
    with pytest.raises(Unreachable) as raised:
        guard("search")(Backend(10, lambda: Unreachable("search backend unreachable")))()
    assert raised.value.message == str(raised.value)
    assert raised.value.message.endswith("failed 3 times; retried 2 times below the model)")


def test_an_exception_that_formats_its_own_message_keeps_it_and_gets_a_note(sleeper):
    settings(retry="transient", tool_effects="*=read_only", failure_threshold="50")
    with pytest.raises(ConnectionResetError) as raised:
        guard("search")(Backend(10))()
    assert str(raised.value) == "[Errno 104] reset by peer", "an OSError's message is its errno's"
    assert raised.value.errno == errno.ECONNRESET
    assert any("failed 3 times" in note for note in raised.value.__notes__)


@pytest.mark.parametrize("env", [{}, {"tool_effects": "*=destructive"}, {"tool_effects": "*=unknown"}])
def test_a_failure_not_retried_reads_as_it_came(env, sleeper):
    settings(**({"retry": "transient"} if env else {}), **env)
    with pytest.raises(httpx.HTTPStatusError) as raised:
        guard("search")(Backend(10, lambda: _status(503)))()
    assert "otel-breaker" not in str(raised.value) and not getattr(raised.value, "__notes__", None)


async def test_an_async_retried_failure_says_how_many_attempts_too(sleeper):
    settings(retry="transient", tool_effects="*=read_only", failure_threshold="50", retry_attempts="1")
    runs = []

    async def search(query: str) -> str:
        runs.append(query)
        raise _status(502)

    with pytest.raises(httpx.HTTPStatusError) as raised:
        await guard("search")(search)("q")
    assert len(runs) == 2 and str(raised.value).endswith("failed 2 times; retried 1 times below the model)")


def test_noting_attempts_on_an_odd_exception_never_fails_the_call(sleeper):
    class Odd(ConnectionError):
        def __str__(self) -> str:
            raise RuntimeError("no text")

    settings(retry="transient", tool_effects="*=read_only", failure_threshold="50")
    with pytest.raises(Odd):
        guard("search")(Backend(10, lambda: Odd("reset")))()


def test_a_short_429_hint_is_waited_out_a_long_one_goes_to_the_model(sleeper):
    settings(retry="transient", tool_effects="*=read_only")
    short = Backend(1, lambda: _status(429, {"Retry-After": "1"}))
    assert guard("quota")(short)() == "answer to q"
    assert short.runs == 2 and sleeper[0] >= 1, "waited for what the server asked"
    long = Backend(1, lambda: _status(429, {"Retry-After": "30"}))
    with pytest.raises(httpx.HTTPStatusError):
        guard("quota_long")(long)()
    assert long.runs == 1


def test_never_while_the_breaker_is_open(sleeper):
    settings(retry="transient", tool_effects="*=read_only", failure_threshold="1")
    backend = Backend(5)
    with pytest.raises(ConnectionResetError):
        guard("search")(backend)()
    assert backend.runs == 1, "the first failure opened the breaker: no retry through it"
    assert default_registry().find("search")[0].state is State.OPEN


def test_a_retry_never_outlives_the_calls_timeout(sleeper):
    set_settings(load_settings({**RETRY, "OTEL_BREAKER_TOOL_EFFECTS": "*=read_only"}))
    config = CircuitBreakerConfig(retry="transient", effects="read_only", timeout=0.01)
    backend = Backend(1)
    with pytest.raises(ConnectionResetError):
        guard("search", config=config)(backend)()
    assert backend.runs == 1, "the back-off would pass the call's 10 ms"


def test_retry_budget_keeps_a_dead_backend_within_twenty_percent(sleeper, registry_clock):
    settings(retry="transient", tool_effects="*=read_only", failure_threshold="1000")
    backend = Backend(10_000)
    tool = guard("search")(backend)
    calls = 200
    for _ in range(calls):
        with pytest.raises(ConnectionResetError):
            tool()
        registry_clock.advance(0.05)  # 20 calls a second
    retries = backend.runs - calls
    assert 0 < retries <= calls * retry_policy.BUDGET_RATIO + retry_policy.BUDGET_RESERVE * 2


def test_budget_exhaustion_is_an_event_and_a_count(sleeper, otel):
    settings(retry="transient", tool_effects="*=read_only", failure_threshold="1000")
    backend = Backend(10_000)
    tool = guard("search")(backend)
    for _ in range(5):
        with pytest.raises(ConnectionResetError):
            tool()
    assert otel.metric_value("otel_breaker.retries", otel_breaker__outcome="budget_exhausted") >= 1


def test_the_breaker_opens_no_later_with_retries(sleeper):
    def opened_after(env: dict[str, str], name: str) -> tuple[int, int]:
        settings(tool_effects="*=read_only", failure_threshold="3", **env)
        backend = Backend(10_000)
        tool = guard(name)(backend)
        for call in range(1, 20):
            try:
                tool()
            except ConnectionResetError:
                pass
            if default_registry().find(name)[0].state is State.OPEN:
                return call, backend.runs
        raise AssertionError("never opened")

    without, reached_without = opened_after({}, "off")
    with_retries, reached_with = opened_after({"retry": "transient"}, "on")
    assert with_retries <= without
    assert reached_with <= reached_without * 1.2


def test_each_attempt_is_its_own_span_linked_to_the_first(sleeper, otel):
    settings(retry="transient", tool_effects="search=read_only")
    backend = Backend(1)
    call = ToolCall("search", call_id="call-7")
    assert Guard().call(call, backend) == "answer to q"
    spans = otel.tool_spans("search")
    assert len(spans) == 2
    first, second = spans
    assert first.attributes["gen_ai.tool.call.id"] == second.attributes["gen_ai.tool.call.id"] == "call-7"
    assert first.attributes["otel_breaker.tool.effects"] == "read_only"
    assert second.attributes["otel_breaker.retry.attempt"] == 2
    assert [link.context.span_id for link in second.links] == [first.context.span_id]


def test_the_async_driver_awaits_the_back_off(sleeper):
    settings(retry="transient", tool_effects="search=read_only")
    backend = Backend(1)

    async def search(query: str) -> str:
        return backend(query)

    assert asyncio.run(guard("search")(search)("y")) == "answer to y"
    assert backend.runs == 2 and len(sleeper) == 1


def test_a_cancelled_caller_ends_the_retry(registry_clock):
    settings(retry="transient", tool_effects="search=read_only")
    backend = Backend(5)

    async def asleep(seconds: float) -> None:
        raise asyncio.CancelledError

    retry_policy.set_retry_timing(None, asleep)

    async def search() -> str:
        return backend()

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(guard("search")(search)())
    assert backend.runs == 1


# -- destructive tools: never run twice, outcome unknown ----------------------------------------------


@pytest.mark.parametrize(
    "env",
    [{}, {"retry": "transient"}, {"retry": "transient", "retry_attempts": "10", "failure_threshold": "100"}],
)
def test_a_destructive_tool_whose_call_timed_out_runs_once_and_the_model_is_told_to_check(env, sleeper):
    settings(tool_effects="send_email=destructive", **env)
    backend = Backend(5, lambda: httpx.ReadTimeout("timed out"))
    with pytest.raises(OutcomeUnknownError) as raised:
        guard("send_email")(backend)()
    assert backend.runs == 1
    assert "outcome unknown: the call may have taken effect; check before calling again" in str(raised.value)
    assert isinstance(raised.value.__cause__, httpx.ReadTimeout)
    assert default_registry().find("send_email")[0].stats.failure_count == 1, "counted as a failure"


def test_our_own_timeout_of_a_destructive_tool_is_outcome_unknown(sleeper):
    config = CircuitBreakerConfig(timeout=0.05, effects="destructive", retry="transient")
    runs = []

    async def pay() -> str:
        runs.append(1)
        await asyncio.sleep(30)  # cancelled by the breaker's timeout
        return "paid"

    with pytest.raises(OutcomeUnknownError, match="outcome unknown"):
        asyncio.run(guard("pay", config=config)(pay)())
    assert runs == [1]


def test_an_identical_call_after_an_unknown_outcome_is_no_loop(sleeper):
    settings(tool_effects="send_email=destructive", loop_count="mistakes,failures", loop_limit="1")
    backend = Backend(5, lambda: httpx.ReadTimeout("timed out"))
    tool = guard("send_email")(backend)
    for _ in range(3):
        with pytest.raises(OutcomeUnknownError):
            tool("hello")
    assert backend.runs == 3, "the model checked and called again: never cut as a loop"


def test_a_refused_connection_is_no_unknown_outcome(sleeper):
    settings(tool_effects="send_email=destructive")
    backend = Backend(1, lambda: ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"))
    with pytest.raises(ConnectionRefusedError):
        guard("send_email")(backend)()


# -- where a class comes from --------------------------------------------------------------------------


def test_annotations_read_as_the_mcp_spec_defines_them():
    read = effects.from_annotations
    assert read({"readOnlyHint": True}) == "read_only"
    assert read({"readOnlyHint": False, "idempotentHint": True}) == "idempotent"
    assert read({"destructiveHint": True}) == "destructive"
    assert read({"readOnlyHint": False}) is None
    assert read(None) is None


@pytest.mark.parametrize("value", ["true", 1, "yes", None, [True]])
def test_annotations_of_the_wrong_type_are_ignored(value):
    assert effects.from_annotations({"readOnlyHint": value, "idempotentHint": value}) is None


def test_the_users_word_wins_over_annotations():
    effects.announce("srv@1", "delete_all", {"readOnlyHint": True})
    assert effects.effects_of("delete_all", "srv@1", None) == "read_only"
    effects.register_tool_effects("delete_*", "destructive")
    assert effects.effects_of("delete_all", "srv@1", None) == "destructive"
    assert effects.effects_of("delete_all", "srv@1", "idempotent") == "idempotent"
    assert effects.effects_of("other", "srv@1", None) == "unknown"


def test_tool_effects_from_the_environment_reach_the_breaker():
    settings(tool_effects="search=read_only,get_*=idempotent,send_email=destructive")
    assert default_registry().breaker_for(ToolCall("get_user")).config.effects == "idempotent"
    assert default_registry().breaker_for(ToolCall("send_email")).config.effects == "destructive"
    assert default_registry().breaker_for(ToolCall("other")).config.effects is None


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("OTEL_BREAKER_RETRY", "transeint"),
        ("OTEL_BREAKER_RETRY_ATTEMPTS", "two"),
        ("OTEL_BREAKER_RETRY_ATTEMPTS", "50"),
        ("OTEL_BREAKER_RETRY_MAX_WAIT", "-1"),
        ("OTEL_BREAKER_TOOL_EFFECTS", "search=readonly-ish,get_*=idempotent,oops"),
    ],
)
def test_a_bad_value_is_one_logged_line_and_retries_nothing(variable, value, caplog, sleeper):
    env = {variable: value}
    if variable != "OTEL_BREAKER_RETRY":
        env.setdefault("OTEL_BREAKER_TOOL_EFFECTS", "get_*=idempotent")
    with caplog.at_level(logging.WARNING, logger="otel_breaker"):
        loaded = load_settings(env, strict=False)
    lines = [r.getMessage() for r in caplog.records if variable in r.getMessage()]
    assert len(lines) == 1, lines
    set_settings(loaded)
    if variable == "OTEL_BREAKER_TOOL_EFFECTS":
        assert loaded.tool_effects == (("get_*", "idempotent"),), "the valid entry applies"
    backend = Backend(1)
    with pytest.raises(ConnectionResetError):
        guard("get_user")(backend)()
    assert backend.runs == 1, "retries are off unless OTEL_BREAKER_RETRY says transient"


def test_config_rejects_bad_retry_options():
    for options in ({"retry": "always"}, {"retry_attempts": 0}, {"effects": "harmless"}, {"retry_max_wait": -1}):
        with pytest.raises(ValueError):
            CircuitBreakerConfig(**options)


def test_a_breaker_call_with_retries_on_runs_the_quick_route(sleeper):
    breaker = CircuitBreaker("search", CircuitBreakerConfig(retry="transient", effects="read_only"))
    assert breaker.plain, "retries cost a successful call nothing: the quick route stays"
    backend = Backend(1)
    assert breaker.call(backend) == "answer to q"
    assert backend.runs == 2


class _Listed:
    """A tool as an MCP listing holds it: a name and its annotations (the SDK's attribute names)."""

    def __init__(self, name: str, **annotations: object) -> None:
        self.name = name
        self.annotations = annotations or None


def test_a_servers_listing_announces_its_tools_effects():
    from otel_breaker.instrumentation.mcp_identity import note_effects

    note_effects(
        "notes@1.0",
        [
            _Listed("search", readOnlyHint=True),
            _Listed("delete_note", destructive_hint=True),
            _Listed("touch", idempotentHint="yes"),  # the wrong type: no hint
            _Listed("plain"),
        ],
    )
    assert effects.effects_of("search", "notes@1.0", None) == "read_only"
    assert effects.effects_of("delete_note", "notes@1.0", None) == "destructive"
    assert effects.effects_of("touch", "notes@1.0", None) == "unknown"
    assert effects.effects_of("plain", "notes@1.0", None) == "unknown"
    assert effects.effects_of("search", "other@2.0", None) == "unknown", "another server's tool of that name"


def test_a_destructive_tools_connection_dropped_behind_an_upstream_is_outcome_unknown(sleeper):
    settings(upstreams="mail=send_email", tool_effects="send_email=destructive", retry="transient")
    backend = Backend(5)  # the connection is reset after the request left
    with pytest.raises(OutcomeUnknownError):
        guard("send_email")(backend)()
    assert backend.runs == 1


@pytest.mark.parametrize("loop", ["trio", "uvloop"])
def test_the_back_off_waits_on_any_event_loop(loop):
    """The default back-off awaits on the loop that runs the call (a few milliseconds)."""
    settings(retry="transient", tool_effects="*=read_only")
    retry_policy.set_retry_timing(jitter=lambda: 0.0)
    runs = []

    async def search(query: str) -> str:
        runs.append(query)
        if len(runs) == 1:
            raise ConnectionResetError(errno.ECONNRESET, "reset by peer")
        return f"answer to {query}"

    async def main() -> str:
        return await guard("search")(search)("q")

    if loop == "trio":
        trio = pytest.importorskip("trio")
        answer = trio.run(main)
    else:
        uvloop = pytest.importorskip("uvloop")
        answer = uvloop.run(main())
    assert answer == "answer to q" and len(runs) == 2
