"""Errors the rules must survive: attributes missing, of the wrong type or raising when
read, huge texts, exception groups and ``raise ... from`` chains.

Whatever an exception holds, reading it never raises and never guesses: a status,
errno or code of the wrong type is not read (the error stays unrecognised, which the
caller counts as a failure), a text is read only to its first ``MAX_TEXT_CHARS``
characters, and causes are followed only ``MAX_DEPTH`` deep. (The cases' own texts say
nothing: ``expect(..., text=False)``.)
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from corpus import caught, expect, expect_unrecognised

from otel_breaker.outcome_rules import (
    FAILURE,
    MAX_DEPTH,
    MAX_TEXT_CHARS,
    MISTAKE,
    read_text,
)

if sys.version_info >= (3, 11):
    from builtins import ExceptionGroup
else:  # anyio depends on the backport before 3.11
    from exceptiongroup import ExceptionGroup


class Unreadable:
    """Every attribute read raises: a response object from a half-built client."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"{name} is not available")


class HTTPStatusError(Exception):
    """Named like httpx's, holding whatever the case gives it."""

    def __init__(self, *args: object, **attributes: object) -> None:
        super().__init__(*args)
        for name, value in attributes.items():
            setattr(self, name, value)


class RaisingStatus(HTTPStatusError):
    @property
    def status_code(self) -> int:
        raise RuntimeError("the response was already closed")


class RaisingErrno(OSError):
    @property
    def errno(self) -> int:  # type: ignore[override]
        raise RuntimeError("errno is gone")


