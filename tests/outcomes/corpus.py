"""The one assertion every corpus case makes: how a real library's error is read."""

from __future__ import annotations

from collections.abc import Callable

from otel_breaker.outcome_rules import Reading, read_exception


def caught(call: Callable[..., object], *args: object, **kwargs: object) -> BaseException:
    """The exception ``call(*args, **kwargs)`` raises; the case fails if it raises none."""
    try:
        call(*args, **kwargs)
    except BaseException as exc:  # the corpus is made of whatever real calls raise
        return exc
    raise AssertionError(f"{call!r} raised nothing: the case does not reproduce its error")


def expect(exc: BaseException, kind: str, rule: str) -> Reading:
    """Assert that ``exc`` is read as ``kind`` by ``rule``; the message names the error read."""
    reading = read_exception(exc)
    described = f"{type(exc).__module__}.{type(exc).__qualname__}: {str(exc)[:200]!r}"
    assert reading is not None, f"{described} was not recognised (expected {kind} by {rule})"
    assert (reading.kind, reading.rule) == (kind, rule), f"{described} was read as {reading}"
    return reading
