"""HTTP clients' own errors from a real local server, read as RFC 9110 reads their status.

Each client (httpx, requests, urllib, aiohttp) raises its own exception class with the
status in its own attribute; the rule must find it in every one. 4xx caused by the
request is the caller's mistake, 403 is authorization (control), and what fails on
every call whatever the arguments (401, 407, 408, 429, 5xx) is a failure, as are a
refused connection and a server that never answers.
"""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request

import aiohttp
import httpx
import pytest
import requests
from corpus import caught, expect

from otel_breaker.outcome_rules import CONTROL, FAILURE, MISTAKE, read_text

#: Generous for a busy machine: a case's server answers at once.
ANSWER_TIMEOUT = 30.0
#: How long a client waits for the silent server; the case asserts the error, never the time.
SILENT_TIMEOUT = 1.0

STATUSES = [
    (400, MISTAKE),
    (404, MISTAKE),
    (405, MISTAKE),
    (409, MISTAKE),
    (410, MISTAKE),
    (422, MISTAKE),
    (403, CONTROL),
    (401, FAILURE),
    (407, FAILURE),
    (408, FAILURE),
    (429, FAILURE),
    (500, FAILURE),
    (502, FAILURE),
    (503, FAILURE),
    (504, FAILURE),
]
STATUS_IDS = [f"{status}-{kind}" for status, kind in STATUSES]


def httpx_get(url: str, timeout: float = ANSWER_TIMEOUT) -> None:
    httpx.get(url, timeout=timeout).raise_for_status()


def requests_get(url: str, timeout: float = ANSWER_TIMEOUT) -> None:
    requests.get(url, timeout=timeout).raise_for_status()


def urllib_get(url: str, timeout: float = ANSWER_TIMEOUT) -> None:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        response.read()


async def _aiohttp_get(url: str, timeout: float) -> None:
    async with (
        aiohttp.ClientSession(raise_for_status=True, timeout=aiohttp.ClientTimeout(total=timeout)) as session,
        session.get(url) as response,
    ):
        await response.read()


def aiohttp_get(url: str, timeout: float = ANSWER_TIMEOUT) -> None:
    asyncio.run(_aiohttp_get(url, timeout))


CLIENTS = [httpx_get, requests_get, urllib_get, aiohttp_get]
CLIENT_IDS = ["httpx", "requests", "urllib", "aiohttp"]


@pytest.mark.parametrize("get", CLIENTS, ids=CLIENT_IDS)
@pytest.mark.parametrize(("status", "kind"), STATUSES, ids=STATUS_IDS)
def test_status_error(get, status: int, kind: str, http_url: str) -> None:
    expect(caught(get, f"{http_url}/status/{status}"), kind, f"http.{status}")


@pytest.mark.parametrize("get", CLIENTS, ids=CLIENT_IDS)
@pytest.mark.parametrize(("status", "kind"), STATUSES, ids=STATUS_IDS)
def test_status_error_as_text(get, status: int, kind: str, http_url: str) -> None:
    """A framework that hands over only the error's text gets the same reading from it:
    each client words its status differently ("HTTP Error 404: Not Found",
    "409 Client Error: Conflict for url", "409, message='Conflict'")."""
    exc = caught(get, f"{http_url}/status/{status}")
    reading = read_text(str(exc))
    assert reading is not None and (reading.kind, reading.rule) == (kind, f"http.{status}"), (str(exc), reading)


@pytest.mark.parametrize("get", CLIENTS, ids=CLIENT_IDS)
def test_success_raises_nothing(get, http_url: str) -> None:
    """The server's 200 is not an error for any client (the cases' errors come from the status)."""
    get(f"{http_url}/status/200")


@pytest.mark.parametrize(
    ("get", "rule"),
    [
        (httpx_get, "text.unavailable"),
        (requests_get, "errno.ECONNREFUSED"),
        (urllib_get, "errno.ECONNREFUSED"),
        (aiohttp_get, "errno.ECONNREFUSED"),
    ],
    ids=CLIENT_IDS,
)
def test_connection_refused(get, rule: str, dead_port: int) -> None:
    expect(caught(get, f"http://127.0.0.1:{dead_port}/"), FAILURE, rule)


@pytest.mark.parametrize(
    ("get", "rule"),
    [
        # httpcore re-raises its timeout ``from None``: only the text "timed out" is left.
        (httpx_get, "text.unavailable"),
        (requests_get, "errno.ETIMEDOUT"),
        (urllib_get, "errno.ETIMEDOUT"),
        (aiohttp_get, "errno.ETIMEDOUT"),
    ],
    ids=CLIENT_IDS,
)
def test_server_never_answers(get, rule: str, silent_url: str) -> None:
    expect(caught(get, f"{silent_url}/", timeout=SILENT_TIMEOUT), FAILURE, rule)