class RaisingText(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text either")


class GrpcShaped(Exception):
    """A class in grpc's module whose ``code()`` raises."""

    __module__ = "grpc._channel"

    def code(self) -> Any:
        raise RuntimeError("the call was never started")


class SqlStateShaped(Exception):
    __module__ = "psycopg.errors"

    def __init__(self, sqlstate: object) -> None:
        super().__init__()
        self.sqlstate = sqlstate


class BotocoreShaped(Exception):
    """``ClientError`` in botocore's module with a malformed response."""

    __module__ = "botocore.exceptions"

    def __init__(self, response: object) -> None:
        super().__init__()
        self.response = response


BotocoreShaped.__name__ = "ClientError"


UNRECOGNISED: list[tuple[str, BaseException]] = [
    ("status-missing", HTTPStatusError()),
    ("response-none", HTTPStatusError(response=None)),
    ("status-as-text", HTTPStatusError(status_code="404")),
    ("status-as-bool", HTTPStatusError(status_code=True)),
    ("status-as-float", HTTPStatusError(status_code=404.0)),
    ("status-out-of-range", HTTPStatusError(status_code=-404, code=10**30)),
    ("status-2xx", HTTPStatusError(status_code=204)),
    ("status-property-raises", RaisingStatus()),
    ("response-unreadable", HTTPStatusError(response=Unreadable())),
    ("errno-property-raises", RaisingErrno()),
    ("errno-as-text", OSError("code-7", "")),
    ("errno-unknown-number", OSError(987654, "")),
    ("str-raises", RaisingText()),
    ("grpc-code-raises", GrpcShaped()),
    ("sqlstate-as-int", SqlStateShaped(42703)),
    ("sqlstate-too-long", SqlStateShaped("42P01-and-more")),
    ("aws-response-not-a-dict", BotocoreShaped(["Error"])),
    ("aws-error-not-a-dict", BotocoreShaped({"Error": "NoSuchKey", "ResponseMetadata": None})),
    ("plain-runtime-error", RuntimeError("the tool gave up")),
    ("key-error", KeyError("result")),
    ("no-text", Exception()),
]


@pytest.mark.parametrize("exc", [exc for _, exc in UNRECOGNISED], ids=[name for name, _ in UNRECOGNISED])
def test_unrecognised_never_raises(exc: BaseException) -> None:
    expect_unrecognised(exc)


def test_errno_of_the_wrong_type_falls_back_to_the_class() -> None:
    """``FileNotFoundError`` stands for ENOENT even when its errno attribute is not a number."""
    exc = FileNotFoundError("settings.yaml")
    exc.errno = "ENOENT"  # type: ignore[assignment]
    expect(exc, MISTAKE, "errno.ENOENT", text=False)


def test_aws_code_of_the_wrong_type_falls_back_to_the_status() -> None:
    exc = BotocoreShaped({"Error": {"Code": 404}, "ResponseMetadata": {"HTTPStatusCode": 503}})
    expect(exc, FAILURE, "http.503", text=False)


# -- huge texts -----------------------------------------------------------------------------------

FIFTY_MB = 50 * 1024 * 1024


def test_word_after_the_limit_is_not_seen() -> None:
    exc = RuntimeError("x" * FIFTY_MB + " not found")
    expect_unrecognised(exc)
    assert read_text(str(exc)) is None


def test_word_before_the_limit_is_seen() -> None:
    text = "x" * (MAX_TEXT_CHARS - 20) + " not found " + "x" * FIFTY_MB
    expect(RuntimeError(text), MISTAKE, "text.not_found", text=False)


def test_huge_text_of_many_args() -> None:
    """``str()`` of several args is built by Python, then cut: still only its start is read."""
    exc = RuntimeError("timed out", "x" * FIFTY_MB)
    expect(exc, FAILURE, "text.unavailable", text=False)


# -- chains ---------------------------------------------------------------------------------------


class ToolError(Exception):
    """A tool's own error, wrapping what it met."""


def _missing_file(tmp_path: Path) -> OSError:
    exc = caught(open, tmp_path / "missing.csv")
    assert isinstance(exc, FileNotFoundError)
    return exc


def test_raise_from_reads_the_cause(tmp_path: Path) -> None:
    def tool() -> None:
        try:
            with open(tmp_path / "missing.csv"):
                pass
        except OSError as exc:
            raise ToolError("could not load the report") from exc

    expect(caught(tool), MISTAKE, "errno.ENOENT", text=False)


def test_implicit_context_is_read(tmp_path: Path) -> None:
    def tool() -> None:
        try:
            with open(tmp_path / "missing.csv"):
                pass
        except OSError:
            raise ToolError("could not load the report")  # noqa: B904 - the implicit chain is the case

    expect(caught(tool), MISTAKE, "errno.ENOENT", text=False)


def test_from_none_hides_the_cause(tmp_path: Path) -> None:
    def tool() -> None:
        try:
            with open(tmp_path / "missing.csv"):
                pass
        except OSError:
            raise ToolError("the report service crashed") from None

    expect_unrecognised(caught(tool))


def test_cause_deeper_than_the_limit_is_not_read(tmp_path: Path) -> None:
    exc: BaseException = _missing_file(tmp_path)
    for level in range(MAX_DEPTH + 1):
        wrapper = ToolError(f"layer {level}")
        wrapper.__cause__ = exc
        exc = wrapper
    expect_unrecognised(exc)


def test_cause_cycle_ends() -> None:
    first = ToolError("first")
    second = ToolError("second")
    first.__cause__ = second
    second.__cause__ = first
    expect_unrecognised(first)


def test_http_error_wrapped_by_the_tool(http_url: str) -> None:
    def tool() -> None:
        try:
            httpx.get(f"{http_url}/status/404", timeout=30).raise_for_status()
        except httpx.HTTPError as exc:
            raise ToolError("lookup failed") from exc

    expect(caught(tool), MISTAKE, "http.404", text=False)


# -- exception groups -----------------------------------------------------------------------------


def _group_from_task_group(*failures: BaseException) -> BaseException:
    """The ExceptionGroup anyio's task group raises when its tasks fail with ``failures``."""

    async def fail(exc: BaseException) -> None:
        raise exc

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for exc in failures:
                group.start_soon(fail, exc)

    return caught(anyio.run, main)


def test_group_of_mistakes_is_a_mistake(tmp_path: Path) -> None:
    exc = _group_from_task_group(_missing_file(tmp_path), FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST)))
    assert isinstance(exc, ExceptionGroup), exc
    expect(exc, MISTAKE, "errno.ENOENT", text=False)


def test_group_with_a_failure_is_a_failure(tmp_path: Path) -> None:
    refused = ConnectionRefusedError(errno.ECONNREFUSED, os.strerror(errno.ECONNREFUSED))
    exc = _group_from_task_group(_missing_file(tmp_path), refused)
    assert isinstance(exc, ExceptionGroup), exc
    expect(exc, FAILURE, "errno.ECONNREFUSED", text=False)


def test_group_with_an_unrecognised_member_is_unrecognised(tmp_path: Path) -> None:
    exc = _group_from_task_group(_missing_file(tmp_path), KeyError("result"))
    assert isinstance(exc, ExceptionGroup), exc
    expect_unrecognised(exc)


def test_nested_group(tmp_path: Path) -> None:
    inner = ExceptionGroup("inner", [_missing_file(tmp_path)])
    outer = ExceptionGroup("outer", [inner, NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))])
    expect(outer, MISTAKE, "errno.ENOENT", text=False)


def test_wide_group_is_bounded() -> None:
    """Only the first members are read: a group of a thousand errors costs no more than sixteen."""
    members = [FileNotFoundError(errno.ENOENT, "missing")] * 1000 + [ConnectionRefusedError(errno.ECONNREFUSED, "")]
    expect(ExceptionGroup("many", members), MISTAKE, "errno.ENOENT", text=False)
