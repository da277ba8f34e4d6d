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
from typing import Any, NamedTuple, Protocol

from otel_breaker import outcome_rules
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


#: Why a neutral outcome is neutral when the user's own configuration said so (a
#: predicate, an ignore list, an override pattern).
CONFIGURED = "configured"
#: Why the tool's breaker leaves an outcome to the upstream's breaker.
UPSTREAM = "upstream"

#: The rule of a failure nothing recognised: counted, so a broken tool is never hidden.
UNRECOGNISED = "unrecognised"
#: The rule of a returned value the framework or a validator calls a failure.
RESULT = "result"


class Verdict(NamedTuple):
    """How one call ended, decided once: every reader (the breaker, the upstream, the loop
    guard, the span, the metrics) reads the same verdict."""

    outcome: int
    """``SUCCESS``, ``FAILURE`` or ``IGNORED``."""
    reason: str | None = None
    """Why an ``IGNORED`` outcome is neutral: ``MISTAKE``, ``CONTROL``, ``RETRY_REQUEST``,
    ``CONFIGURED`` or ``UPSTREAM``; None otherwise."""
    rule: str | None = None
    """What decided (``http.404``, ``errno.ENOENT``, ``transport``, ``unrecognised`` ...);
    None for a success."""
    may_change: bool = False
    """An identical call may get another answer later (not found yet): the loop guard
    does not count it."""


SUCCEEDED = Verdict(SUCCESS)
_FAILED_UNRECOGNISED = Verdict(FAILURE, None, UNRECOGNISED)
_READING_OUTCOMES = {
    outcome_rules.MISTAKE: (IGNORED, MISTAKE),
    outcome_rules.CONTROL: (IGNORED, CONTROL),
    outcome_rules.FAILURE: (FAILURE, None),
}


def error_description(rule: str | None, exc: BaseException | None, text: str | None = None) -> str:
    """What override patterns are searched in: ``"<rule> <ErrorType>: <message>"``, bounded."""
    if exc is not None:
        message = outcome_rules.exception_message(exc)
        body = f"{type(exc).__name__}: {message}"
    else:
        body = (text or "")[: outcome_rules.MAX_TEXT_CHARS]
    return f"{rule or UNRECOGNISED} {body}"


def _overridden(policy: FailurePolicy, description: str) -> Verdict | None:
    """The user's override patterns (``failure_errors`` first: counting is the safe side)."""
    failure = getattr(policy, "failure_pattern", None)
    if failure is not None and failure.search(description) is not None:
        return Verdict(FAILURE, None, "override.failure")
    neutral = getattr(policy, "neutral_pattern", None)
    if neutral is not None and neutral.search(description) is not None:
        return Verdict(IGNORED, MISTAKE, "override.neutral")
    return None


def _from_reading(reading: outcome_rules.Reading | None) -> Verdict:
    if reading is None:
        return _FAILED_UNRECOGNISED
    outcome, reason = _READING_OUTCOMES[reading.kind]
    return Verdict(outcome, reason, reading.rule, reading.may_change and outcome == IGNORED)


def judge_exception(exc: BaseException, policy: FailurePolicy, hint: str | None = None) -> Verdict:
    """The verdict on a call that raised ``exc`` under ``policy``.

    ``hint`` is the adapter's reading of the exception (``MISTAKE``, ``RETRY_REQUEST``
    or ``CONTROL``: its framework's own validation or control signal), or None.

    Order matters: the upstream's share, the adapter's hint and the built-in
    exclusions first (nothing turns a cancellation, a denial or a framework's
    validation error into a failure); then the user's Python predicates (ignore
    list, ``is_failure``, record list), which win over every default; then the
    user's override patterns; then the rules of each error's own protocol
    (:mod:`otel_breaker.outcome_rules`). What nothing recognises is a failure.
    """
    if getattr(exc, UPSTREAM_MARK, None) is not None:
        return Verdict(IGNORED, UPSTREAM, "transport")  # its upstream's breaker counted it (upstream.py)
    if hint is not None:
        verdict = _hinted(exc, policy, hint)
        if verdict is not None:
            return verdict
    if is_excluded(exc):
        return Verdict(IGNORED, CONTROL, "control." + type(exc).__name__[:64])
    if policy.ignore_exceptions and isinstance(exc, policy.ignore_exceptions):
        return Verdict(IGNORED, CONFIGURED, "predicate")
    if policy.is_failure is not None:
        try:
            counted = policy.is_failure(exc)
        except Exception:  # a broken predicate must not hide the tool's error
            counted = True
        return Verdict(FAILURE, None, "predicate") if counted else Verdict(IGNORED, CONFIGURED, "predicate")
    if policy.record_exceptions:
        if isinstance(exc, policy.record_exceptions):
            return Verdict(FAILURE, None, "predicate")
        return Verdict(IGNORED, CONFIGURED, "predicate")
    reading = outcome_rules.read_exception(exc)
    if reading is None and is_transport_error(exc):
        reading = outcome_rules.Reading(outcome_rules.FAILURE, "transport")
    if getattr(policy, "failure_pattern", None) is not None or getattr(policy, "neutral_pattern", None) is not None:
        overridden = _overridden(policy, error_description(reading.rule if reading else None, exc))
        if overridden is not None:
            return overridden
    return _from_reading(reading)


