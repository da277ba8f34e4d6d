"""How each error's own protocol judges it: the caller's mistake, a failure of the tool, or neither.

A breaker must count what says the tool cannot serve anyone, and only that. An
error that says *this call's input* was wrong (a 404 for a wrong URL, ``ENOENT``
for a wrong path, an SQL syntax error, gRPC ``INVALID_ARGUMENT``) is the model's
mistake: the same tool answers the next, correct call. An error that says the
tool or its backend is down (transport errors, 5xx, timeouts, a credential
refused on every call, a database that cannot open) is a failure. This module
reads both from the standards that define them, and nothing else:

* **HTTP** (RFC 9110, as Envoy's outlier detection reads it): 4xx caused by the
  request is a mistake (403 and 451 are authorization: control); 401, 402, 407
  and 426 fail on every call whatever the arguments, 408 and 5xx are failures;
* **errno** (POSIX): names of a wrong path or argument (``ENOENT``, ``EISDIR``,
  ``EINVAL`` ...) are mistakes; the system's own trouble (``EIO``, ``ENOSPC``,
  ``EMFILE``, ``EROFS`` ...) and the network's are failures;
* **SQLSTATE** classes (SQL standard, PostgreSQL's appendix A) and sqlite's
  result codes: syntax, undefined names, data and integrity errors are
  mistakes; connection, resources, locks, I/O and corruption are failures; the
  DB-API's exception classes (PEP 249) where a driver gives no code;
* **gRPC** status codes (the status-code guide's "which codes the client
  caused"), Google API errors, and the AWS SDKs' error codes (their retry
  classification's throttling, transient and credential codes are failures);
* **JSON-RPC / MCP** error codes, and an error *text* for the same vocabulary
  where a framework or an MCP server hands over only text.

Anything not recognised returns None: the caller counts it as a failure, so a
broken tool is never hidden. Client libraries are recognised by class name and
module, never imported. Every reader is bounded (texts are read to
:data:`MAX_TEXT_CHARS`) and never raises.

A :class:`Reading` also says whether an identical retry may get another answer
(``may_change``): "not found" may become "found" while a model polls, so the
loop guard never counts it, while a syntax error repeated verbatim never heals.
"""

from __future__ import annotations

import errno
import re
from typing import Any, NamedTuple

from otel_breaker.patterns import LazyPattern

MISTAKE = "mistake"
FAILURE = "failure"
CONTROL = "control"

#: Characters of an error text read at most: a 50 MB error text is never scanned whole.
MAX_TEXT_CHARS = 4000
#: How deep the ``__cause__``/``__context__`` chain and exception groups are followed.
MAX_DEPTH = 3


class Reading(NamedTuple):
    """What a recognised error says: its kind, the rule that decided it, and whether
    an identical call may get another answer later."""

    kind: str
    """``MISTAKE``, ``FAILURE`` or ``CONTROL``."""
    rule: str
    """The rule that decided, named after the standard: ``http.404``, ``errno.ENOENT``,
    ``sqlstate.42P01``, ``sqlite.SQLITE_ERROR``, ``grpc.NOT_FOUND``, ``aws.NoSuchKey``,
    ``jsonrpc.-32602``, ``text.not_found`` ..."""
    may_change: bool = False
    """True where an identical retry may succeed later (not found yet, a conflict)."""


# -- HTTP ---------------------------------------------------------------------------------------

#: 4xx statuses that say the request can never succeed as sent, or not yet.
_HTTP_MAY_CHANGE = frozenset({404, 409, 410, 412, 423, 425, 428})
#: 4xx statuses that fail whatever the arguments: a credential refused, payment, a protocol upgrade.
_HTTP_EVERY_CALL = frozenset({401, 402, 407, 426})
#: Authorization of this request: neither the tool's failure nor a mistake to count.
_HTTP_CONTROL = frozenset({403, 451})
#: 4xx statuses that are the server's or the network's trouble, not the request's.
_HTTP_SERVER_SIDE = frozenset({408, 429})


def read_status(status: Any) -> Reading | None:
    """The reading of an HTTP status on an error (None for a status that is no error)."""
    if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status <= 599:
        return None
    rule = f"http.{status}"
    if status >= 500 or status in _HTTP_SERVER_SIDE or status in _HTTP_EVERY_CALL:
        return Reading(FAILURE, rule)
    if status in _HTTP_CONTROL:
        return Reading(CONTROL, rule)
    return Reading(MISTAKE, rule, status in _HTTP_MAY_CHANGE)


