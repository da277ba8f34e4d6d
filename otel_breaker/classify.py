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

import errno
import re
from collections.abc import Callable
from typing import Any, Protocol

from otel_breaker.patterns import LazyPattern

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
#: What an adapter's ``result_error`` returns for a value that is neither a
#: success nor a failure of the tool (a denial, a policy block, a pause for input).
IGNORED_RESULT = "otel_breaker.ignored"
"""Control flow or authorization: approvals, denials, interrupts, cancellation."""


class ApprovalDeniedError(Exception):
    """A human or policy declined the call. Never a sign the tool is broken."""


class PermissionDeniedError(Exception):
    """The caller may not use the tool. Access control, not degradation."""


# Control flow and denials: neither failures nor successes. A denial must not
# close a half-open breaker, and a cancelled task says nothing about the tool.
# (``asyncio.CancelledError`` is matched by its class's module and name below:
# importing ``asyncio`` here would cost a framework's import tens of milliseconds.)
_NEVER_COUNTED: tuple[type[BaseException], ...] = (
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
_DENIAL_PATTERN = LazyPattern(r"(Approval|Permission|Consent)\w*(Denied|Rejected|Refused|Required)")

_name_cache: dict[type, bool] = {}

#: Attribute set on an exception whose transport failure an upstream breaker
#: counted: the tool's own breaker then treats it as neutral (the tool is not
#: to blame for a dead server).
UPSTREAM_MARK = "_otel_breaker_upstream"


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
            klass.__name__ in _NEVER_COUNTED_NAMES
            or _DENIAL_PATTERN.search(klass.__name__)
            or (klass.__name__ == "CancelledError" and klass.__module__ == "asyncio.exceptions")
            for klass in kind.__mro__
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
    if getattr(exc, UPSTREAM_MARK, None) is not None:
        return IGNORED  # a transport failure its upstream's breaker counted (see upstream.py)
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
    """The ``error.type`` value for an exception: its class name, or the JSON-RPC
    error code of an MCP protocol error (``exc.error.code``), as the MCP semantic
    conventions ask."""
    code = getattr(getattr(exc, "error", None), "code", None)
    if isinstance(code, int) and not isinstance(code, bool) and type(exc).__module__.startswith(("mcp", "fastmcp")):
        return str(code)
    return type(exc).__name__


# -- transport or tool: what an upstream breaker counts ------------------------------------
#
# A tool behind an upstream (an MCP server, an API host) can fail in two ways:
# the upstream could not be reached (connection refused or reset, DNS, TLS, a
# transport timeout, a gateway's 502/503/504, a closed MCP session), or the
# tool ran and failed. Only the first says anything about the other tools
# behind the same upstream. Classes are recognised by name and module, never
# imported, so no client library is loaded for us.

TransportRule = Callable[[BaseException], "bool | None"]
"""A user rule: True (a transport failure), False (never one: the tool's own
error), None (no opinion: the next rule decides)."""

#: HTTP statuses that mean the host or a gateway in front of it is unavailable.
UNAVAILABLE_STATUSES = frozenset({502, 503, 504})

# (module prefix, class names in the exception's MRO) of client libraries' transport errors.
_TRANSPORT_CLASSES: tuple[tuple[str, frozenset[str]], ...] = (
    ("httpx", frozenset({"TransportError"})),  # ConnectError, timeouts, RemoteProtocolError, ...
    ("httpcore", frozenset({"ConnectError", "ConnectTimeout", "ReadTimeout", "WriteTimeout", "PoolTimeout"})),
    ("httpcore", frozenset({"NetworkError", "RemoteProtocolError", "ReadError", "WriteError"})),
    ("requests", frozenset({"ConnectionError", "Timeout"})),
    ("urllib3", frozenset({"NewConnectionError", "NameResolutionError", "MaxRetryError", "ProtocolError"})),
    ("urllib3", frozenset({"ConnectTimeoutError", "ReadTimeoutError", "SSLError"})),
    ("aiohttp", frozenset({"ClientConnectionError", "ServerTimeoutError", "ClientPayloadError"})),
    ("anyio", frozenset({"ClosedResourceError", "BrokenResourceError", "EndOfStream"})),
    ("websockets", frozenset({"ConnectionClosed", "InvalidHandshake"})),
)
# Errors that carry an HTTP status: (class name, how to read the status).
_STATUS_CLASSES = frozenset({"HTTPStatusError", "HTTPError", "ClientResponseError", "APIStatusError"})
# MCP: the session's own errors when the server is gone (mcp.shared.exceptions.McpError
# with CONNECTION_CLOSED, or a request that timed out waiting for the server).
_MCP_CONNECTION_CLOSED = -32000
_MCP_REQUEST_TIMEOUT = -32001
_TRANSPORT_ERRNOS = frozenset(
    getattr(errno, name)
    for name in (
        *("ECONNREFUSED", "ECONNRESET", "ECONNABORTED", "EPIPE", "ETIMEDOUT"),
        *("ENETUNREACH", "EHOSTUNREACH", "ENETDOWN", "EHOSTDOWN"),
    )
    if hasattr(errno, name)
)
# Our own per-tool timeout is the tool's verdict (the tool was slow), not the transport's.
_NOT_TRANSPORT_NAMES = frozenset({"ToolTimeoutError"})

_user_rules: list[TransportRule] = []
_transport_cache: dict[type, bool] = {}


def register_transport_error(rule: type[BaseException] | TransportRule) -> None:
    """Teach the classifier a transport failure of your own client.

    ``rule`` is an exception class (its instances and subclasses are transport
    failures) or a predicate ``rule(exc) -> True | False | None``: True for a
    transport failure, False for "the tool's own error, whatever the built-in
    rules say", None for no opinion. Rules registered later are asked first;
    a rule that raises is skipped.
    """
    if isinstance(rule, type) and issubclass(rule, BaseException):
        klass = rule

        def rule(exc: BaseException) -> bool | None:
            return True if isinstance(exc, klass) else None

        rule.registered = klass  # type: ignore[attr-defined]
    elif not callable(rule):
        raise TypeError(f"expected an exception class or a predicate, got {rule!r}")
    _user_rules.insert(0, rule)


def unregister_transport_error(rule: type[BaseException] | TransportRule) -> None:
    """Remove a rule given to :func:`register_transport_error` (no error when absent)."""
    _user_rules[:] = [r for r in _user_rules if r is not rule and getattr(r, "registered", None) is not rule]


#: What frameworks that turn a tool's exception into text keep of a transport failure.
_TRANSPORT_TEXT = LazyPattern(
    r"connection ?(refused|reset|aborted)|broken pipe|connect(ion)? ?(error|timeout)|"
    r"name or service not known|nodename nor servname|temporary failure in name resolution|"
    r"getaddrinfo failed|no route to host|network is unreachable|host is unreachable|"
    r"timed ?out|certificate verify failed|ssl ?error|tlsv?1|"
    r"bad gateway|service unavailable|gateway time-?out|remote ?protocol ?error|server disconnected",
    re.IGNORECASE,
)
_user_texts: list[re.Pattern[str]] = []


def register_transport_text(pattern: str) -> None:
    """Teach the classifier a transport failure as a framework's error *text* shows it.

    Some frameworks catch a tool's exception and hand the model (and us) only its
    text (the OpenAI Agents SDK, Agno, Haystack, LlamaIndex, PraisonAI, Strands):
    for those, :func:`is_transport_text` decides from the text. ``pattern`` is a
    regular expression, matched case-insensitively anywhere in the text.
    """
    _user_texts.insert(0, re.compile(pattern, re.IGNORECASE))


def is_transport_text(text: str) -> bool:
    """True when a framework's error text (a swallowed exception) reads as a
    transport failure: the same kinds as :func:`is_transport_error`. Never raises."""
    try:
        sample = text[:2000]
        return any(p.search(sample) for p in _user_texts) or _TRANSPORT_TEXT.search(sample) is not None
    except Exception:
        return False


def is_transport_error(exc: BaseException) -> bool:
    """True when ``exc`` says the upstream could not be reached, not that the tool failed.

    Built in: connection refused/reset/aborted, broken pipes, unreachable
    hosts, DNS failures (``socket.gaierror``), TLS errors (``ssl.SSLError``),
    transport timeouts (``TimeoutError``, httpx/requests/aiohttp/urllib3
    timeouts), HTTP 502/503/504 read from the exception's ``response.status_code``,
    ``status`` or ``code`` (httpx ``HTTPStatusError``, requests ``HTTPError``,
    aiohttp ``ClientResponseError``, ``urllib.error.HTTPError``), httpx/anyio/
    websockets transport and stream errors, MCP's connection-closed and
    request-timeout errors. The cause (``raise ... from``) and the members of
    an exception group are read too. Denials and cancellations never are.
    Never raises.
    """
    try:
        return _is_transport(exc, 0)
    except Exception:
        return False


def _is_transport(exc: BaseException, depth: int) -> bool:
    for rule in tuple(_user_rules):
        try:
            verdict = rule(exc)
        except Exception:
            continue
        if verdict is not None:
            return bool(verdict)
    if is_excluded(exc):
        return False
    group = getattr(exc, "exceptions", None) if "ExceptionGroup" in type(exc).__name__ else None
    if isinstance(group, (tuple, list)):
        members = [e for e in group if isinstance(e, BaseException) and not is_excluded(e)]
        return bool(members) and all(_is_transport(e, depth + 1) for e in members)
    if _transport_type(type(exc)) or _status_unavailable(exc) or _mcp_transport(exc):
        return True
    if isinstance(exc, OSError) and exc.errno in _TRANSPORT_ERRNOS:
        return True
    cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    return cause is not None and depth < 3 and _is_transport(cause, depth + 1)


def _transport_type(kind: type) -> bool:
    known = _transport_cache.get(kind)
    if known is None:
        known = _transport_by_class(kind)
        if len(_transport_cache) < 4096:
            _transport_cache[kind] = known
    return known


def _transport_by_class(kind: type) -> bool:
    names = {k.__name__ for k in kind.__mro__}
    if names & _NOT_TRANSPORT_NAMES:
        return False
    if issubclass(kind, (ConnectionError, TimeoutError)):
        return True
    if {"gaierror", "herror", "SSLError"} & names and issubclass(kind, OSError):
        return True  # socket DNS errors, ssl.SSLError and its certificate errors
    for klass in kind.__mro__:
        module = getattr(klass, "__module__", "") or ""
        for prefix, class_names in _TRANSPORT_CLASSES:
            if klass.__name__ in class_names and (module == prefix or module.startswith(prefix + ".")):
                return True
    return False


def _status_unavailable(exc: BaseException) -> bool:
    """A 502/503/504 from an HTTP client's status error (read, never imported)."""
    if not any(k.__name__ in _STATUS_CLASSES for k in type(exc).__mro__):
        return False
    for status in (
        getattr(getattr(exc, "response", None), "status_code", None),
        getattr(exc, "status_code", None),
        getattr(exc, "status", None),
        getattr(exc, "code", None),
    ):
        if isinstance(status, int) and not isinstance(status, bool):
            return status in UNAVAILABLE_STATUSES
    return False


def _mcp_transport(exc: BaseException) -> bool:
    """MCP's ``MCPError`` for a closed connection (-32000 "Connection closed") or a
    request the server never answered (-32001)."""
    if type(exc).__name__ not in ("McpError", "MCPError"):
        return False
    error = getattr(exc, "error", None)
    code = getattr(error, "code", None)
    if code == _MCP_REQUEST_TIMEOUT:
        return True
    message = getattr(error, "message", None)
    return code == _MCP_CONNECTION_CLOSED and isinstance(message, str) and "connection closed" in message.lower()
