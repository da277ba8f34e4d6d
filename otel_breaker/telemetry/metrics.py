"""Metrics: the state gauge, the counters, and the tool duration histogram.

Speed: an SDK ``Counter.add`` costs several microseconds, more than a breaker
decision. So per-call work is at most one duration record; every count (calls
by outcome, rejections, transitions, loop detections, tokens saved) lives in
plain integers and is exported through observable instruments read at
collection time. Every name, unit and description comes from
:mod:`otel_breaker.semconv`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from opentelemetry.metrics import CallbackOptions, Observation

from otel_breaker import semconv
from otel_breaker.breaker import CircuitBreaker, State, all_breakers
from otel_breaker.loglines import logger
from otel_breaker.registry import BreakerRegistry, counts_key, default_registry
from otel_breaker.sanitize import bounded
from otel_breaker.semconv import (
    ATTR_ERROR_TYPE,
    ATTR_ESTIMATE_SOURCE,
    ATTR_FROM_STATE,
    ATTR_MODE,
    ATTR_MODEL,
    ATTR_OUTCOME,
    ATTR_OUTCOME_REASON,
    ATTR_OUTCOME_RULE,
    ATTR_STATE,
    ATTR_STORE,
    ATTR_TO_STATE,
    ATTR_TOOL_TYPE,
    DURATION_BUCKETS,
)
from otel_breaker.telemetry.labels import breaker_labels, key_labels
from otel_breaker.telemetry.providers import RECORDING, __version__
from otel_breaker.tokens import TokenEstimator

if TYPE_CHECKING:
    from otel_breaker.breaker import StateChange
    from otel_breaker.telemetry.providers import Providers
    from otel_breaker.toolcall import ToolCall


OUTCOMES = ("success", "failure", "ignored")
STATES = (State.CLOSED, State.OPEN, State.HALF_OPEN)
#: The OpenTelemetry SDK's default limit of series (attribute sets) per instrument.
SDK_CARDINALITY_LIMIT = 2000
#: Distinct rules kept per tool in ``otel_breaker.calls.neutral``; the rest count as ``other``.
MAX_RULES_PER_TOOL = 32
OTHER_RULE = "other"

_CARDINALITY_WARNED: set[str] = set()

#: Counts of modules above this one, observed with the instruments here:
#: ``source(rejected)`` yields (value, attributes) for ``otel_breaker.calls.rejected``
#: (True) or ``otel_breaker.loops`` (False). The loop guard adds itself.
LOOP_SOURCES: list[Callable[[bool], Iterable[tuple[int, dict[str, Any]]]]] = []
#: Rejections of modules above this one that save tokens: ``source()`` yields
#: (key, tool, agent, lifetime count) as :meth:`TokenEstimator.settle` takes them.
SAVINGS_SOURCES: list[Callable[[], Iterable[tuple[object, str, str | None, int]]]] = []


def _within_cardinality(name: str, callback: Any) -> Any:
    """``callback``, warning once when it yields more series than the SDK keeps
    per instrument by default: the SDK folds the rest into one overflow series."""

    def observe(options: CallbackOptions) -> list[Observation]:
        observations = list(callback(options))
        if len(observations) > SDK_CARDINALITY_LIMIT and name not in _CARDINALITY_WARNED:
            _CARDINALITY_WARNED.add(name)
            logger.warning(
                "otel-breaker: %s has %d series, more than the %d the OpenTelemetry SDK keeps per instrument "
                "by default; the rest are summed into one series with otel.metric.overflow=true. Raise the "
                "SDK's limit (a View with aggregation_cardinality_limit, or the reader's cardinality_limits) "
                "or lower OTEL_BREAKER_MAX_BREAKERS (logged once per instrument).",
                name,
                len(observations),
                SDK_CARDINALITY_LIMIT,
            )
        return observations

    return observe


class Metrics:
    """The metrics: every count, the instruments that export them, and the duration.

    The instruments are made on first use (:meth:`ensure_meter`) from the meter provider
    ``providers`` has then; ``read_settings`` is called before, so ``duration_metric``
    and the estimator's prices are the settings' ones when nothing configured them."""

    def __init__(self, providers: Providers, read_settings: Callable[[], None]) -> None:
        self._providers = providers
        self._read_settings = read_settings
        # Guards the counts below and the making of the instruments.
        self._lock = threading.Lock()
        #: Whether the instruments are made (read on every call: a plain attribute).
        self.ready = False
        #: The duration histogram once made (and ``duration_metric`` on), else None.
        self.duration: Any = None
        #: Whether ``gen_ai.execute_tool.duration`` is recorded (``OTEL_BREAKER_DURATION_METRIC``).
        self.duration_metric = True
        self.estimator = TokenEstimator()
        self._registry: BreakerRegistry | None = None
        self._transitions: dict[tuple[str, str | None, str, str, str | None, str | None], int] = {}
        #: (tool, agent, source, origin) -> the state its breaker last entered (the gauge of a pruned one).
        self._last_state: dict[tuple[str, str | None, str | None, str | None], State] = {}
        #: (tool, agent, source, origin, reason, rule) -> calls that ended neutral that way.
        self._neutral: dict[tuple[str, str | None, str | None, str | None, str, str], int] = {}
        #: (tool, agent, source, origin, outcome) -> retries made below the model (or refused by the budget).
        self._retries: dict[tuple[str, str | None, str | None, str | None, str], int] = {}

    def after_fork_in_child(self) -> None:
        """A lock another thread held at a fork stays held in the child: replace it."""
        self._lock = threading.Lock()

    @property
    def registry(self) -> BreakerRegistry:
        """The registry whose pruned breakers' counts are exported (default: the default one)."""
        return self._registry if self._registry is not None else default_registry()

    def use_registry(self, registry: BreakerRegistry | None) -> None:
        """Export the pruned breakers' counts of ``registry`` (None: the default registry's)."""
        self._registry = registry

    def forget_instruments(self) -> None:
        """Make the instruments again at next use (another meter provider, or duration option)."""
        with self._lock:
            self.ready = False
            self.duration = None

    def forget_counts(self) -> None:
        """A clean slate: transition, neutral and retry counts and token savings forgotten,
        the default registry's counts exported again, and no breaker made so far exported."""
        with self._lock:
            self._transitions.clear()
            self._last_state.clear()
            self._neutral.clear()
            self._retries.clear()
            self.estimator = TokenEstimator(self.estimator.tokens_per_call)
            self._registry = None
        for breaker in all_breakers():
            breaker.retired = True

    def ensure_meter(self) -> bool:
        """Make the instruments once a meter provider exists; whether they are made."""
        if self.ready:
            return True
        provider = self._providers.meter_provider_in_use()
        if provider is None:
            return False
        with self._lock:
            if self.ready:
                return True
            self._read_settings()
            # The SDK takes locks of its own to hand out a meter and register instruments, and
            # does not re-create them in a forked child: made under the lock our fork handlers
            # take, no thread of ours is inside them when the process forks (the child, which
            # makes the instruments again, would wait on them forever).
            with RECORDING.lock:
                meter = provider.get_meter(semconv.SCOPE_NAME, __version__, schema_url=semconv.SCHEMA_URL)
                self._create_instruments(meter)
            self.ready = True
        return True

    def _create_instruments(self, meter: Any) -> None:
        meter.create_observable_gauge(
            semconv.STATE.name,
            callbacks=[_within_cardinality(semconv.STATE.name, self._observe_state)],
            unit=semconv.STATE.unit,
            description=semconv.STATE.description,
        )
        counters = (
            (semconv.TRANSITIONS, self._observe_transitions),
            (semconv.CALLS, self._observe_calls),
            (semconv.NEUTRAL, self._observe_neutral),
            (semconv.REJECTED, self._observe_rejected),
            (semconv.TOKENS_SAVED, self._observe_tokens),
            (semconv.COST_SAVED, self._observe_cost),
            (semconv.STORE_ERRORS, self._observe_store_errors),
            (semconv.LOOPS, self._observe_loops),
            (semconv.RETRIES, self._observe_retries),
        )
        for instrument, callback in counters:
            meter.create_observable_counter(
                instrument.name,
                callbacks=[_within_cardinality(instrument.name, callback)],
                unit=instrument.unit,
                description=instrument.description,
            )
        if self.duration_metric:
            self.duration = meter.create_histogram(
                semconv.DURATION.name,
                unit=semconv.DURATION.unit,
                description=semconv.DURATION.description,
                explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
            )

    def record_duration(
        self, duration: Any, call: ToolCall, breaker: CircuitBreaker, elapsed: float, err: str | None
    ) -> None:
        """One point of ``gen_ai.execute_tool.duration`` for a call that ran."""
        cache = breaker.telemetry_cache
        if cache is None:
            # The semconv attributes of the duration: tool, agent, tool type, error.type
            # (and our source and upstream); never a session or call id.
            labels = breaker_labels(breaker)
            if call.tool_type:
                labels[ATTR_TOOL_TYPE] = call.tool_type
            cache = breaker.telemetry_cache = {None: labels}
        attributes = cache.get(err)
        if attributes is None:
            attributes = cache[err] = {**cache[None], ATTR_ERROR_TYPE: err}
        try:
            # Under the lock our fork handlers take: no thread of ours is inside the
            # SDK's record (holding its aggregation lock) when the process forks.
            with RECORDING.lock:
                duration.record(elapsed, attributes)
        except Exception:
            logger.debug("otel-breaker: duration record failed", exc_info=True)

    def count_transition(self, change: StateChange) -> None:
        """One transition of a breaker, and the state it entered (its gauge once pruned)."""
        breaker = change.breaker
        key = (
            breaker.name,
            breaker.agent_name,
            change.from_state.value,
            change.to_state.value,
            breaker.source,
            breaker.origin,
        )
        with self._lock:
            self._transitions[key] = self._transitions.get(key, 0) + 1
            self._last_state[(breaker.name, breaker.agent_name, breaker.source, breaker.origin)] = change.to_state

    # -- what the observable instruments read ----------------------------------------------------

    def live_breakers(self) -> list[CircuitBreaker]:
        """Breakers whose counts are not yet folded into a registry's totals."""
        return [b for b in all_breakers() if not b.retired]

    def counts(self) -> dict[tuple[str, str | None, str, str | None, str | None], list[int]]:
        """Lifetime counts per (tool, agent, mode, source, origin), live and pruned breakers together."""
        totals = self.registry.retired_counts()
        for breaker in self.live_breakers():
            values = totals.setdefault(counts_key(breaker), [0, 0, 0, 0, 0])
            for index, value in enumerate(breaker.lifetime_counts()):
                values[index] += value
        return totals

    def transitions(self) -> dict[tuple[str, str | None, str, str, str | None, str | None], int]:
        """(tool, agent, from state, to state, source, origin) -> transitions so far."""
        with self._lock:
            return dict(self._transitions)

    def _retired_series(self) -> set[tuple[str, str | None, str | None, str | None]]:
        """(tool, agent, source, origin) of breakers the registry pruned (evicted idle at
        the cap, a session ended, an agent object gone in instance scope): their series
        stay in every export, the last at exit included, as the counters' do."""
        return {(tool, agent, source, origin) for tool, agent, _mode, source, origin in self.registry.retired_counts()}

    def _observe_state(self, options: CallbackOptions) -> Iterable[Observation]:
        states: dict[tuple[str, str | None, str | None, str | None], dict[State, int]] = {}
        for breaker in self.live_breakers():
            key = (breaker.name, breaker.agent_name, breaker.source, breaker.origin)
            per_state = states.setdefault(key, dict.fromkeys(STATES, 0))
            per_state[breaker.state] += 1
        for key in self._retired_series():
            if key not in states:  # no live breaker: the state its last one was left in
                states[key] = dict.fromkeys(STATES, 0)
                states[key][self._last_state.get(key, State.CLOSED)] = 1
        for (tool, agent, source, origin), per_state in states.items():
            labels = key_labels(tool, agent, source, origin)
            for state, value in per_state.items():
                yield Observation(value, {**labels, ATTR_STATE: state.value})

    def _observe_transitions(self, options: CallbackOptions) -> Iterable[Observation]:
        transitions = self.transitions()
        # Every breaker reports its "-> open" series from the start, at 0: rate() and
        # increase() only see growth after a series' first sample, so a first opening
        # would otherwise never count on dashboards and in alerts.
        series = {(b.name, b.agent_name, b.source, b.origin) for b in self.live_breakers()} | self._retired_series()
        for tool, agent, source, origin in series:
            for from_state in (State.CLOSED.value, State.HALF_OPEN.value):
                transitions.setdefault((tool, agent, from_state, State.OPEN.value, source, origin), 0)
        for (tool, agent, from_state, to_state, source, origin), value in transitions.items():
            labels = key_labels(tool, agent, source, origin)
            yield Observation(value, {**labels, ATTR_FROM_STATE: from_state, ATTR_TO_STATE: to_state})

    def _observe_calls(self, options: CallbackOptions) -> Iterable[Observation]:
        per_tool: dict[tuple[str, str | None, str | None, str | None], list[int]] = {}
        for (tool, agent, _mode, source, origin), values in self.counts().items():
            totals = per_tool.setdefault((tool, agent, source, origin), [0, 0, 0])
            for index in range(3):
                totals[index] += values[index]
        for (tool, agent, source, origin), totals in per_tool.items():
            labels = key_labels(tool, agent, source, origin)
            for outcome, value in zip(OUTCOMES, totals, strict=True):
                yield Observation(value, {**labels, ATTR_OUTCOME: outcome})

    def count_neutral(self, breaker: CircuitBreaker, reason: str | None, rule: str | None) -> None:
        """One call of ``breaker``'s tool that ended neutral, for ``otel_breaker.calls.neutral``
        (counted whether or not anything watches, like every other count)."""
        tool_key = (breaker.name, breaker.agent_name, breaker.source, breaker.origin)
        rule_name = bounded(rule or "unknown")
        with self._lock:
            key = (*tool_key, reason or "unknown", rule_name)
            if key not in self._neutral:
                rules = sum(1 for existing in self._neutral if existing[:4] == tool_key)
                if rules >= MAX_RULES_PER_TOOL:
                    key = (*tool_key, reason or "unknown", OTHER_RULE)
            self._neutral[key] = self._neutral.get(key, 0) + 1

    def _observe_neutral(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            items = list(self._neutral.items())
        for (tool, agent, source, origin, reason, rule), value in items:
            labels = key_labels(tool, agent, source, origin)
            yield Observation(value, {**labels, ATTR_OUTCOME_REASON: reason, ATTR_OUTCOME_RULE: rule})

    def count_retry(self, breaker: CircuitBreaker, outcome: str) -> None:
        """One retry of ``breaker``'s tool made below the model, by its outcome (``success``,
        ``failure``, ``ignored``, ``rejected``), or one the budget refused (``budget_exhausted``)."""
        key = (breaker.name, breaker.agent_name, breaker.source, breaker.origin, outcome)
        with self._lock:
            self._retries[key] = self._retries.get(key, 0) + 1

    def _observe_retries(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            items = list(self._retries.items())
        for (tool, agent, source, origin, outcome), value in items:
            yield Observation(value, {**key_labels(tool, agent, source, origin), ATTR_OUTCOME: outcome})

    def _observe_loops(self, options: CallbackOptions) -> Iterable[Observation]:
        for source in LOOP_SOURCES:
            for value, labels in source(False):
                yield Observation(value, labels)

    def _observe_rejected(self, options: CallbackOptions) -> Iterable[Observation]:
        for source in LOOP_SOURCES:  # calls the loop guard did not run (reason="loop")
            for value, labels in source(True):
                yield Observation(value, labels)
        for (tool, agent, mode, source, origin), values in self.counts().items():
            labels = {**key_labels(tool, agent, source, origin), ATTR_MODE: mode}
            if values[3] or not values[4]:
                yield Observation(values[3], {**labels, ATTR_STATE: State.OPEN.value})
            if values[4]:
                yield Observation(values[4], {**labels, ATTR_STATE: State.HALF_OPEN.value})

    def settle_savings(self) -> None:
        """Apply the current token estimate to rejections since the last settle."""
        self.estimator.settle(
            (key, key[0], key[1], values[3] + values[4]) for key, values in self.counts().items() if key[2] == "enforce"
        )
        for source in SAVINGS_SOURCES:  # calls the loop guard answered: each saved a model turn
            self.estimator.settle(source())

    def _observe_tokens(self, options: CallbackOptions) -> Iterable[Observation]:
        self.settle_savings()
        for (tool, agent, source), value in self.estimator.saved_tokens().items():
            yield Observation(value, {**key_labels(tool, agent), ATTR_ESTIMATE_SOURCE: source})

    def _observe_cost(self, options: CallbackOptions) -> Iterable[Observation]:
        for (tool, agent, model), value in self.estimator.saved_cost().items():
            yield Observation(value, {**key_labels(tool, agent), ATTR_MODEL: bounded(model)})

    def _observe_store_errors(self, options: CallbackOptions) -> Iterable[Observation]:
        errors = getattr(self.registry.store, "error_count", None)
        if errors is not None:
            yield Observation(int(errors), {ATTR_STORE: getattr(self.registry.store, "name", "store")})