# Error classes that carry an HTTP status, by name: httpx ``HTTPStatusError``, requests and
# urllib ``HTTPError``, aiohttp ``ClientResponseError``, the OpenAI/Anthropic SDKs'
# ``APIStatusError``, Google's ``GoogleAPICallError`` and google-genai's ``APIError``,
# Starlette/FastAPI/Werkzeug ``HTTPException``, Azure's ``HttpResponseError``, the
# Kubernetes client's ``ApiException``.
_STATUS_CLASSES = frozenset(
    {
        "HTTPStatusError",
        "HTTPError",
        "ClientResponseError",
        "APIStatusError",
        "GoogleAPICallError",
        "APIError",
        "HTTPException",
        "HttpResponseError",
        "ApiException",
    }
)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


#: Where each client keeps the status, in the order read: the first that holds one wins.
_STATUS_PLACES = (
    ("response", "status_code"),
    ("response", "status"),
    (None, "status_code"),
    (None, "status"),
    (None, "code"),
)


def _status_of(exc: BaseException) -> int | None:
    """The status, read one place at a time: a later place is never touched once one
    holds a status (aiohttp's deprecated ``code`` warns when read, and its ``status`` comes first)."""
    response = getattr(exc, "response", None)
    for holder, name in _STATUS_PLACES:
        status = _int(getattr(exc if holder is None else response, name, None))
        if status is not None and 100 <= status <= 599:
            return status
    return None


def _read_http(exc: BaseException) -> Reading | None:
    return read_status(_status_of(exc))


# -- errno --------------------------------------------------------------------------------------


def _errnos(*names: str) -> frozenset[int]:
    return frozenset(getattr(errno, name) for name in names if hasattr(errno, name))


#: A wrong path or argument: the same call can never succeed, or not until something exists.
_ERRNO_MISTAKE_MAY_CHANGE = _errnos("ENOENT", "ENOTDIR", "EEXIST", "ENOTEMPTY", "ENXIO", "ENODEV", "ESRCH")
_ERRNO_MISTAKE = _errnos(
    "EISDIR",
    "ENAMETOOLONG",
    "EINVAL",
    "ELOOP",
    "EXDEV",
    "ESPIPE",
    "E2BIG",
    "ERANGE",
    "EDOM",
    "EFBIG",
    "ENOEXEC",
    "ENOTSOCK",
    "EDESTADDRREQ",
    "EAFNOSUPPORT",
    "EPROTONOSUPPORT",
    "EOPNOTSUPP",
    "ENOTSUP",
    "EILSEQ",
    "ENOTTY",
    "EMLINK",
)
_ERRNO_CONTROL = _errnos("EACCES", "EPERM")
#: The system's or the network's trouble: every caller meets it.
#: ``EBADF`` is here: a closed descriptor is the tool's own state, never the model's argument.
_ERRNO_FAILURE = _errnos(
    "EBADF",
    "EIO",
    "ENOSPC",
    "EDQUOT",
    "EMFILE",
    "ENFILE",
    "EROFS",
    "ENOMEM",
    "EAGAIN",
    "EWOULDBLOCK",
    "EBUSY",
    "ETXTBSY",
    "ESTALE",
    "EDEADLK",
    "ENOLCK",
    "EINTR",
    "ENOBUFS",
    "EREMOTEIO",
    "ECONNREFUSED",
    "ECONNRESET",
    "ECONNABORTED",
    "EPIPE",
    "ETIMEDOUT",
    "ENETUNREACH",
    "EHOSTUNREACH",
    "ENETDOWN",
    "EHOSTDOWN",
    "EADDRINUSE",
    "EADDRNOTAVAIL",
    "ENOTCONN",
    "ESHUTDOWN",
)


def read_errno(number: Any) -> Reading | None:
    """The reading of an ``errno`` value (None for a number no rule names)."""
    number = _int(number)
    if number is None:
        return None
    name = errno.errorcode.get(number)
    if name is None:
        return None
    rule = f"errno.{name}"
    if number in _ERRNO_FAILURE:
        return Reading(FAILURE, rule)
    if number in _ERRNO_CONTROL:
        return Reading(CONTROL, rule)
    if number in _ERRNO_MISTAKE_MAY_CHANGE:
        return Reading(MISTAKE, rule, True)
    if number in _ERRNO_MISTAKE:
        return Reading(MISTAKE, rule)
    return None


#: PEP 3151's OSError subclasses and the errno each stands for, for one raised without an
#: errno (``asyncio.timeout`` and aiohttp raise a bare ``TimeoutError``; code raises
#: ``ConnectionRefusedError("...")``). The standard library's other ``TimeoutError`` classes
#: count too: before Python 3.11, asyncio's and concurrent.futures' are not ``OSError``
#: (a third party's class of that name is not: urllib3's refused connection is one).
_ERRNO_OF_CLASS = {
    "TimeoutError": "ETIMEDOUT",
    "ConnectionRefusedError": "ECONNREFUSED",
    "ConnectionResetError": "ECONNRESET",
    "ConnectionAbortedError": "ECONNABORTED",
    "BrokenPipeError": "EPIPE",
    "FileNotFoundError": "ENOENT",
    "FileExistsError": "EEXIST",
    "IsADirectoryError": "EISDIR",
    "NotADirectoryError": "ENOTDIR",
    "PermissionError": "EACCES",
    "ProcessLookupError": "ESRCH",
    "InterruptedError": "EINTR",
    "BlockingIOError": "EAGAIN",
}