def _hinted(exc: BaseException, policy: FailurePolicy, hint: str) -> Verdict | None:
    """The verdict an adapter's hint decides: its rule (and whether an identical retry may
    heal) from the exception's own reading where it has one."""
    if hint == RETRY_REQUEST:
        if getattr(policy, "count_model_retry", False):
            return Verdict(FAILURE, None, "framework.retry_request")
        return Verdict(IGNORED, RETRY_REQUEST, "framework.retry_request")
    if hint == CONTROL:
        reading = outcome_rules.read_structured(exc)
        rule = reading.rule if reading is not None and reading.kind == outcome_rules.CONTROL else "framework.control"
        return Verdict(IGNORED, CONTROL, rule)
    if hint == MISTAKE:
        reading = outcome_rules.read_exception(exc)
        if reading is not None and reading.kind == outcome_rules.MISTAKE:
            return Verdict(IGNORED, MISTAKE, reading.rule, reading.may_change)
        return Verdict(IGNORED, MISTAKE, "framework.mistake")
    return None


def judge_text(text: str | None, policy: FailurePolicy, error_type: str | None = None) -> Verdict:
    """The verdict on an error a framework or a server handed over as text (an MCP
    ``isError`` answer, a tool's exception a framework turned into a message): the same
    rules as for an exception, read from the text. Unrecognised: a failure."""
    reading = outcome_rules.read_text(text)
    if getattr(policy, "failure_pattern", None) is not None or getattr(policy, "neutral_pattern", None) is not None:
        description = error_description(reading.rule if reading else None, None, f"{error_type or ''}: {text or ''}")
        overridden = _overridden(policy, description)
        if overridden is not None:
            return overridden
    return _from_reading(reading)


#: Characters of a returned error's text kept (the loop guard's message, the rules' reading).
MAX_RESULT_TEXT_CHARS = outcome_rules.MAX_TEXT_CHARS


def result_text(result: Any) -> str | None:
    """A returned error's text, bounded: the text content of a tool result (MCP's
    ``CallToolResult``, a Strands result event, a LangChain ``ToolMessage``, Agno's
    execution result, an OpenAI Agents tool result) where there is one, else the
    value as a string. None when it cannot be read."""
    try:
        holder = getattr(result, "tool_result", result)
        for name in ("error", "output"):  # Agno's execution result; an OpenAI Agents tool result
            text = getattr(holder, name, None)
            if isinstance(text, str) and text:
                return text[:MAX_RESULT_TEXT_CHARS]
        content = holder.get("content") if isinstance(holder, dict) else getattr(holder, "content", None)
        if isinstance(content, str):
            return content[:MAX_RESULT_TEXT_CHARS]
        if isinstance(content, list):
            texts = []
            for item in content[:8]:
                text = item.get("text") if isinstance(item, dict) else getattr(item, "text", None)
                if isinstance(text, str):
                    texts.append(text[:MAX_RESULT_TEXT_CHARS])
            if texts:
                return " ".join(texts)[:MAX_RESULT_TEXT_CHARS]
        if isinstance(result, str):
            return result[:MAX_RESULT_TEXT_CHARS]
        return str(result)[:MAX_RESULT_TEXT_CHARS]
    except Exception:
        return None


def classify_exception(exc: BaseException, policy: FailurePolicy, hint: str | None = None) -> int:
    """Outcome of a call that raised ``exc`` under ``policy``: :func:`judge_exception`'s."""
    return judge_exception(exc, policy, hint).outcome


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
