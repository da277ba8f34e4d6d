"""Retry hints: a rate-limited failure opens the breaker at once, for as long as the server asked."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from email.utils import format_datetime

import httpx
import pytest
import requests

from otel_breaker import CircuitBreaker, CircuitBreakerConfig, State, register_retry_hint, unregister_retry_hint
from otel_breaker.retry_hint import retry_hint

WALL = 1_800_000_000.0  # the wall clock the tests pin (an HTTP date is a wall time)


def wall() -> float:
    return WALL


def httpx_error(status: int, headers: dict[str, str]) -> httpx.HTTPStatusError:
    request = httpx.Request("GET", "http://127.0.0.1/search")
    response = httpx.Response(status, headers=headers, request=request)
    return httpx.HTTPStatusError("rate limited", request=request, response=response)


def requests_error(status: int, headers: dict[str, str]) -> requests.HTTPError:
    response = requests.Response()
    response.status_code = status
    response.headers.update(headers)
    return requests.HTTPError("rate limited", response=response)


class AiohttpLikeError(Exception):
    """The attributes of ``aiohttp.ClientResponseError``: ``status`` and ``headers`` on the error."""

    def __init__(self, status: int, headers: dict[str, str]) -> None:
        super().__init__("rate limited")
        self.status = status
        self.headers = headers


class SdkLikeError(Exception):
    """The attributes of ``openai.APIStatusError``/``anthropic.APIStatusError``:
    ``status_code`` on the error, the ``httpx.Response`` as ``response``."""

    def __init__(self, status: int, headers: dict[str, str]) -> None:
        super().__init__("rate limited")
        self.status_code = status
        self.response = httpx.Response(status, headers=headers, request=httpx.Request("POST", "http://127.0.0.1/v1"))


class ErrorData:
    def __init__(self, data: object) -> None:
        self.code = -32000
        self.message = "rate limited"
        self.data = data


class McpLikeError(Exception):
    """``mcp.shared.exceptions.McpError``: the JSON-RPC error object as ``error``."""

    def __init__(self, data: object) -> None:
        super().__init__("rate limited")
        self.error = ErrorData(data)


@pytest.mark.parametrize("make", [httpx_error, requests_error, AiohttpLikeError, SdkLikeError])
@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_seconds_from_every_http_client(make, status):
    assert retry_hint(make(status, {"Retry-After": "17"}), wall) == 17.0
    assert retry_hint(make(status, {"retry-after": "2.5"}), wall) == 2.5


@pytest.mark.parametrize("make", [httpx_error, requests_error, AiohttpLikeError, SdkLikeError])
def test_retry_after_as_an_http_date(make):
    when = format_datetime(datetime.fromtimestamp(WALL + 90, tz=timezone.utc), usegmt=True)
    assert retry_hint(make(429, {"Retry-After": when}), wall) == pytest.approx(90.0)


def test_a_429_without_a_hint_is_no_hint():
    assert retry_hint(httpx_error(429, {}), wall) is None
    assert retry_hint(requests_error(429, {"content-type": "text/plain"}), wall) is None


def test_other_statuses_carry_no_hint():
    assert retry_hint(httpx_error(500, {"Retry-After": "10"}), wall) is None
    assert retry_hint(httpx_error(301, {"Retry-After": "10"}), wall) is None


def test_openai_millisecond_header_and_reset_headers():
    assert retry_hint(SdkLikeError(429, {"retry-after-ms": "1500"}), wall) == 1.5
    # OpenAI's durations: the longest reset is the one sure to be over.
    headers = {"x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "6m0s"}
    assert retry_hint(SdkLikeError(429, headers), wall) == 360.0
    assert retry_hint(httpx_error(429, {"x-ratelimit-reset": "20ms"}), wall) == pytest.approx(0.02)
    assert retry_hint(httpx_error(429, {"X-RateLimit-Reset": str(int(WALL + 42))}), wall) == 42.0
    # Retry-After wins over the reset headers.
    assert retry_hint(httpx_error(429, {"Retry-After": "3", "x-ratelimit-reset": "100"}), wall) == 3.0


def test_a_numeric_retry_after_attribute():
    error = RuntimeError("slow down")
    error.retry_after = 12  # type: ignore[attr-defined]
    assert retry_hint(error, wall) == 12.0
    error.retry_after = "12"  # type: ignore[attr-defined]
    assert retry_hint(error, wall) is None  # only a number
    error.retry_after = True  # type: ignore[attr-defined]
    assert retry_hint(error, wall) is None


def test_an_mcp_error_whose_data_carries_one():
    assert retry_hint(McpLikeError({"retry_after": 30}), wall) == 30.0
    assert retry_hint(McpLikeError({"retryAfter": "4"}), wall) == 4.0
    assert retry_hint(McpLikeError({"other": 1}), wall) is None
    assert retry_hint(McpLikeError(["not", "a", "dict"]), wall) is None


def test_a_wrapped_error_is_read_through_its_cause():
    try:
        try:
            raise httpx_error(429, {"Retry-After": "8"})
        except httpx.HTTPStatusError as inner:
            raise RuntimeError("tool failed") from inner
    except RuntimeError as outer:
        assert retry_hint(outer, wall) == 8.0


@pytest.mark.parametrize(
    "value",
    ["-5", "0", "soon", "", "Wed, 21 Oct 2015 07:28:00 GMT", "nan", "x" * 10_000, "1e400-"],
)
def test_bad_retry_after_values_are_no_hint(value):
    assert retry_hint(httpx_error(429, {"Retry-After": value}), wall) is None


def test_an_enormous_hint_is_returned_and_the_breaker_caps_it(clock):
    hint = retry_hint(httpx_error(429, {"Retry-After": "1e300"}), wall)
    assert hint == 1e300
    breaker = CircuitBreaker("search", CircuitBreakerConfig(max_recovery_timeout=600), clock=clock)
    assert breaker.open_for(hint) == 600.0
    assert breaker.retry_after == 600.0
    assert breaker.open_for(math.inf) == 600.0
    assert breaker.open_for(-3) == 0.0 and breaker.open_for(math.nan) == 0.0


def test_registered_readers_come_first_and_a_broken_one_is_skipped():
    class Throttled(Exception):
        pass

    def broken(exc: BaseException) -> float | None:
        raise ValueError("bug in a reader")

    def reader(exc: BaseException) -> float | None:
        return 5.0 if isinstance(exc, Throttled) else None

    register_retry_hint(reader)
    register_retry_hint(broken)
    try:
        assert retry_hint(Throttled(), wall) == 5.0
        assert retry_hint(ValueError(), wall) is None
    finally:
        unregister_retry_hint(reader)
        unregister_retry_hint(broken)
    assert retry_hint(Throttled(), wall) is None
    unregister_retry_hint(reader)  # absent: nothing happens


def rate_limited(seconds: str):
    def tool() -> None:
        raise httpx_error(429, {"Retry-After": seconds})

    return tool


def test_one_hinted_failure_opens_at_once_for_the_hint_and_the_probe_waits(clock):
    breaker = CircuitBreaker("search", CircuitBreakerConfig(failure_threshold=5, recovery_timeout=60), clock=clock)
    with pytest.raises(httpx.HTTPStatusError):
        breaker.call(rate_limited("120"))
    assert breaker.state is State.OPEN
    rejected = breaker.call(lambda: "ran")
    assert rejected["circuit_open"] is True and rejected["retry_after_s"] == 120
    clock.advance(61)  # past the ordinary cooldown: still open, the server asked for 120 s
    assert breaker.state is State.OPEN
    assert breaker.call(lambda: "ran")["retry_after_s"] == 59
    clock.advance(59)
    assert breaker.call(lambda: "ran") == "ran"  # the probe runs once the hint is over


def test_a_short_hint_shortens_the_wait(clock):
    breaker = CircuitBreaker("search", CircuitBreakerConfig(recovery_timeout=60), clock=clock)
    with pytest.raises(httpx.HTTPStatusError):
        breaker.call(rate_limited("5"))
    clock.advance(5)
    assert breaker.call(lambda: "ran") == "ran"


def test_a_429_without_a_hint_is_a_plain_failure(clock):
    breaker = CircuitBreaker("search", CircuitBreakerConfig(failure_threshold=3), clock=clock)
    for _ in range(2):
        with pytest.raises(httpx.HTTPStatusError):
            breaker.call(rate_limited(""))
    assert breaker.state is State.CLOSED
    with pytest.raises(httpx.HTTPStatusError):
        breaker.call(rate_limited("garbage"))
    assert breaker.state is State.OPEN  # the third failure, by the threshold
    assert breaker.retry_after == 60.0


def test_a_hint_never_shortens_a_manual_open(clock):
    breaker = CircuitBreaker("search", CircuitBreakerConfig(), clock=clock)
    breaker.force_open()
    breaker.open_for(5)
    assert breaker.retry_after == math.inf


async def test_the_async_path_opens_for_the_hint_too(clock):
    breaker = CircuitBreaker("search", CircuitBreakerConfig(), clock=clock)

    async def tool() -> None:
        raise requests_error(503, {"Retry-After": "30"})

    with pytest.raises(requests.HTTPError):
        await breaker.acall(tool)
    assert breaker.state is State.OPEN and breaker.retry_after == 30.0


def test_a_servers_hint_opens_its_upstream_and_every_tool_behind_it_waits(registry_clock):
    from otel_breaker import guard, upstream
    from otel_breaker.config import load_settings, set_settings
    from otel_breaker.registry import default_registry

    set_settings(load_settings({"OTEL_BREAKER_UPSTREAMS": "serp=web_search,news_search"}))
    runs = []

    @guard("web_search")
    def web_search() -> str:
        runs.append("web")
        raise httpx_error(429, {"Retry-After": "45"})

    @guard("news_search")
    def news_search() -> str:
        runs.append("news")
        return "news"

    with pytest.raises(httpx.HTTPStatusError):
        web_search()
    serp = upstream.breaker_of(default_registry(), "serp")
    assert serp.state is State.OPEN and serp.retry_after == 45.0
    assert default_registry().get("web_search").state is State.CLOSED  # the server's hint, not the tool's failure
    rejected = news_search()
    assert rejected["upstream"] == "serp" and rejected["retry_after_s"] == 45
    assert runs == ["web"]
    registry_clock.advance(45)
    assert news_search() == "news"


def test_the_status_block_reports_the_servers_retry_time(registry_clock):
    from otel_breaker import guard
    from otel_breaker.degrade import tool_status_block

    @guard("web_search")
    def web_search() -> str:
        raise httpx_error(429, {"Retry-After": "120"})

    with pytest.raises(httpx.HTTPStatusError):
        web_search()
    block = tool_status_block()
    assert "'web_search' (open): may be retried in about 120s" in block