_STDLIB_TIMEOUT_MODULES = frozenset({"builtins", "asyncio", "concurrent"})


def _errno_of_class(kind: type) -> int | None:
    for klass in kind.__mro__:
        name = klass.__name__
        module = (getattr(klass, "__module__", "") or "").split(".", 1)[0]
        if module == "builtins" or (name == "TimeoutError" and module in _STDLIB_TIMEOUT_MODULES):
            errno_name = _ERRNO_OF_CLASS.get(name)
            if errno_name is not None:
                return getattr(errno, errno_name, None)
    return None


def _read_errno(exc: BaseException) -> Reading | None:
    number = _int(getattr(exc, "errno", None))
    if number is None:
        number = _errno_of_class(type(exc))
    return read_errno(number)


# -- SQL ----------------------------------------------------------------------------------------

#: SQLSTATE classes (the first two characters) that say the statement or its data was wrong.
_SQL_MISTAKE_CLASSES = frozenset({"02", "0A", "21", "22", "23", "26", "27", "2B", "2F", "34", "3F", "42", "44"})
#: SQLSTATE classes of authorization of the statement: control.
_SQL_CONTROL_CLASSES = frozenset({"0L", "0P"})
#: SQLSTATE classes that say the database cannot serve: connection, credentials, a missing
#: database, resources, locks and serialization, shutdown, system errors.
_SQL_FAILURE_CLASSES = frozenset(
    {"08", "25", "28", "2D", "38", "39", "3B", "3D", "40", "53", "55", "57", "58", "F0", "HV", "XX"}
)
#: Single SQLSTATEs read apart from their class.
_SQL_CONTROL_STATES = frozenset({"42501"})  # insufficient_privilege
_SQL_MAY_CHANGE_STATES = frozenset({"02000", "23505", "42P07", "42710"})  # no data; already exists
_SQL_MISTAKE_STATES = frozenset({"54001", "54011", "54023", "54000"})  # the statement is too complex or long


def read_sqlstate(state: Any) -> Reading | None:
    """The reading of a five-character SQLSTATE (None for one no class rule names)."""
    if not isinstance(state, str) or len(state) != 5 or not state.isascii() or not state.isalnum():
        return None
    state = state.upper()
    rule = f"sqlstate.{state}"
    if state in _SQL_CONTROL_STATES:
        return Reading(CONTROL, rule)
    if state in _SQL_MISTAKE_STATES:
        return Reading(MISTAKE, rule)
    klass = state[:2]
    if klass in _SQL_FAILURE_CLASSES:
        return Reading(FAILURE, rule)
    if klass in _SQL_CONTROL_CLASSES:
        return Reading(CONTROL, rule)
    if klass in _SQL_MISTAKE_CLASSES:
        return Reading(MISTAKE, rule, state in _SQL_MAY_CHANGE_STATES)
    return None


def _read_sqlstate(exc: BaseException) -> Reading | None:
    # psycopg 3 and asyncpg: ``sqlstate``; psycopg2: ``pgcode``; mysql-connector: ``sqlstate``.
    for name in ("sqlstate", "pgcode"):
        reading = read_sqlstate(getattr(exc, name, None))
        if reading is not None:
            return reading
    return None


#: sqlite's primary result codes (the name's first part: SQLITE_IOERR_READ is SQLITE_IOERR).
_SQLITE_MISTAKE = frozenset({"SQLITE_ERROR", "SQLITE_CONSTRAINT", "SQLITE_MISMATCH", "SQLITE_RANGE", "SQLITE_TOOBIG"})
_SQLITE_CONTROL = frozenset({"SQLITE_AUTH", "SQLITE_PERM"})
_SQLITE_FAILURE = frozenset(
    {
        "SQLITE_BUSY",
        "SQLITE_LOCKED",
        "SQLITE_CANTOPEN",
        "SQLITE_IOERR",
        "SQLITE_CORRUPT",
        "SQLITE_FULL",
        "SQLITE_NOMEM",
        "SQLITE_NOTADB",
        "SQLITE_PROTOCOL",
        "SQLITE_INTERNAL",
        "SQLITE_READONLY",
        "SQLITE_NOLFS",
        "SQLITE_SCHEMA",
        "SQLITE_MISUSE",
        "SQLITE_INTERRUPT",
        "SQLITE_ABORT",
    }
)


