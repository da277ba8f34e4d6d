"""How one breaker decides: :class:`CircuitBreakerConfig`, the presets and their validation.

Apart from the state machine (``breaker.py``) so that settings, stores and the
command line can read and validate a configuration without the machine, and
so that each module keeps one job.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from otel_breaker.effects import CLASSES as EFFECT_CLASSES

MODES = ("enforce", "observe")
#: ``retry``: None (off) or ``"transient"``.
RETRY_MODES = (None, "transient")
#: Most retries of one call: beyond a few, a retry is a storm, not a blip.
MAX_RETRY_ATTEMPTS = 10
#: Longest retry hint waited out below the model (seconds); longer ones go to the model.
MAX_RETRY_WAIT = 60.0

#: How long a half-open probe holds its slot when the breaker has no ``timeout``:
#: a probe that hangs forever must not keep the breaker half-open for good
#: (the shared store uses the same limit).
PROBE_LEASE_SECONDS = 60.0

#: Starting points from the agent circuit breaker pattern's table. No preset sets
#: a per-call timeout (the default, None, applies): a slow tool is not a broken
#: tool, so a timeout is only ever switched on explicitly (``timeout=``,
#: ``OTEL_BREAKER_TIMEOUT``, a per-tool override), and a preset never clears one.
PRESETS: dict[str, dict[str, Any]] = {
    "fast_api": {"failure_threshold": 3, "recovery_timeout": 30.0},
    "slow_tool": {"failure_threshold": 2, "recovery_timeout": 120.0},
    "code_executor": {"failure_threshold": 2, "recovery_timeout": 60.0},
}


@dataclass(frozen=True)
class CircuitBreakerConfig:
    """How one breaker decides. Defaults are the ones agent users already know.

    Every option is documented in docs/python-api.md with its default. ``timeout`` is
    None by default: a healthy tool that takes long (a 45 s compile or scrape)
    must never count as a failure unless the user asked for a per-call timeout.
    """

    failure_threshold: int = 5
    recovery_timeout: float = 60.0
    success_threshold: int = 2
    timeout: float | None = None
    monitor_window: float = 300.0
    graceful_degradation: bool = True
    failure_rate_threshold: float | None = None
    minimum_calls: int = 20
    half_open_max_calls: int = 1
    backoff_multiplier: float = 1.0
    max_recovery_timeout: float = 600.0
    ignore_exceptions: tuple[type[BaseException], ...] = ()
    record_exceptions: tuple[type[BaseException], ...] = ()
    is_failure: Callable[[BaseException], bool] | None = field(default=None, compare=False)
    is_failure_result: Callable[[Any], bool] | None = field(default=None, compare=False)
    mode: str = "enforce"
    enable_health_check: bool = True
    health_check_interval: float = 30.0
    health_check: Callable[[], bool | Awaitable[bool]] | None = field(default=None, compare=False)
    fallbacks: tuple[str, ...] = ()
    high_stakes: bool = False
    count_model_retry: bool = False
    """Count a tool's "ask the model again" signal (PydanticAI ``ModelRetry``) as a failure."""
    slow_call_seconds: float | None = None
    """A call that takes longer than this is slow (resilience4j's
    ``slowCallDurationThreshold``). None (the default): a slow call is never counted."""
    slow_call_rate: float | None = None
    """Open once this share of the calls in ``monitor_window`` (at least ``minimum_calls``)
    was slow (resilience4j's ``slowCallRateThreshold``); None with ``slow_call_seconds``
    set means 1.0, every call slow."""
    loop_limit: int = 3
    """The loop guard: how many times an identical call may end in a counted way
    (``loop_count``) before the next identical one is not run (``loops.py``)."""
    loop_action: str = "reject"
    """What the loop guard does then: ``reject`` (answer the model), ``stop`` (raise
    ``ToolLoopError`` to the caller of the run) or ``warn`` (count it, change nothing)."""
    loop_count: tuple[str, ...] = ("mistakes",)
    """What ends an identical call in a counted way: ``mistakes`` (arguments the tool
    rejects, an unknown tool), ``failures``, ``retries`` (``ModelRetry`` and the like)."""
    run_rejections: int | None = 3
    """The waste budget: how many times the breaker may reject this tool in one run before
    ``run_action`` answers the run's next call of it (``OTEL_BREAKER_RUN_REJECTIONS``).
    None: no budget, the run may keep calling an open tool (``runs.py``, docs/runs.md)."""
    run_action: str = "hide"
    """What the spent waste budget does: ``hide`` (the tool leaves this run's menu, and its
    calls are rejected for this run), ``stop`` (raise ``RunBudgetError`` to the caller of
    the run) or ``warn`` (an event, nothing else) (``OTEL_BREAKER_RUN_ACTION``)."""
    neutral_errors: str | None = None
    """A regular expression: an error whose ``"<rule> <ErrorType>: <message>"`` it matches
    (searched, case-insensitively) is the caller's mistake, whatever the built-in rules say
    (``OTEL_BREAKER_NEUTRAL_ERRORS``; docs/outcomes.md)."""
    failure_errors: str | None = None
    """A regular expression: an error it matches counts as a failure of the tool, whatever
    the built-in rules say; checked before ``neutral_errors`` (``OTEL_BREAKER_FAILURE_ERRORS``)."""
    effects: str | None = None
    """What running the tool does: ``read_only``, ``idempotent``, ``destructive`` or
    ``unknown`` (``effects.py``). None (the default): what the tool's server announces,
    else unknown. The user's word wins over a server's annotations
    (``OTEL_BREAKER_TOOL_EFFECTS``)."""
    retry: str | None = None
    """Retries below the model: ``"transient"`` retries a transient failure (a transport
    error, 502/503/504, a read timeout, a 429 asking for a short wait) of a read-only or
    idempotent tool, within a budget (docs/retries.md). None (the default): never
    (``OTEL_BREAKER_RETRY``)."""
    retry_attempts: int = 2
    """Retries after the first attempt, at most (``OTEL_BREAKER_RETRY_ATTEMPTS``)."""
    retry_max_wait: float = 2.0
    """The longest a server's retry hint (a 429's ``Retry-After``) may ask for and still be
    waited out below the model, in seconds (``OTEL_BREAKER_RETRY_MAX_WAIT``)."""

    def __post_init__(self) -> None:
        kinds = self.loop_count
        if isinstance(kinds, str):  # "mistakes,failures" (also + or | between names)
            kinds = tuple(k.strip() for k in kinds.replace("+", ",").replace("|", ",").split(",") if k.strip())
        if not isinstance(kinds, tuple):
            try:
                kinds = tuple(kinds)
            except TypeError:
                pass
        object.__setattr__(self, "loop_count", kinds)
        problems = list(_config_problems(self))
        if problems:
            raise ValueError("invalid CircuitBreakerConfig: " + "; ".join(problems))
        # Accept lists from users, store tuples so configs stay hashable-ish.
        for name in ("ignore_exceptions", "record_exceptions", "fallbacks"):
            value = getattr(self, name)
            if not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))

    @property
    def neutral_pattern(self) -> re.Pattern[str] | None:
        """``neutral_errors`` compiled (once per pattern text)."""
        return compiled_pattern(self.neutral_errors)

    @property
    def failure_pattern(self) -> re.Pattern[str] | None:
        """``failure_errors`` compiled (once per pattern text)."""
        return compiled_pattern(self.failure_errors)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> CircuitBreakerConfig:
        """A config from the pattern's table (``fast_api``, ``slow_tool``, ``code_executor``)."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})

    def with_changes(self, **changes: Any) -> CircuitBreakerConfig:
        """A copy with some options changed (validated like a new config)."""
        return replace(self, **changes)

    def cooldown(self, reopenings: int) -> float:
        """Seconds to stay open after ``reopenings`` failed probes in a row."""
        base = self.recovery_timeout
        if reopenings <= 0 or self.backoff_multiplier == 1.0:
            return base
        try:
            grown = base * self.backoff_multiplier**reopenings
        except OverflowError:  # after very many failed probes in a row
            grown = math.inf
        return max(base, min(grown, self.max_recovery_timeout))


#: Characters an override pattern may have: a pattern is configuration, not data.
MAX_PATTERN_CHARS = 2000


@functools.lru_cache(maxsize=256)
def _compile(source: str) -> re.Pattern[str]:
    return re.compile(source, re.IGNORECASE)


def compiled_pattern(source: str | None) -> re.Pattern[str] | None:
    """An override pattern compiled, None for none (validated when the config was made)."""
    if not source:
        return None
    return _compile(source)


def pattern_problem(source: Any) -> str | None:
    """Why an override pattern cannot be used, or None."""
    if source is None:
        return None
    if not isinstance(source, str):
        return f"expected a regular expression, got {type(source).__name__}"
    if len(source) > MAX_PATTERN_CHARS:
        return f"a pattern of at most {MAX_PATTERN_CHARS} characters"
    try:
        _compile(source)
    except re.error as exc:
        return f"does not compile: {exc}"
    return None


CONFIG_FIELDS = tuple(f.name for f in fields(CircuitBreakerConfig))

#: What the loop guard may do once an identical call repeats (``loop_action``).
LOOP_ACTIONS = ("reject", "stop", "warn")
#: What a spent waste budget does (``run_action``).
RUN_ACTIONS = ("hide", "stop", "warn")
#: What may count toward the loop guard (``loop_count``).
LOOP_COUNT_KINDS = ("mistakes", "failures", "retries")

#: Upper bounds of accepted options: beyond them a value is a typo, not a policy.
MAX_COUNT = 10**9
MAX_SECONDS = 366 * 86400.0
MAX_MULTIPLIER = 100.0
#: Shortest health-check interval and failure-rate window (a 0 would spin).
MIN_INTERVAL = 0.001


def _config_problems(c: CircuitBreakerConfig):
    def positive_int(name: str) -> None:
        value = getattr(c, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            problems.append(f"{name}={value!r} (must be an integer >= 1)")

    def non_negative(name: str, allow_none: bool = False) -> None:
        value = getattr(c, name)
        if value is None and allow_none:
            return
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
            problems.append(f"{name}={value!r} (must be a number >= 0)")

    problems: list[str] = []
    for name in ("failure_threshold", "success_threshold", "minimum_calls", "half_open_max_calls"):
        positive_int(name)
    for name in ("recovery_timeout", "max_recovery_timeout"):
        non_negative(name)
    non_negative("timeout", allow_none=True)
    interval = c.health_check_interval
    if isinstance(interval, bool) or not isinstance(interval, int | float) or not interval >= MIN_INTERVAL:
        problems.append(f"health_check_interval={interval!r} (must be a number >= {MIN_INTERVAL:g} seconds)")
    if isinstance(c.monitor_window, bool) or not isinstance(c.monitor_window, int | float) or not c.monitor_window > 0:
        problems.append(f"monitor_window={c.monitor_window!r} (must be a number > 0)")
    elif c.monitor_window < MIN_INTERVAL:
        problems.append(f"monitor_window={c.monitor_window!r} (must be >= {MIN_INTERVAL:g} seconds)")
    rate = c.failure_rate_threshold
    if rate is not None and (not isinstance(rate, int | float) or not 0 < rate <= 1):
        problems.append(f"failure_rate_threshold={rate!r} (must be in (0, 1] or None)")
    multiplier = c.backoff_multiplier
    if isinstance(multiplier, bool) or not isinstance(multiplier, int | float) or not 1 <= multiplier <= MAX_MULTIPLIER:
        problems.append(f"backoff_multiplier={multiplier!r} (must be between 1 and {MAX_MULTIPLIER:g})")
    # Values that parse but make no sense: named like every other bad value.
    for name in ("failure_threshold", "success_threshold", "minimum_calls", "half_open_max_calls"):
        value = getattr(c, name)
        if isinstance(value, int) and value > MAX_COUNT:
            problems.append(f"{name}={value!r} (must be at most {MAX_COUNT:,})")
    for name in (
        "recovery_timeout",
        "max_recovery_timeout",
        "timeout",
        "monitor_window",
        "health_check_interval",
        "slow_call_seconds",
    ):
        value = getattr(c, name)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > MAX_SECONDS:
            problems.append(f"{name}={value!r} (must be at most {MAX_SECONDS:g} seconds, a year)")
    if (
        isinstance(c.backoff_multiplier, int | float)
        and c.backoff_multiplier > 1
        and isinstance(c.max_recovery_timeout, int | float)
        and isinstance(c.recovery_timeout, int | float)
        and c.max_recovery_timeout < c.recovery_timeout
    ):
        problems.append(
            f"max_recovery_timeout={c.max_recovery_timeout!r} (must be >= recovery_timeout={c.recovery_timeout!r}: "
            f"with backoff_multiplier={c.backoff_multiplier!r} the cooldown could never grow)"
        )
    if c.mode not in MODES:
        problems.append(f"mode={c.mode!r} (must be one of {', '.join(MODES)})")
    non_negative("slow_call_seconds", allow_none=True)
    slow_rate = c.slow_call_rate
    if slow_rate is not None and (
        isinstance(slow_rate, bool) or not isinstance(slow_rate, int | float) or not 0 < slow_rate <= 1
    ):
        problems.append(f"slow_call_rate={slow_rate!r} (must be in (0, 1] or None)")
    positive_int("loop_limit")
    if isinstance(c.loop_limit, int) and c.loop_limit > MAX_COUNT:
        problems.append(f"loop_limit={c.loop_limit!r} (must be at most {MAX_COUNT:,})")
    if c.loop_action not in LOOP_ACTIONS:
        problems.append(f"loop_action={c.loop_action!r} (must be one of {', '.join(LOOP_ACTIONS)})")
    budget = c.run_rejections
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or not 1 <= budget <= MAX_COUNT):
        problems.append(f"run_rejections={budget!r} (must be a whole number from 1 to {MAX_COUNT:,}, or None: off)")
    if c.run_action not in RUN_ACTIONS:
        problems.append(f"run_action={c.run_action!r} (must be one of {', '.join(RUN_ACTIONS)})")
    kinds = c.loop_count
    if not isinstance(kinds, tuple) or not all(k in LOOP_COUNT_KINDS for k in kinds):
        problems.append(f"loop_count={kinds!r} (must be a subset of {', '.join(LOOP_COUNT_KINDS)})")
    if c.effects is not None and c.effects not in EFFECT_CLASSES:
        problems.append(f"effects={c.effects!r} (must be one of {', '.join(EFFECT_CLASSES)} or None)")
    if c.retry not in RETRY_MODES:
        problems.append(f"retry={c.retry!r} (must be 'transient' or None)")
    attempts = c.retry_attempts
    if isinstance(attempts, bool) or not isinstance(attempts, int) or not 1 <= attempts <= MAX_RETRY_ATTEMPTS:
        problems.append(f"retry_attempts={attempts!r} (must be a whole number from 1 to {MAX_RETRY_ATTEMPTS})")
    wait = c.retry_max_wait
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait <= MAX_RETRY_WAIT:
        problems.append(f"retry_max_wait={wait!r} (must be a number of seconds from 0 to {MAX_RETRY_WAIT:g})")
    for name in ("neutral_errors", "failure_errors"):
        problem = pattern_problem(getattr(c, name))
        if problem is not None:
            problems.append(f"{name}: {problem}")
    yield from problems
