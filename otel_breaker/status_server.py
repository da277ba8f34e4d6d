"""An opt-in HTTP endpoint inside the agent process that shows its breakers.

``OTEL_BREAKER_STATUS_ADDR=127.0.0.1:PORT`` starts it (at instrumentation, or
at the first guarded call): read-only JSON at ``GET /status`` with the same
fields as ``otel-breaker status --json`` gives for the shared store, so an
operator can see the per-process breakers of a running agent, as
resilience4j's actuator shows a service's. ``otel-breaker status --url`` reads it.

Safe by default:

* it listens on a loopback address only; any other address is refused with
  a clear error unless ``OTEL_BREAKER_STATUS_ALLOW_REMOTE=true``;
* it is read-only; ``POST /control`` (reset, open, close) answers only with
  ``OTEL_BREAKER_STATUS_CONTROL=true`` and a bearer token
  ``OTEL_BREAKER_STATUS_TOKEN`` of at least 16 characters;
* it runs in a daemon thread and never blocks or fails the program: a port
  in use or a bad address is one logged line.

Standard library only (``http.server``).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import math
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from otel_breaker.breaker import CircuitBreaker, State
from otel_breaker.config import Settings, get_settings
from otel_breaker.registry import BreakerRegistry, default_registry

logger = logging.getLogger("otel_breaker")

MIN_TOKEN_CHARS = 16
MAX_BODY_BYTES = 4096
OPERATIONS = ("reset", "open", "close")
CONTROL_OFF = "control is off: set OTEL_BREAKER_STATUS_CONTROL=true and OTEL_BREAKER_STATUS_TOKEN"


class StatusAddressError(ValueError):
    """``OTEL_BREAKER_STATUS_ADDR`` is malformed, or not loopback without the opt-in."""


def parse_address(addr: str, allow_remote: bool = False) -> tuple[str, int]:
    """``host:port`` (``[::1]:port`` for IPv6) -> (host, port). Only loopback
    hosts unless ``allow_remote``: a status endpoint must not reach the
    network because a variable was mistyped."""
    text = addr.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit() or not host:
        raise StatusAddressError(f"OTEL_BREAKER_STATUS_ADDR={addr!r}: expected HOST:PORT, e.g. 127.0.0.1:9470")
    port = int(port_text)
    if port > 65535:
        raise StatusAddressError(f"OTEL_BREAKER_STATUS_ADDR={addr!r}: port must be 0-65535")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not allow_remote and not _is_loopback(host):
        raise StatusAddressError(
            f"OTEL_BREAKER_STATUS_ADDR={addr!r}: {host} is not a loopback address; the status endpoint "
            "listens on 127.0.0.1 or ::1 unless OTEL_BREAKER_STATUS_ALLOW_REMOTE=true"
        )
    return host, port


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# -- what the endpoint shows -------------------------------------------------------------------


def breaker_row(breaker: CircuitBreaker, wall_ms: int, now: float) -> dict[str, Any]:
    """One breaker with the fields of the shared store's ``status`` rows."""
    stats = breaker.stats  # applies an elapsed cooldown first
    retry_after: float | None = None
    forced = False
    if stats.state is State.OPEN:
        remaining = breaker.retry_after
        forced = math.isinf(remaining)
        retry_after = None if forced else remaining
    last_change_ms = None
    age = None
    if stats.last_state_change is not None:
        age = max(0.0, now - stats.last_state_change)
        last_change_ms = wall_ms - int(age * 1000)
    agent = breaker.agent_name or None
    session = getattr(breaker, "session_id", None) or None
    key = breaker.name
    if session:
        key = f"session {session}/{breaker.name}"
    elif agent:
        key = f"agent {agent}/{breaker.name}"
    return {
        "key": key,
        "tool": breaker.name,
        "agent": agent,
        "session": session,
        "state": stats.state.value,
        "consecutive_failures": stats.consecutive_failures,
        "failures": stats.failure_count,
        "successes": stats.success_count,
        "opened": stats.opened_count,
        "forced_open": forced,
        "retry_after_s": retry_after,
        "last_change_ms": last_change_ms,
        "last_change_age_s": age,
    }


def snapshot(registry: BreakerRegistry) -> list[dict[str, Any]]:
    """Every breaker of ``registry``, sorted like the shared store's ``status``."""
    wall_ms = int(time.time() * 1000)
    rows = []
    for breaker in registry.breakers():
        rows.append(breaker_row(breaker, wall_ms, breaker._clock()))
    rows.sort(key=lambda r: (r["tool"], r["agent"] or "", r["session"] or ""))
    return rows


def control(registry: BreakerRegistry, op: str, tool: str | None, duration: float | None = None) -> int:
    """Apply ``op`` to every breaker of ``tool`` (all breakers when None). Returns how
    many; raises LookupError for a tool with no breaker (never creates one)."""
    breakers = [b for b in registry.breakers() if tool is None or b.name == tool]
    if not breakers:
        raise LookupError(f"no breaker for {'tool ' + repr(tool) if tool else 'any tool'} in this process")
    for breaker in breakers:
        if op == "reset":
            breaker.reset()
        elif op == "open":
            breaker.force_open(duration)
        elif op == "close":
            breaker.force_close()
        else:  # pragma: no cover - checked by the caller
            raise ValueError(op)
    return len(breakers)