def read_sqlite(name: Any) -> Reading | None:
    """The reading of an sqlite result code name (``sqlite_errorname``)."""
    if not isinstance(name, str) or not name.startswith("SQLITE_") or len(name) > 64:
        return None
    parts = name.split("_")
    primary = "_".join(parts[:2])
    rule = f"sqlite.{name}"
    if primary in _SQLITE_FAILURE:
        return Reading(FAILURE, rule)
    if primary in _SQLITE_CONTROL:
        return Reading(CONTROL, rule)
    if primary in _SQLITE_MISTAKE:
        return Reading(MISTAKE, rule, primary == "SQLITE_CONSTRAINT")
    return None


def _read_sqlite(exc: BaseException) -> Reading | None:
    reading = read_sqlite(getattr(exc, "sqlite_errorname", None))
    if reading is not None and reading.kind == MISTAKE and reading.rule == "sqlite.SQLITE_ERROR":
        # SQLITE_ERROR is sqlite's generic code: its text says whether it was the statement.
        text_reading = read_text(exception_message(exc))
        if text_reading is not None and text_reading.kind != MISTAKE:
            return text_reading
    return reading


# PEP 249's exception classes, for a driver that gives no code: the statement's trouble, or the database's.
_DBAPI_MISTAKE = frozenset({"ProgrammingError", "DataError", "IntegrityError", "NotSupportedError"})
_DBAPI_FAILURE = frozenset({"OperationalError", "InternalError", "InterfaceError"})


def _read_dbapi(exc: BaseException) -> Reading | None:
    names = [klass.__name__ for klass in type(exc).__mro__]
    if "DatabaseError" not in names and "InterfaceError" not in names:
        return None
    for name in names:
        if name in _DBAPI_MISTAKE:
            # A driver also raises ProgrammingError for its own state, whatever the statement:
            # sqlite3's closed connection, or one used from another thread. Its text says so.
            text_reading = read_text(exception_message(exc))
            if text_reading is not None and text_reading.kind == FAILURE:
                return text_reading
            return Reading(MISTAKE, f"dbapi.{name}")
        if name in _DBAPI_FAILURE:
            text_reading = read_text(exception_message(exc))
            if text_reading is not None:
                return text_reading
            return Reading(FAILURE, f"dbapi.{name}")
    return None


# -- gRPC, Google, AWS --------------------------------------------------------------------------

_GRPC_MISTAKE = frozenset({"INVALID_ARGUMENT", "OUT_OF_RANGE"})
_GRPC_MISTAKE_MAY_CHANGE = frozenset({"NOT_FOUND", "ALREADY_EXISTS", "FAILED_PRECONDITION"})
_GRPC_CONTROL = frozenset({"PERMISSION_DENIED", "CANCELLED"})
_GRPC_FAILURE = frozenset(
    {"UNAUTHENTICATED", "RESOURCE_EXHAUSTED", "ABORTED", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE"}
    | {"DATA_LOSS", "DEADLINE_EXCEEDED", "UNKNOWN"}
)


def read_grpc(name: Any) -> Reading | None:
    """The reading of a gRPC status code name (``NOT_FOUND``, ``StatusCode.NOT_FOUND``)."""
    if not isinstance(name, str):
        return None
    name = name.rsplit(".", 1)[-1].upper()
    rule = f"grpc.{name}"
    if name in _GRPC_FAILURE:
        return Reading(FAILURE, rule)
    if name in _GRPC_CONTROL:
        return Reading(CONTROL, rule)
    if name in _GRPC_MISTAKE_MAY_CHANGE:
        return Reading(MISTAKE, rule, True)
    if name in _GRPC_MISTAKE:
        return Reading(MISTAKE, rule)
    return None


def _read_grpc(exc: BaseException) -> Reading | None:
    code = getattr(exc, "code", None)
    if callable(code):  # grpc.RpcError (a grpc.Call): ``code()`` is a StatusCode
        try:
            code = code()
        except Exception:
            return None
    name = getattr(code, "name", None)
    if name is None:
        grpc_code = getattr(exc, "grpc_status_code", None)  # google.api_core
        name = getattr(grpc_code, "name", None)
    return read_grpc(name)


#: The AWS SDKs' retry classification: throttling and transient codes, and credentials that fail every call.
_AWS_FAILURE_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "TransactionInProgressException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "LimitExceededException",
        "RequestThrottled",
        "SlowDown",
        "PriorRequestNotComplete",
        "EC2ThrottledException",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "InternalFailure",
        "InternalServerError",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "ExpiredTokenException",
        "AuthFailure",
        "MissingAuthenticationToken",
        "InvalidSignatureException",
        "IncompleteSignature",
        "InvalidToken",
        "TokenRefreshRequired",
    }
)
_AWS_CONTROL_CODES = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "Forbidden"})
_AWS_MAY_CHANGE_SUFFIXES = ("NotFound", "NotFoundException", "NoSuchKey", "NoSuchBucket", "NoSuchEntity")
#: Codes that name the request's own fault in every AWS service, read when no status comes
#: with them (an error's text names only the code).
_AWS_MISTAKE_CODES = frozenset(
    {
        "ValidationException",
        "ValidationError",
        "InvalidArgument",
        "InvalidParameter",
        "InvalidParameterValue",
        "InvalidParameterException",
        "InvalidParameterCombination",
        "MissingParameter",
        "MalformedQueryString",
        "SerializationException",
        "ConditionalCheckFailedException",
    }
)


