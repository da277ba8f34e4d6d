"""What counts as a tool failure.

A breaker that counts the wrong things is worse than none: it opens on a user
saying "no" to an approval prompt, or it stays closed while a tool returns error
payloads with HTTP 200.  This module holds the one definition of an outcome so
the guarded call path, the span processor and every framework adapter agree.

Three outcomes, whatever the framework:

1. the tool failed (``FAILURE``): counted;
2. the model or caller made a mistake (bad or malformed arguments, an unknown
   tool, an "ask the model again" signal such as PydanticAI's ``ModelRetry``):
   neutral, ``IGNORED`` with the reason ``MISTAKE``;
3. control flow or authorization (approval, denial, interrupt, cancellation,
   an auth gate such as MCP's URL-elicitation-required error): neutral,
   ``IGNORED`` with the reason ``CONTROL``.

Adapters know which exceptions their framework raises for a mistake of the
model (often the same class a tool body could raise, so only the call site
tells them apart); they pass that knowledge in as a ``hint``.

Outcomes are plain integers so the hot path compares ints, not enum members.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any, Protocol

SUCCESS = 0
FAILURE = 1
IGNORED = 2

OUTCOME_NAMES = ("success", "failure", "ignored")

# Why an outcome is neutral (the hints adapters give; strings so logs read well).
MISTAKE = "mistake"
"""The model or caller made a mistake: arguments, tool name, a retry request."""
RETRY_REQUEST = "retry_request"
"""The tool asked the model to try again (``ModelRetry``): a mistake unless
the breaker's ``count_model_retry`` option counts it."""
CONTROL = "control"
"""Control flow or authorization: approvals, denials, interrupts, cancellation."""


class ApprovalDeniedError(Exception):
    """A human or policy declined the call. Never a sign the tool is broken."""


class PermissionDeniedError(Exception):
    """The caller may not use the tool. Access control, not degradation."""


# Control flow and denials: neither failures nor successes. A denial must not
# close a half-open breaker, and a cancelled task says nothing about the tool.
_NEVER_COUNTED: tuple[type[BaseException], ...] = (
    asyncio.CancelledError,
    KeyboardInterrupt,
    SystemExit,
    GeneratorExit,
    PermissionError,
    ApprovalDeniedError,
    PermissionDeniedError,
)

# Framework exceptions recognised by class name, so we need not import the
# frameworks: approval/permission denials and graph control flow (LangGraph
# interrupts and parent commands bubble up through tools on purpose).
_NEVER_COUNTED_NAMES = frozenset(
    {
        "GraphInterrupt",
        "NodeInterrupt",
        "GraphBubbleUp",
        "ParentCommand",
        "ApprovalRequired",
        "CallDeferred",
        "Cancelled",
        "ToolApprovalDenied",
        "UserRejectedError",
        "UrlElicitationRequiredError",
    }
)
_DENIAL_PATTERN = re.compile(r"(Approval|Permission|Consent)\w*(Denied|Rejected|Refused|Required)")

_name_cache: dict[type, bool] = {}


class FailurePolicy(Protocol):
    """The part of a breaker configuration that decides outcomes."""

    ignore_exceptions: tuple[type[BaseException], ...]
    record_exceptions: tuple[type[BaseException], ...]
    is_failure: Callable[[BaseException], bool] | None
    is_failure_result: Callable[[Any], bool] | None


def is_excluded(exc: BaseException) -> bool:
    """True for denials, cancellation and interpreter control flow."""
    if isinstance(exc, _NEVER_COUNTED):
        return True
    kind = type(exc)
    known = _name_cache.get(kind)
    if known is None:
        known = any(
            klass.__name__ in _NEVER_COUNTED_NAMES or _DENIAL_PATTERN.search(klass.__name__) for klass in kind.__mro__
        )
        if len(_name_cache) < 4096:
            _name_cache[kind] = known
    return known


_EXCLUDED_BUILTIN_NAMES = frozenset(
    {"CancelledError", "KeyboardInterrupt", "SystemExit", "GeneratorExit", "PermissionError"}
    | {"ApprovalDeniedError", "PermissionDeniedError"}
)


def is_excluded_name(type_name: str | None) -> bool:
    """``is_excluded`` for an exception known only by name (e.g. from a span's
    ``error.type`` or exception event). Dotted names are matched by their last part."""
    if not type_name:
        return False
    name = type_name.rsplit(".", 1)[-1]
    return name in _EXCLUDED_BUILTIN_NAMES or name in _NEVER_COUNTED_NAMES or bool(_DENIAL_PATTERN.search(name))


def classify_exception(exc: BaseException, policy: FailurePolicy, hint: str | None = None) -> int:
    """Outcome of a call that raised ``exc`` under ``policy``.

    ``hint`` is the adapter's reading of the exception (``MISTAKE``,
    ``RETRY_REQUEST`` or ``CONTROL``), or None when it has none.

    Order matters: built-in exclusions and the adapter's hint first (a user
    predicate cannot turn a cancellation or a bad argument into a failure),
    then the user's ignore list, then the user's predicate, then the record
    allow-list.
    """
    if hint is not None:
        if hint == RETRY_REQUEST and getattr(policy, "count_model_retry", False):
            return FAILURE
        if hint in (MISTAKE, RETRY_REQUEST, CONTROL):
            return IGNORED
    if is_excluded(exc):
        return IGNORED
    if policy.ignore_exceptions and isinstance(exc, policy.ignore_exceptions):
        return IGNORED
    if policy.is_failure is not None:
        try:
            return FAILURE if policy.is_failure(exc) else IGNORED
        except Exception:  # a broken predicate must not hide the tool's error
            return FAILURE
    if policy.record_exceptions and not isinstance(exc, policy.record_exceptions):
        return IGNORED
    return FAILURE


def result_failed(result: Any, policy: FailurePolicy) -> bool:
    """True when the user's validator says a returned value is a failure.

    Semantic failures (an error payload with no exception) only count when a
    validator says so; a validator that raises is treated as "not a failure"
    so our bookkeeping never turns a healthy call into a failed one.
    """
    validator = policy.is_failure_result
    if validator is None:
        return False
    try:
        return bool(validator(result))
    except Exception:
        return False


def error_type(exc: BaseException) -> str:
    """The ``error.type`` value for an exception: its class name."""
    return type(exc).__name__