# -- the server ---------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "otel-breaker"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # quiet: no per-request stderr lines
        logger.debug("otel-breaker status endpoint: " + format, *args)

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = (json.dumps(body, indent=2) + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] not in ("/", "/status"):
            self._send(404, {"error": "not found; GET /status"})
            return
        try:
            rows = snapshot(self.server.registry)
        except Exception:
            logger.debug("otel-breaker: status snapshot failed", exc_info=True)
            self._send(500, {"error": "snapshot failed"})
            return
        self._send(200, {"source": "process", "pid": os.getpid(), "breakers": rows})

    def do_POST(self) -> None:
        if self.path.split("?", 1)[0] != "/control":
            self._send(404, {"error": "not found; POST /control"})
            return
        token = self.server.token
        if token is None:
            self._send(403, {"error": CONTROL_OFF})
            return
        offered = self.headers.get("Authorization", "")
        if not hmac.compare_digest(offered.encode(), f"Bearer {token}".encode()):
            self._send(401, {"error": "missing or wrong bearer token"})
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 < length <= MAX_BODY_BYTES:
                raise ValueError(f"a JSON body of 1-{MAX_BODY_BYTES} bytes is required")
            request = json.loads(self.rfile.read(length))
            op, tool, duration = _control_request(request)
        except ValueError as exc:
            self._send(400, {"error": str(exc)[:200]})
            return
        try:
            count = control(self.server.registry, op, tool, duration)
        except LookupError as exc:
            self._send(404, {"error": str(exc)[:300]})
            return
        self._send(200, {"op": op, "tool": tool, "count": count})


def _control_request(request: Any) -> tuple[str, str | None, float | None]:
    if not isinstance(request, dict):
        raise ValueError("expected a JSON object")
    op = request.get("op")
    if op not in OPERATIONS:
        raise ValueError(f"op must be one of {', '.join(OPERATIONS)}")
    tool = request.get("tool")
    if tool is not None and (not isinstance(tool, str) or not tool or len(tool) > 256):
        raise ValueError("tool must be a non-empty name of at most 256 characters")
    if tool is None and not request.get("all"):
        raise ValueError('name a tool or pass "all": true')
    duration = request.get("duration_s")
    if duration is not None and (
        isinstance(duration, bool) or not isinstance(duration, (int, float)) or not duration >= 0
    ):
        raise ValueError("duration_s must be a number of seconds >= 0")
    return op, tool, None if duration is None else float(duration)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], registry: BreakerRegistry, token: str | None) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)
        self.registry = registry
        self.token = token


class StatusServer:
    """The endpoint, serving in a daemon thread."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        registry: BreakerRegistry | None = None,
        control_token: str | None = None,
    ) -> None:
        if control_token is not None and len(control_token) < MIN_TOKEN_CHARS:
            raise ValueError(f"the control token must have at least {MIN_TOKEN_CHARS} characters")
        self._server = _Server((host, port), registry or default_registry(), control_token)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="otel-breaker-status", kwargs={"poll_interval": 0.5}, daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


_lock = threading.Lock()
_running: StatusServer | None = None
_tried = False


def start_from_settings(settings: Settings | None = None) -> StatusServer | None:
    """Start the endpoint ``OTEL_BREAKER_STATUS_ADDR`` asks for, once per process.
    Every problem is one logged line; the program goes on."""
    global _running, _tried
    if _tried:
        return _running
    with _lock:
        if _tried:
            return _running
        _tried = True
        settings = settings or get_settings()
        if not settings.status_addr:
            return None
        try:
            host, port = parse_address(settings.status_addr, settings.status_allow_remote)
            token = None
            if settings.status_control:
                if not settings.status_token or len(settings.status_token) < MIN_TOKEN_CHARS:
                    logger.error(
                        "otel-breaker: OTEL_BREAKER_STATUS_CONTROL=true needs OTEL_BREAKER_STATUS_TOKEN of at "
                        "least %d characters; the status endpoint stays read-only",
                        MIN_TOKEN_CHARS,
                    )
                else:
                    token = settings.status_token
            _running = StatusServer(host, port, control_token=token)
        except (StatusAddressError, ValueError) as exc:
            logger.error("otel-breaker: status endpoint not started: %s", exc)
            return None
        except OSError as exc:
            logger.error(
                "otel-breaker: status endpoint not started on %s: %s%s",
                settings.status_addr,
                exc,
                _port_owner(settings.status_addr),
            )
            return None
        logger.info("otel-breaker: breaker status at %s/status", _running.url)
        return _running


def _port_owner(addr: str) -> str:
    """Names the exporter that listens on ``addr``'s port, when one is configured to."""
    from otel_breaker.sdk_setup import prometheus_address

    _host, port = prometheus_address()
    if addr.rpartition(":")[2] != str(port):
        return ""
    return (
        f" (port {port} is the Prometheus exporter's, OTEL_EXPORTER_PROMETHEUS_PORT; "
        "give OTEL_BREAKER_STATUS_ADDR another port)"
    )


def _after_fork() -> None:  # a child has no server thread; let it start its own
    global _running, _tried
    _running = None
    _tried = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