def read_aws(code: Any, status: Any) -> Reading | None:
    """The reading of an AWS error code (botocore ``ClientError``), with its HTTP status."""
    if not isinstance(code, str) or not code or len(code) > 128:
        return read_status(status)
    rule = f"aws.{code}"
    if code in _AWS_FAILURE_CODES:
        return Reading(FAILURE, rule)
    if code in _AWS_CONTROL_CODES:
        return Reading(CONTROL, rule)
    by_status = read_status(status)
    if by_status is None:
        if code.startswith("NoSuch") or code.endswith(_AWS_MAY_CHANGE_SUFFIXES):
            return Reading(MISTAKE, rule, True)
        return Reading(MISTAKE, rule) if code in _AWS_MISTAKE_CODES else None
    may_change = by_status.may_change or code.startswith("NoSuch") or code.endswith(_AWS_MAY_CHANGE_SUFFIXES)
    return Reading(by_status.kind, rule, may_change if by_status.kind == MISTAKE else False)


def _read_aws(exc: BaseException) -> Reading | None:
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None
    error = response.get("Error")
    metadata = response.get("ResponseMetadata")
    code = error.get("Code") if isinstance(error, dict) else None
    status = metadata.get("HTTPStatusCode") if isinstance(metadata, dict) else None
    return read_aws(code, status)


# -- JSON-RPC and MCP ---------------------------------------------------------------------------

_JSONRPC_PARSE_ERROR = -32700
_JSONRPC_INVALID_REQUEST = -32600
_JSONRPC_METHOD_NOT_FOUND = -32601
_JSONRPC_INVALID_PARAMS = -32602
_JSONRPC_INTERNAL_ERROR = -32603
_MCP_CONNECTION_CLOSED = -32000
_MCP_REQUEST_TIMEOUT = -32001
_MCP_RESOURCE_NOT_FOUND = -32002
_MCP_MISSING_CAPABILITY = -32021
_MCP_UNSUPPORTED_VERSION = -32022
_MCP_RATE_LIMITED = -32023
_MCP_URL_ELICITATION_REQUIRED = -32042


def read_jsonrpc(code: Any, message: Any = None) -> Reading | None:
    """The reading of a JSON-RPC error code (and its message) as MCP uses them.

    ``-32602`` (invalid params) is the caller's mistake, but servers also answer it for
    an id that does not exist yet: with a not-found message an identical call may
    succeed later. ``-32021``/``-32022`` (a missing capability, an unsupported version)
    and the URL-elicitation auth gate (``-32042``) are neither outcome; a rate limit
    (``-32023``) is a failure whose retry hint opens the breaker for as long as asked.
    """
    code = _int(code)
    if code is None:
        return None
    rule = f"jsonrpc.{code}"
    if code in (_JSONRPC_INVALID_PARAMS, _MCP_RESOURCE_NOT_FOUND):
        text = message[:500].lower() if isinstance(message, str) else ""
        return Reading(MISTAKE, rule, code == _MCP_RESOURCE_NOT_FOUND or _NOT_FOUND.search(text) is not None)
    if code in (_JSONRPC_METHOD_NOT_FOUND, _JSONRPC_INVALID_REQUEST):
        return Reading(MISTAKE, rule)
    if code in (_MCP_MISSING_CAPABILITY, _MCP_UNSUPPORTED_VERSION, _MCP_URL_ELICITATION_REQUIRED):
        return Reading(CONTROL, rule)
    if code in (_JSONRPC_PARSE_ERROR, _JSONRPC_INTERNAL_ERROR, _MCP_CONNECTION_CLOSED, _MCP_REQUEST_TIMEOUT):
        return Reading(FAILURE, rule)
    if code == _MCP_RATE_LIMITED:
        return Reading(FAILURE, rule)
    return None


def _read_jsonrpc(exc: BaseException) -> Reading | None:
    error = getattr(exc, "error", None)
    return read_jsonrpc(getattr(error, "code", None), getattr(error, "message", None))


