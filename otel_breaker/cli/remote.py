"""``otel-breaker status | reset | open | close --url URL``: a process's own breakers.

Talks to the status endpoint a running agent opens with
``OTEL_BREAKER_STATUS_ADDR`` (see :mod:`otel_breaker.status_server`). ``status``
reads it; the control verbs need the endpoint's opt-in and send the token from
``OTEL_BREAKER_STATUS_TOKEN`` (never a command-line argument, which other users
of the machine could read in the process list).
"""

from __future__ import annotations

import argparse
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from otel_breaker.cli import UsageError

TIMEOUT = 5.0
#: Pages of ``/status`` followed at most (100,000 breakers).
MAX_PAGES = 100


#: Listening on every interface is reached through this machine's loopback.
_ANY_INTERFACE = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]"}


def _base(url: str) -> str:
    """``http(s)://HOST:PORT`` of the endpoint. ``HOST:PORT`` alone (the form of
    ``OTEL_BREAKER_STATUS_ADDR``) means plain HTTP, and a wildcard host the loopback."""
    text = url.strip()
    if "://" not in text:
        host, sep, port = text.rpartition(":")
        if sep and host and port.isascii() and port.isdigit():
            text = f"http://{_ANY_INTERFACE.get(host, host)}:{port}"
    parsed = urllib.parse.urlsplit(text)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise UsageError(
            f"--url {url!r}: expected http://HOST:PORT or HOST:PORT (the agent's OTEL_BREAKER_STATUS_ADDR)"
        )
    return f"{parsed.scheme}://{parsed.netloc}"


def _request(url: str, path: str, body: dict[str, Any] | None = None, token: str | None = None) -> dict[str, Any]:
    headers = {"Accept": "application/json"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(_base(url) + path, data=data, headers=headers, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read()).get("error", "")
        except ValueError:
            message = ""
        raise UsageError(f"{_base(url)}: {message or exc.reason} (HTTP {exc.code})") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise UsageError(f"cannot read breaker status from {_base(url)}: {reason}") from None


def status(args: argparse.Namespace) -> dict[str, Any]:
    """The endpoint's status document: {"source", "pid", "breakers": [rows]}."""
    document = _request(args.url, "/status")
    if not isinstance(document, dict) or not isinstance(document.get("breakers"), list):
        raise UsageError(f"{_base(args.url)} did not answer with a breaker status document")
    # The endpoint answers in pages (at most 1,000 rows each); follow them.
    for _ in range(MAX_PAGES):
        offset = document.pop("next_offset", None)
        if not isinstance(offset, int):
            break
        page = _request(args.url, f"/status?offset={offset}")
        if not isinstance(page, dict) or not isinstance(page.get("breakers"), list):
            break
        document["breakers"].extend(page["breakers"])
        document["next_offset"] = page.get("next_offset")
    document.pop("next_offset", None)
    return document


def control(args: argparse.Namespace, op: str, tool: str | None) -> int:
    """Ask the endpoint to apply ``op``; returns how many breakers it changed."""
    token = os.environ.get("OTEL_BREAKER_STATUS_TOKEN", "").strip()
    if not token:
        raise UsageError("set OTEL_BREAKER_STATUS_TOKEN to the agent's control token to change its breakers")
    body: dict[str, Any] = {"op": op, "tool": tool}
    if tool is None:
        body["all"] = True
    if op == "open" and getattr(args, "duration", None) is not None:
        body["duration_s"] = args.duration
    answer = _request(args.url, "/control", body, token)
    return int(answer.get("count", 0))
