"""One verdict per outcome: the model's mistakes never open a breaker, a broken tool always does.

Real errors from real libraries (sqlite3, ``open()``) through the real call path:
``@guard``, ``Guard.call`` and ``breaker.call``; the verdict's order (hints and
exclusions, the user's predicates, override patterns, the protocol rules, the
second signal); what telemetry shows of it.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable

import pytest

from otel_breaker import CircuitBreaker, CircuitBreakerConfig, State, get_circuit_breaker, guard
from otel_breaker.classify import (
    CONFIGURED,
    CONTROL,
    FAILURE,
    IGNORED,
    MISTAKE,
    RETRY_REQUEST,
    judge_exception,
    judge_text,
)
from otel_breaker.config import load_settings, set_settings
from otel_breaker.guards import Guard
from otel_breaker.streaks import error_shape
from otel_breaker.toolcall import ToolCall


def _database(tmp_path) -> str:
    path = str(tmp_path / "shop.db")
    with sqlite3.connect(path) as db:
        db.execute("create table orders (id integer primary key, total real)")
        db.execute("insert into orders values (1, 9.5)")
    return path


BAD_QUERIES = (
    "select nope from orders",
    "select * from order_lines",
    "selec * from orders",
    "select total from orders where",
    "insert into orders values (1, 2.0)",
    "select * from orders order by missing",
)


def test_six_bad_queries_leave_a_healthy_sql_tool_closed(tmp_path):
    path = _database(tmp_path)
    runs = []

    @guard("run_sql")
    def run_sql(query: str) -> list:
        runs.append(query)
        with sqlite3.connect(path) as db:
            return db.execute(query).fetchall()

    for query in BAD_QUERIES:
        with pytest.raises(sqlite3.Error):
            run_sql(query)
    assert run_sql("select total from orders") == [(9.5,)]
    assert len(runs) == len(BAD_QUERIES) + 1
    assert get_circuit_breaker("run_sql").state is State.CLOSED
    assert get_circuit_breaker("run_sql").stats.failure_count == 0


def test_six_wrong_paths_leave_a_healthy_file_tool_closed(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")

    @guard("read_file")
    def read_file(path: str) -> str:
        with open(tmp_path / path) as handle:
            return handle.read()

    for wrong in ("nope.txt", "notes.md", "a/b.txt", "", "notes.txt/x", "."):
        with pytest.raises(OSError):
            read_file(wrong)
    assert read_file("notes.txt") == "hello"
    assert get_circuit_breaker("read_file").state is State.CLOSED


def test_a_database_that_cannot_open_opens_the_breaker_on_time(tmp_path):
    runs = []

    @guard("run_sql")
    def run_sql(query: str) -> list:
        runs.append(query)
        with sqlite3.connect(str(tmp_path / "missing" / "shop.db")) as db:
            return db.execute(query).fetchall()

    for number in range(10):
        result = None
        try:
            result = run_sql(f"select {number}")
        except sqlite3.OperationalError:
            pass
        if len(runs) == 5:
            assert get_circuit_breaker("run_sql").state is State.OPEN
    assert len(runs) == 5  # the default failure_threshold; the rest were rejected
    assert isinstance(result, dict) and result["circuit_open"]


def test_a_plain_runtime_error_still_counts(clock):
    breaker = CircuitBreaker("backend", CircuitBreakerConfig(failure_threshold=3), clock=clock)
    runs = []

    def broken(item: str) -> str:
        runs.append(item)
        raise RuntimeError("backend unavailable for now")

    for item in ("a", "b", "c", "d", "e"):
        try:
            breaker.call(broken, item)
        except RuntimeError:
            pass
    assert len(runs) == 3
    assert breaker.state is State.OPEN


# -- the verdict's order --------------------------------------------------------------------


def _missing_file_error() -> FileNotFoundError:
    try:
        with open("/nonexistent/otel-breaker/file"):
            pass
    except FileNotFoundError as exc:
        return exc
    raise AssertionError("the file exists")


def test_the_verdict_names_its_reason_and_rule():
    verdict = judge_exception(_missing_file_error(), CircuitBreakerConfig())
    assert (verdict.outcome, verdict.reason, verdict.rule, verdict.may_change) == (
        IGNORED,
        MISTAKE,
        "errno.ENOENT",
        True,
    )
    verdict = judge_exception(RuntimeError("boom"), CircuitBreakerConfig())
    assert (verdict.outcome, verdict.rule) == (FAILURE, "unrecognised")
    verdict = judge_exception(asyncio.CancelledError(), CircuitBreakerConfig())
    assert (verdict.outcome, verdict.reason) == (IGNORED, CONTROL)


def test_predicates_win_over_the_rules_but_never_over_control():
    counts_everything = CircuitBreakerConfig(is_failure=lambda exc: True)
    assert judge_exception(_missing_file_error(), counts_everything).outcome == FAILURE
    assert judge_exception(asyncio.CancelledError(), counts_everything).outcome == IGNORED
    ignores_runtime = CircuitBreakerConfig(ignore_exceptions=(RuntimeError,))
    verdict = judge_exception(RuntimeError("x"), ignores_runtime)
    assert (verdict.outcome, verdict.reason, verdict.rule) == (IGNORED, CONFIGURED, "predicate")
    records_only_os = CircuitBreakerConfig(record_exceptions=(OSError,))
    assert judge_exception(_missing_file_error(), records_only_os).outcome == FAILURE
    assert judge_exception(ValueError("x"), records_only_os).outcome == IGNORED


def test_an_adapters_hint_takes_its_rule_from_the_error():
    verdict = judge_exception(_missing_file_error(), CircuitBreakerConfig(), MISTAKE)
    assert (verdict.reason, verdict.rule, verdict.may_change) == (MISTAKE, "errno.ENOENT", True)
    verdict = judge_exception(ValueError("x"), CircuitBreakerConfig(), MISTAKE)
    assert (verdict.reason, verdict.rule, verdict.may_change) == (MISTAKE, "framework.mistake", False)
    assert judge_exception(ValueError("x"), CircuitBreakerConfig(), RETRY_REQUEST).reason == RETRY_REQUEST
    counted = CircuitBreakerConfig(count_model_retry=True)
    assert judge_exception(ValueError("x"), counted, RETRY_REQUEST).outcome == FAILURE


def test_override_patterns_decide_before_the_rules():
    config = CircuitBreakerConfig(failure_errors=r"errno\.ENOENT", neutral_errors="quota of the day")
    assert judge_exception(_missing_file_error(), config).rule == "override.failure"
    verdict = judge_exception(RuntimeError("the quota of the day is spent"), config)
    assert (verdict.outcome, verdict.rule) == (IGNORED, "override.neutral")
    assert judge_exception(asyncio.CancelledError(), config).outcome == IGNORED
    assert judge_text("Error: quota of the day", config).outcome == IGNORED


def test_override_variables_apply_per_tool_and_per_server(caplog):
    settings = load_settings(
        {
            "OTEL_BREAKER_NEUTRAL_ERRORS": "run_sql=no such table;@files@*=ENOENT",
            "OTEL_BREAKER_FAILURE_ERRORS": "fetch_*=http\\.404;broken=(unclosed",
        },
        strict=False,
    )
    assert settings.config_for("run_sql").neutral_errors == "no such table"
    assert settings.config_for("read", source="files@1.0").neutral_errors == "ENOENT"
    assert settings.config_for("read", source="other@1.0").neutral_errors is None
    assert settings.config_for("fetch_page").failure_errors == r"http\.404"
    assert settings.config_for("broken").failure_errors is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "OTEL_BREAKER_FAILURE_ERRORS" in warnings[0] and "does not compile" in warnings[0]


def test_a_404_the_user_counts_opens_the_breaker(tmp_path):
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_ERRORS": "read_file=errno\\.ENOENT"}))

    @guard("read_file")
    def read_file(path: str) -> str:
        with open(tmp_path / path) as handle:
            return handle.read()

    for number in range(5):
        with pytest.raises(FileNotFoundError):
            read_file(f"missing-{number}.txt")
    assert get_circuit_breaker("read_file").state is State.OPEN


def test_a_config_with_a_pattern_that_does_not_compile_is_refused():
    with pytest.raises(ValueError, match="neutral_errors: does not compile"):
        CircuitBreakerConfig(neutral_errors="(")


# -- the second signal ----------------------------------------------------------------------


def test_error_shapes_mask_what_differs_between_calls():
    first = error_shape("lookup of 'alice' failed at /srv/a.json after 3 tries", {"user": "alice"})
    second = error_shape("lookup of 'bob' failed at /srv/b.json after 4 tries", {"user": "bob"})
    assert first == second
    assert error_shape("cannot parse the date", None) != error_shape("unknown currency", None)


def _lookup_tool(errors: dict[str, str]) -> tuple[Callable[[str], str], list[str]]:
    """A lookup tool that raises ``errors[key]`` for those keys, and the keys it ran for."""
    runs: list[str] = []

    def lookup(key: str) -> str:
        runs.append(key)
        if key in errors:
            raise RuntimeError(errors[key])
        return f"value of {key}"

    return lookup, runs


def test_different_unrecognised_errors_after_a_success_are_mistakes(clock):
    breaker = CircuitBreaker("lookup", CircuitBreakerConfig(failure_threshold=3), clock=clock)
    errors = {
        "a": "the date must be in the future",
        "b": "unknown currency",
        "c": "cannot combine a refund with a discount",
        "d": "the basket holds no such product line",
        "e": "a quantity needs a unit",
    }
    lookup, runs = _lookup_tool(errors)
    assert breaker.call(lookup, "ok") == "value of ok"
    for key in errors:
        with pytest.raises(RuntimeError):
            breaker.call(lookup, key)
    assert breaker.state is State.CLOSED
    assert breaker.call(lookup, "ok") == "value of ok"
    assert len(runs) == 7


def test_one_error_for_every_argument_still_opens_on_time(clock):
    breaker = CircuitBreaker("lookup", CircuitBreakerConfig(failure_threshold=3), clock=clock)
    errors = {key: f"lookup of '{key}' failed: backend said 'no'" for key in "abcdefgh"}
    lookup, runs = _lookup_tool(errors)
    breaker.call(lookup, "ok")
    for key in errors:
        try:
            breaker.call(lookup, key)
        except RuntimeError:
            pass
    assert breaker.state is State.OPEN
    assert len(runs) == 1 + 3


def test_without_a_success_every_unrecognised_error_counts(clock):
    breaker = CircuitBreaker("lookup", CircuitBreakerConfig(failure_threshold=3), clock=clock)
    errors = {"a": "first thing", "b": "second thing", "c": "third thing", "d": "fourth"}
    lookup, runs = _lookup_tool(errors)
    for key in errors:
        try:
            breaker.call(lookup, key)
        except RuntimeError:
            pass
    assert breaker.state is State.OPEN
    assert len(runs) == 3


def test_a_backend_whose_every_error_differs_is_counted_from_twice_the_threshold(clock):
    breaker = CircuitBreaker("lookup", CircuitBreakerConfig(failure_threshold=2), clock=clock)
    errors = {chr(ord("a") + n): f"failure of kind {'xyzwvutsrq'[n]}" for n in range(10)}
    lookup, runs = _lookup_tool(errors)
    breaker.call(lookup, "ok")
    for key in errors:
        try:
            breaker.call(lookup, key)
        except RuntimeError:
            pass
    assert breaker.state is State.OPEN
    assert len(runs) <= 1 + 2 * 2 + 2


def test_an_old_streak_is_evidence_of_nothing(clock):
    breaker = CircuitBreaker("lookup", CircuitBreakerConfig(failure_threshold=2, monitor_window=60), clock=clock)
    lookup, _ = _lookup_tool({"a": "first", "b": "second"})
    breaker.call(lookup, "ok")
    with pytest.raises(RuntimeError):
        breaker.call(lookup, "a")
    clock.advance(61)
    with pytest.raises(RuntimeError):
        breaker.call(lookup, "b")
    assert breaker.state is State.OPEN


# -- what telemetry shows -------------------------------------------------------------------


def test_a_mistake_carries_its_reason_and_rule_on_the_span_and_the_counter(otel, tmp_path):
    @guard("read_file")
    def read_file(path: str) -> str:
        with open(tmp_path / path) as handle:
            return handle.read()

    for name in ("a.txt", "b.txt"):
        with pytest.raises(FileNotFoundError):
            read_file(name)
    (tmp_path / "c.txt").write_text("c")
    assert read_file("c.txt") == "c"
    spans = otel.tool_spans("read_file")
    assert [s.attributes.get("otel_breaker.outcome") for s in spans] == ["ignored", "ignored", None]
    assert spans[0].attributes["otel_breaker.outcome.reason"] == "mistake"
    assert spans[0].attributes["otel_breaker.outcome.rule"] == "errno.ENOENT"
    assert "error.type" not in spans[0].attributes
    assert otel.value("otel_breaker.calls.neutral", otel_breaker_outcome_rule="errno.ENOENT") == 2
    assert otel.value("otel_breaker.calls", otel_breaker_outcome="ignored") == 2


def test_a_failure_carries_its_rule(otel, tmp_path):
    @guard("run_sql")
    def run_sql(query: str) -> list:
        with sqlite3.connect(str(tmp_path / "missing" / "x.db")) as db:
            return db.execute(query).fetchall()

    with pytest.raises(sqlite3.OperationalError):
        run_sql("select 1")
    (span,) = otel.tool_spans("run_sql")
    assert span.attributes["otel_breaker.outcome"] == "failure"
    assert span.attributes["otel_breaker.outcome.rule"] == "sqlite.SQLITE_CANTOPEN"
    assert span.attributes["error.type"] == "OperationalError"


def test_guard_call_judges_an_async_tool_alike(tmp_path):
    async def read_file(path: str) -> str:
        with open(tmp_path / path) as handle:
            return handle.read()

    async def main() -> None:
        for number in range(6):
            with pytest.raises(FileNotFoundError):
                await Guard().acall(ToolCall("read_file"), read_file, (f"missing-{number}",))

    asyncio.run(main())
    (tmp_path / "there").write_text("yes")
    assert asyncio.run(Guard().acall(ToolCall("read_file"), read_file, ("there",))) == "yes"