# -- text ---------------------------------------------------------------------------------------
#
# Several frameworks catch a tool's exception and hand over only its text, and an MCP
# server's ``isError`` answer is text. The text rules transcribe the same standards
# (a status code, an errno name or message, an SQLSTATE, a gRPC status name, sqlite's
# and PostgreSQL's messages), then a small vocabulary. Failure words are read first:
# "invalid API key" is a credential, not a mistake.
#
# The vocabulary patterns are lower case and searched in the lowered text: Python's
# ``re`` runs a long alternation several times slower with IGNORECASE, and an
# unrecognised error's text goes through all of them.

_TEXT_FAILURE = LazyPattern(
    r"connection ?(refused|reset|aborted)|broken pipe|connect(ion)? ?(error|timeout)|"
    r"name or service not known|nodename nor servname|temporary failure in name resolution|getaddrinfo failed|"
    r"no route to host|network is unreachable|host is unreachable|timed ?out|time-?out|deadline exceeded|"
    r"certificate verify failed|ssl ?error|bad gateway|service unavailable|temporarily unavailable|"
    r"circuit ?breaker (is )?open|too many recent failures|"
    r"internal (server )?error|server disconnected|server closed the connection|"
    r"remote ?protocol ?error|too many requests|rate ?limit|"
    r"quota exceeded|unauthori[sz]ed|unauthenticated|authentication (failed|required|error)|"
    r"invalid (api[ _-]?key|token|credentials?|access key|client token)|expired (token|credentials?)|"
    r"(token|credentials?) (has |have )?expired|database (is )?locked|database .{0,80}does not exist|"
    r"unable to open( the)? database|could not connect|cannot connect|no space left|disk (is )?full|"
    r"read-only file system|input/output error|too many open files|out of memory|disk i/o error|"
    r"database disk image is malformed|file is not a database|cannot operate on a closed|read-?only database|"
    r"terminating connection|the database system is (starting up|shutting down|in recovery)|"
    r"(connection|database|cursor|pool) (is |was |has been |already )+closed|can only be used in that same thread",
)
#: A status in an error's text: after a word that announces one, before its reason phrase,
#: in requests' "409 Client Error: Conflict for url" and aiohttp's "409, message='Conflict'".
_TEXT_STATUS = LazyPattern(
    r"(?:\bhttp(?:/\d(?:\.\d)?)?|\bstatus(?:[ _]?code)?|\berror(?: code)?|\bresponse|\breturned|\bgot)"
    r"[\s:=(\[\"']{0,3}([45]\d\d)\b|\b([45]\d\d)(?:[\s:-]{1,3}(?:not found|bad request|unauthori[sz]ed|forbidden|"
    r"method not allowed|conflict|gone|unprocessable|payment required|internal server error|bad gateway|"
    r"service unavailable|gateway time-?out|too many requests|request time-?out|not acceptable|"
    r"precondition failed|payload too large|uri too long|unsupported media type|(?:client|server) error\b)|"
    r", message=)",
    re.IGNORECASE,
)
_TEXT_ERRNO_NUMBER = LazyPattern(r"\[errno (-?\d{1,5})\]", re.IGNORECASE)
_TEXT_ERRNO_NAME = LazyPattern(r"\b(E[A-Z0-9]{2,15})\b")
#: The strerror texts of the errno values a rule names (glibc's wording).
_ERRNO_MESSAGES = (
    ("no such file or directory", "ENOENT"),
    ("not a directory", "ENOTDIR"),
    ("is a directory", "EISDIR"),
    ("file exists", "EEXIST"),
    ("file name too long", "ENAMETOOLONG"),
    ("directory not empty", "ENOTEMPTY"),
    ("invalid argument", "EINVAL"),
    ("permission denied", "EACCES"),
    ("operation not permitted", "EPERM"),
)
_TEXT_SQLSTATE = LazyPattern(r"\bsql ?state[\s:=\[(\"']{0,3}([0-9A-Z]{5})\b", re.IGNORECASE)
_TEXT_GRPC = LazyPattern(r"\bStatusCode\.([A-Z_]{2,24})\b")
#: botocore's ``ClientError`` text: "An error occurred (NoSuchKey) when calling the GetObject operation".
_TEXT_AWS = LazyPattern(r"\bAn error occurred \(([A-Za-z0-9.]{2,100})\) when calling the \w{1,100} operation")
_TEXT_SQL_MISTAKE = LazyPattern(
    r"no such (table|column|function|index|view|collation|savepoint|module)|syntax error|"
    r"(relation|column|table|function|schema|type|operator|index|view|constraint) .{0,160}does not exist|"
    r"unknown column|ambiguous column|duplicate (key|column|entry)|violates .{0,80}constraint|"
    r"(unique|not null|check|foreign key|primary key) constraint failed|datatype mismatch|"
    r"incorrect number of bindings|has no column named|wrong number of arguments to function|division by zero",
)
_NOT_FOUND = LazyPattern(
    r"not found|does not exist|doesn'?t exist|no such\b|cannot find|can'?t find|could not find|"
    r"unable to find|no (matching |such )?(file|directory|record|row|entry|item|resource|object|user|page)s? "
    r"(found|exists?|matche[sd]|with)|not exist|\bno [\w ]{1,30} found\b|did not resolve|could not resolve (?!host)",
)
_TEXT_CONTROL = LazyPattern(
    r"access (is )?denied|permission denied|forbidden|not (allowed|permitted)|outside (the )?allowed|"
    r"(is )?outside (of )?the (repository|workspace|root|sandbox|allowed)|"
    r"outside of (the )?allowed|not authori[sz]ed to|insufficient (privileges?|permissions?)|"
    r"approval (required|denied)|(denied|rejected|declined) by (the )?(user|policy|human)",
)
_TEXT_MISTAKE = LazyPattern(
    r"\binvalid (argument|input|parameter|param|value|request|query|path|url|uri|id|identifier|format|"
    r"syntax|json|date|time|timezone|time ?zone|type|name|option|field|filter|range|number|email|selector|"
    r"expression|pattern|"
    r"regex|regular expression|params|arguments|values|choice|enum|length|offset|limit|page|sort|column)s?\b|"
    r"missing (required )?(argument|parameter|field|property|key)|"
    r"required (argument|parameter|field|property) .{0,40}missing|is required\b|unexpected (keyword )?argument|"
    r"must be (a |an |one of |at least |at most |between |of )|expected .{1,40} (but )?got\b|"
    r"unknown (argument|parameter|field|option|property|key)|malformed|bad request|cannot parse|"
    r"could not parse|failed to parse|unable to parse|out of range|not a valid|"
    r"(input|argument|arguments|query|request|value|string|name|path|list|payload|body|prompt|text|page size) "
    r"(is |was )?too (long|large|big|short|small)|too many (arguments|values|items|parameters|fields|columns)",
)


