"""Cost of judging an outcome: nothing on success, a few microseconds on a failed call.

* a healthy call: ``breaker.call`` and ``@guard`` next to a bare call (the success
  path reads no error, so the outcome rules add nothing there);
* a failed call: ``read_exception`` on real errors (a FileNotFoundError, an httpx 404
  ``HTTPStatusError``, an sqlite3 ``OperationalError``), and on a plain ``RuntimeError``
  no rule knows, whose text is read to the end of the vocabulary; and the breaker's
  whole judgement (``classify_exception``) on two of them;
* the per-class plan cache: the first error of a class works out which readers apply
  (its MRO's names and modules), every later one reuses that.

Run: ``nox -s benchmarks -- benchmarks/test_outcome_cost.py``; compare ``min`` within a group.
"""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

import httpx
import pytest

from otel_breaker import CircuitBreaker, classify, guard, outcome_rules
from otel_breaker.breaker import CircuitBreakerConfig
from otel_breaker.outcome_rules import read_exception


def tool() -> int:
    return 1


@pytest.mark.benchmark(group="outcome: one healthy call", min_rounds=20, warmup=True)
def test_bare_call(benchmark):
    benchmark(tool)


@pytest.mark.benchmark(group="outcome: one healthy call", min_rounds=20, warmup=True)
def test_breaker_call(benchmark):
    breaker = CircuitBreaker("tool")
    benchmark(breaker.call, tool)


@pytest.mark.benchmark(group="outcome: one healthy call", min_rounds=20, warmup=True)
def test_guard(benchmark):
    benchmark(guard("tool")(tool))


# -- reading a failed call's error ------------------------------------------------------------------


def _file_not_found() -> BaseException:
    try:
        with open(Path(tempfile.gettempdir()) / "otel-breaker-benchmark" / "missing.csv"):
            pass
    except OSError as exc:
        return exc
    raise AssertionError("the file exists")


def _httpx_404() -> BaseException:
    """A real ``HTTPStatusError`` from a real ``Response`` (no network needed to build one)."""
    response = httpx.Response(404, request=httpx.Request("GET", "http://127.0.0.1/reports/42"))
    try:
        response.raise_for_status()
    except httpx.HTTPStatusError as exc:
        return exc
    raise AssertionError("404 raised nothing")


def _sqlite_no_such_column() -> BaseException:
    connection = sqlite3.connect(":memory:")
    connection.execute("create table users (id integer primary key, name text)")
    try:
        connection.execute("select email from users")
    except sqlite3.Error as exc:
        return exc
    finally:
        connection.close()
    raise AssertionError("the column exists")


def _unrecognised() -> BaseException:
    return RuntimeError("the report generator gave up after three pages")


ERRORS = {
    "FileNotFoundError": (_file_not_found, "mistake"),
    "httpx-404": (_httpx_404, "mistake"),
    "sqlite3-OperationalError": (_sqlite_no_such_column, "mistake"),
    "RuntimeError-text-read": (_unrecognised, None),
}


@pytest.mark.benchmark(group="outcome: reading a failed call's error", min_rounds=50, warmup=True)
@pytest.mark.parametrize("name", list(ERRORS))
def test_read_exception(benchmark, name: str):
    make, kind = ERRORS[name]
    exc = make()
    reading = benchmark(read_exception, exc)
    assert (reading.kind if reading is not None else None) == kind


@pytest.mark.benchmark(group="outcome: reading a failed call's error", min_rounds=50, warmup=True)
@pytest.mark.parametrize("name", ["FileNotFoundError", "RuntimeError-text-read"])
def test_classify_exception(benchmark, name: str):
    """The breaker's whole judgement (exclusions, the user's predicates, then the rules)."""
    make, kind = ERRORS[name]
    outcome = benchmark(classify.classify_exception, make(), CircuitBreakerConfig())
    assert outcome == (classify.IGNORED if kind == "mistake" else classify.FAILURE)


# -- the per-class plan cache -------------------------------------------------------------------


@pytest.mark.benchmark(group="outcome: the per-class plan", warmup=True)
@pytest.mark.parametrize("cached", [False, True], ids=["first-of-its-class", "cached"])
def test_plan_cache(benchmark, cached: bool):
    """The same sqlite3 error read with its class's plan forgotten before each round, or kept."""
    exc = _sqlite_no_such_column()
    kind = type(exc)
    read_exception(exc)

    def forget_plan() -> tuple[tuple[BaseException], dict]:
        if not cached:
            outcome_rules._plans.pop(kind, None)
        return (exc,), {}

    reading = benchmark.pedantic(read_exception, setup=forget_plan, rounds=2000, iterations=1, warmup_rounds=10)
    assert reading is not None and reading.kind == "mistake"