def read_text(text: Any) -> Reading | None:
    """The reading of an error's text: the standards' codes and messages first, then the
    vocabulary of a wrong input ("not found", "invalid", "outside allowed"). Reads at most
    :data:`MAX_TEXT_CHARS` characters; None when nothing is recognised."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return _read_text(text[:MAX_TEXT_CHARS])
    except Exception:
        return None


def _read_text(sample: str) -> Reading | None:
    match = _TEXT_STATUS.search(sample)
    if match is not None:
        reading = read_status(int(match.group(1) or match.group(2)))
        if reading is not None:
            return reading
    match = _TEXT_SQLSTATE.search(sample)
    if match is not None:
        reading = read_sqlstate(match.group(1))
        if reading is not None:
            return reading
    match = _TEXT_GRPC.search(sample)
    if match is not None:
        reading = read_grpc(match.group(1))
        if reading is not None:
            return reading
    match = _TEXT_AWS.search(sample)
    if match is not None:
        reading = read_aws(match.group(1), None)
        if reading is not None:
            return reading
    lowered = sample.lower()
    if _TEXT_FAILURE.search(lowered) is not None:
        return Reading(FAILURE, "text.unavailable")
    reading = _text_errno(sample, lowered)
    if reading is not None:
        return reading
    if _TEXT_SQL_MISTAKE.search(lowered) is not None:
        return Reading(MISTAKE, "text.sql", _NOT_FOUND.search(lowered) is not None)
    if _TEXT_CONTROL.search(lowered) is not None:
        return Reading(CONTROL, "text.denied")
    if _NOT_FOUND.search(lowered) is not None:
        return Reading(MISTAKE, "text.not_found", True)
    if _TEXT_MISTAKE.search(lowered) is not None:
        return Reading(MISTAKE, "text.invalid")
    return None


def _text_errno(sample: str, lowered: str) -> Reading | None:
    match = _TEXT_ERRNO_NUMBER.search(sample)
    if match is not None:
        reading = read_errno(int(match.group(1)))
        if reading is not None:
            return reading
    for match in _TEXT_ERRNO_NAME.finditer(sample[:1000]):
        number = getattr(errno, match.group(1), None)
        if number is not None:
            reading = read_errno(number)
            if reading is not None:
                return reading
    for message, name in _ERRNO_MESSAGES:
        if message in lowered:
            return read_errno(getattr(errno, name))
    return None


# -- an exception ---------------------------------------------------------------------------------


def exception_message(exc: BaseException) -> str:
    """The exception's text, bounded; "" when ``str()`` fails."""
    try:
        args = exc.args
        if len(args) == 1 and isinstance(args[0], str):
            return args[0][:MAX_TEXT_CHARS]  # no copy of a huge message
        return str(exc)[:MAX_TEXT_CHARS]
    except Exception:
        return ""


def _reader_names(kind: type) -> tuple[str, ...]:
    """The structured readers that apply to an exception class, by its MRO's names and modules."""
    names = {klass.__name__ for klass in kind.__mro__}
    modules = {(getattr(klass, "__module__", "") or "").split(".", 1)[0] for klass in kind.__mro__}
    readers = []
    if {"McpError", "MCPError"} & names or "JSONRPCError" in names:
        readers.append("jsonrpc")
    if "ClientError" in names and "botocore" in modules:
        readers.append("aws")
    if modules & {"grpc", "google"}:
        readers.append("grpc")
    if names & _STATUS_CLASSES:
        readers.append("http")
    if "sqlite3" in modules:
        readers.append("sqlite")
    if modules & {"psycopg", "psycopg2", "asyncpg", "mysql", "pymysql", "MySQLdb", "psycopg_binary"} or (
        "DatabaseError" in names
    ):
        readers.append("sqlstate")
    if issubclass(kind, OSError) or "TimeoutError" in names:
        readers.append("errno")
    if "DatabaseError" in names or "InterfaceError" in names:
        readers.append("dbapi")
    return tuple(readers)


_READERS = {
    "jsonrpc": _read_jsonrpc,
    "aws": _read_aws,
    "grpc": _read_grpc,
    "http": _read_http,
    "sqlite": _read_sqlite,
    "sqlstate": _read_sqlstate,
    "errno": _read_errno,
    "dbapi": _read_dbapi,
}
_plans: dict[type, tuple[Any, ...]] = {}
_MAX_PLANS = 4096


def _plan(kind: type) -> tuple[Any, ...]:
    """The readers for ``kind``, worked out once per exception class."""
    plan = _plans.get(kind)
    if plan is None:
        plan = tuple(_READERS[name] for name in _reader_names(kind))
        if len(_plans) < _MAX_PLANS:
            _plans[kind] = plan
    return plan


def read_structured(exc: BaseException) -> Reading | None:
    """The reading of ``exc``'s own codes (status, errno, SQLSTATE, gRPC, AWS, JSON-RPC),
    without its text or its causes. Never raises."""
    try:
        for reader in _plan(type(exc)):
            reading = reader(exc)
            if reading is not None:
                return reading
    except Exception:
        return None
    return None


def read_exception(exc: BaseException) -> Reading | None:
    """The reading of an exception: its own codes, then its causes' (``raise ... from``,
    exception groups), then its text. None when nothing is recognised. Never raises."""
    try:
        return _read_exception(exc, 0)
    except Exception:
        return None


def _read_exception(exc: BaseException, depth: int) -> Reading | None:
    reading = read_structured(exc)
    if reading is not None:
        return reading
    members = getattr(exc, "exceptions", None) if "ExceptionGroup" in type(exc).__name__ else None
    if isinstance(members, (tuple, list)) and depth < MAX_DEPTH:
        return _read_group(members, depth)
    if depth < MAX_DEPTH:
        cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
        if cause is not None:
            reading = _read_exception(cause, depth + 1)
            if reading is not None:
                return reading
    if _texts_say_nothing(type(exc)):
        return None
    return read_text(exception_message(exc))


#: Python's own exceptions for a bug in the code that raised them: their texts are the
#: interpreter's ("division by zero", "has no attribute"), never a verdict on the input.
_BUG_CLASSES: tuple[type[BaseException], ...] = (
    ArithmeticError,
    AttributeError,
    NameError,
    AssertionError,
    ImportError,
    RecursionError,
    MemoryError,
    SyntaxError,
    NotImplementedError,
    SystemError,
)


def _texts_say_nothing(kind: type) -> bool:
    """True for an exception class whose text is no verdict on the call's input: Python's
    own bug classes, and a pydantic ``ValidationError`` that no adapter attributed to the
    model's arguments (raised in a tool's body, it says the tool's own data was malformed)."""
    if issubclass(kind, _BUG_CLASSES):
        return True
    return any(
        klass.__name__ == "ValidationError" and (getattr(klass, "__module__", "") or "").startswith("pydantic")
        for klass in kind.__mro__
    )


def _read_group(members: Any, depth: int) -> Reading | None:
    """A group is a mistake only when every member is one; any failure, or any member not
    recognised, makes it a failure of the tool (None: not recognised)."""
    readings = []
    for member in list(members)[:16]:
        if not isinstance(member, BaseException):
            continue
        reading = _read_exception(member, depth + 1)
        if reading is None:
            return None
        if reading.kind == FAILURE:
            return reading
        readings.append(reading)
    if not readings:
        return None
    mistakes = [r for r in readings if r.kind == MISTAKE]
    return mistakes[0] if mistakes else readings[0]
