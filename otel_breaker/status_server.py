"""An opt-in HTTP endpoint inside the agent process that shows its breakers.

``OTEL_BREAKER_STATUS_ADDR=127.0.0.1:PORT`` starts it (at instrumentation, or
at the first guarded call): the live breaker board at ``GET /`` (one
self-contained page, see :mod:`otel_breaker.board`), and JSON at
``GET /status`` with the same fields as ``otel-breaker status --json`` gives for
the shared store (paged with ``limit``/``offset``, filtered by ``tool``,
``state``, ``agent``), so an operator can see the per-process breakers of a
running agent, as resilience4j's actuator shows a service's.
``otel-breaker status --url`` reads it.

Safe by default:

* it listens on a loopback address only; any other address is refused with
  a clear error unless ``OTEL_BREAKER_STATUS_ALLOW_REMOTE=true``;
* it answers only requests whose Host header names a loopback host or the
  configured address (no DNS rebinding);
* it is read-only; ``POST /control`` (reset, open, close) answers only with
  ``OTEL_BREAKER_STATUS_CONTROL=true`` and a bearer token
  ``OTEL_BREAKER_STATUS_TOKEN`` of at least 16 characters;
* it cannot stall the agent: the breakers are read at most once a second
  however many clients poll (and only the changed ones in full), answers are
  compact and bounded, at most 64 handler threads serve, and idle connections
  are closed after 10 s;
* it runs in daemon threads and never blocks or fails the program: a port
  in use or a bad address is one logged line.

While an endpoint runs, the call path times every guarded call so the rows
can show each tool's latency (p50 and p99 over the last minute, see
:mod:`otel_breaker.latency`); a process without one pays nothing for it.

Standard library only (``http.server``).
"""

from __future__ import annotations

import ipaddress
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from otel_breaker.board.model import Board
from otel_breaker.board.server import (
    CONTROL_OFF,
    IDLE_TIMEOUT,
    MAX_BODY_BYTES,
    MAX_WORKERS,
    OPERATIONS,
    BoardServer,
    matches,
    serve_in_thread,
)
from otel_breaker.breaker import CircuitBreaker, State
from otel_breaker.config import Settings, get_settings
from otel_breaker.latency import LATENCY
from otel_breaker.registry import BreakerRegistry, default_registry
from otel_breaker.sanitize import quoted
from otel_breaker.upstream import label_of

logger = logging.getLogger("otel_breaker")

MIN_TOKEN_CHARS = 16
__all__ = ["CONTROL_OFF", "MAX_BODY_BYTES", "OPERATIONS", "StatusServer", "parse_address", "start_from_settings"]


class StatusAddressError(ValueError):
    """``OTEL_BREAKER_STATUS_ADDR`` is malformed, or not loopback without the opt-in."""


def parse_address(addr: str, allow_remote: bool = False) -> tuple[str, int]:
    """``host:port`` (``[::1]:port`` for IPv6) -> (host, port). Only loopback
    hosts unless ``allow_remote``: a status endpoint must not reach the
    network because a variable was mistyped."""
    text = addr.strip()
    shown = quoted(addr)
    host, sep, port_text = text.rpartition(":")
    if not sep or not (port_text.isascii() and port_text.isdigit()) or not host:
        raise StatusAddressError(f"OTEL_BREAKER_STATUS_ADDR={shown}: expected HOST:PORT, e.g. 127.0.0.1:9470")
    port = int(port_text)
    if port > 65535:
        raise StatusAddressError(f"OTEL_BREAKER_STATUS_ADDR={shown}: port must be 0-65535")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not allow_remote and not is_loopback(host):
        raise StatusAddressError(
            f"OTEL_BREAKER_STATUS_ADDR={shown}: {quoted(host)} is not a loopback address; the status endpoint "
            "listens on 127.0.0.1 or ::1 unless OTEL_BREAKER_STATUS_ALLOW_REMOTE=true"
        )
    return host, port


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine's loopback."""
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
    p50_ms, p99_ms = latency_ms(breaker)
    key = breaker.name
    if session:
        key = f"session {session}/{breaker.name}"
    elif agent:
        key = f"agent {agent}/{breaker.name}"
    return {
        "key": key,
        "tool": breaker.name,
        "where": breaker.source if breaker.source is not None else breaker.origin,
        "agent": agent,
        "session": session,
        "state": stats.state.value,
        "consecutive_failures": stats.consecutive_failures,
        "failures": stats.failure_count,
        "successes": stats.success_count,
        "opened": stats.opened_count,
        "rejected": stats.rejected_requests,
        "forced_open": forced,
        "retry_after_s": retry_after,
        "last_change_ms": last_change_ms,
        "last_change_age_s": age,
        "latency_p50_ms": p50_ms,
        "latency_p99_ms": p99_ms,
    }


def latency_ms(breaker: CircuitBreaker) -> tuple[float | None, float | None]:
    """(p50, p99) of ``breaker``'s calls in the last minute, in milliseconds to a hundredth;
    (None, None) when it had none, or none was timed (no endpoint was running)."""
    found = LATENCY.percentiles(breaker)
    if found is None:
        return None, None
    p50, p99 = found
    if not (math.isfinite(p50) and math.isfinite(p99)):  # the JSON answers allow no infinity
        return None, None
    return round(p50 * 1000, 2), round(p99 * 1000, 2)


def snapshot(registry: BreakerRegistry) -> list[dict[str, Any]]:
    """Every breaker of ``registry``, sorted like the shared store's ``status``."""
    wall_ms = int(time.time() * 1000)
    rows = []
    for breaker in registry.breakers():
        rows.append(breaker_row(breaker, wall_ms, breaker.clock()))
    rows.sort(key=lambda r: (r["tool"], r["agent"] or "", r["session"] or ""))
    return rows


def control(
    registry: BreakerRegistry,
    op: str,
    tool: str | None,
    duration: float | None = None,
    identity: dict[str, str | None] | None = None,
) -> int:
    """Apply ``op`` to every breaker of ``tool`` (all breakers when None), or only to
    those whose agent, session and source are what ``identity`` names. Returns how
    many; raises LookupError when none matches (never creates one)."""
    breakers = [
        b
        for b in registry.breakers()
        if (tool is None or b.name == tool) and (not identity or matches(identity, _identity_of(b)))
    ]
    if not breakers:
        named = "any tool" if not tool else "tool " + repr(tool)
        if identity:
            named += " with " + ", ".join(f"{k} {v!r}" for k, v in identity.items())
        raise LookupError(f"no breaker for {named} in this process")
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


def _identity_of(breaker: CircuitBreaker) -> dict[str, Any]:
    return {
        "agent": breaker.agent_name or None,
        "session": getattr(breaker, "session_id", None) or None,
        "where": breaker.source if breaker.source is not None else breaker.origin,
    }


class ProcessSource:
    """This process's breakers as board rows, read so that a snapshot's cost stays
    small however many breakers there are.

    Every read checks each breaker's state and generation (two attribute reads,
    no lock), so an opening or closing shows at the next snapshot. Full rows
    (counts, streaks, which take the breaker's lock) are rebuilt for breakers
    that changed state and for a rotating turn of ``per_read`` others; the rest
    keep their last row (the same object, so the board skips it too). With
    10,000 breakers and the default turn, every row is at most ten reads old,
    and one read touches every breaker lightly and 1,000 fully.
    """

    #: Rejections are counted per breaker (``rejected``), as the shared store counts them.
    counts_rejections = True

    def __init__(self, registry: BreakerRegistry, per_read: int = 1000) -> None:
        self.registry = registry
        self.per_read = per_read
        self._known: dict[int, tuple[CircuitBreaker, tuple[Any, ...], dict[str, Any]]] = {}
        self._order: list[int] = []
        self._turn = 0
        #: Wall-clock milliseconds of the latest read.
        self.read_ms: int | None = None

    def header(self) -> dict[str, Any]:
        return {"source": "process", "pid": os.getpid()}

    def rows(self) -> list[dict[str, Any]]:
        wall_ms = int(time.time() * 1000)
        breakers = self.registry.breakers()
        count = len(breakers)
        start = self._turn % count if count else 0
        self._turn = start + self.per_read
        known = self._known
        fresh: dict[int, tuple[CircuitBreaker, tuple[Any, ...], dict[str, Any]]] = {}
        for index, breaker in enumerate(breakers):
            state = breaker.state  # applies an elapsed cooldown
            quick = (state, breaker.generation)
            entry = known.get(id(breaker))
            if (
                entry is not None
                and entry[0] is breaker
                and entry[1] == quick
                and state is not State.OPEN
                and (index - start) % count >= self.per_read
            ):
                row = entry[2]  # the same object: the board knows it is unchanged
            else:
                row = breaker_row(breaker, wall_ms, breaker.clock())
                same = entry is not None and entry[0] is breaker
                row["upstream"] = entry[2]["upstream"] if same else label_of(breaker.name, breaker.source)
                row["read_ms"] = wall_ms  # a kept row's age is moved on by the time since
            fresh[id(breaker)] = (breaker, quick, row)
        if fresh.keys() != known.keys():  # breakers came or went: sort again
            ordered = sorted(fresh, key=lambda i: _order_key(fresh[i][2]))
            self._order = ordered
        self._known = fresh
        self.read_ms = wall_ms
        return [fresh[i][2] for i in self._order]


def _order_key(row: dict[str, Any]) -> tuple[str, str, str]:
    return (row["tool"], row["agent"] or "", row["session"] or "")


class StatusServer:
    """The endpoint, serving in a daemon thread (its connections in a bounded pool)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        registry: BreakerRegistry | None = None,
        control_token: str | None = None,
        idle_timeout: float = IDLE_TIMEOUT,
        max_workers: int = MAX_WORKERS,
        fleet_url: str | None = None,
        board_clock: Callable[[], float] | None = None,
        sampling: bool = True,
    ) -> None:
        if control_token is not None and len(control_token) < MIN_TOKEN_CHARS:
            raise ValueError(f"the control token must have at least {MIN_TOKEN_CHARS} characters")
        self.registry = registry if registry is not None else default_registry()  # an empty one is falsy
        self.board = Board(
            ProcessSource(self.registry),
            control=control_token is not None,
            fleet_url=fleet_url,
            clock=board_clock or time.monotonic,
        )
        self._server = BoardServer(
            (host, port),
            self.board,
            token=control_token,
            control=self._control,
            idle_timeout=idle_timeout,
            max_workers=max_workers,
        )
        self.board.document_for_start()  # breakers that exist now are the counts' baseline
        if sampling:  # every second's counts, watched or not (tests drive an injected clock instead)
            self.board.start_sampling()
        self._thread = serve_in_thread(self._server, "otel-breaker-status")
        self._closed = False
        _serving_started()  # from now on guarded calls are timed, for the rows' latency

    def _control(self, op: str, tool: str | None, duration: float | None, identity: dict[str, str | None]) -> int:
        count = control(self.registry, op, tool, duration, identity)
        self.board.invalidate()  # the next poll shows the change at once
        return count

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    @property
    def threads(self) -> int:
        """Handler threads started so far (at most ``max_workers``)."""
        return self._server.threads

    def close(self) -> None:
        self.board.stop_sampling()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
        if not self._closed:
            self._closed = True
            _serving_stopped()


#: Status endpoints serving in this process: while any does, guarded calls are timed.
_serving = 0
_serving_lock = threading.Lock()


def _serving_started() -> None:
    """An endpoint started: its rows show latency, so the call path times every call."""
    global _serving
    with _serving_lock:
        _serving += 1
        LATENCY.enable()


def _serving_stopped() -> None:
    """An endpoint stopped: when it was the last, nothing shows latency, so calls go untimed again."""
    global _serving
    with _serving_lock:
        _serving = max(0, _serving - 1)
        if _serving == 0:
            LATENCY.disable()


_lock = threading.Lock()
_running: StatusServer | None = None
_tried = False


def _fleet_url(settings: Settings) -> str | None:
    """``OTEL_BREAKER_STATUS_FLEET_URL`` when it is an http(s) URL; anything else is one
    logged line and no link (the page never links to another scheme)."""
    url = settings.status_fleet_url
    if not url:
        return None
    if url.startswith(("http://", "https://")) and url.isprintable() and len(url) <= 2048:
        return url
    logger.warning(
        "otel-breaker: OTEL_BREAKER_STATUS_FLEET_URL=%s is not an http(s) URL; the board shows no fleet link",
        quoted(url),
    )
    return None


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
            _running = StatusServer(host, port, control_token=token, fleet_url=_fleet_url(settings))
        except (StatusAddressError, ValueError) as exc:
            logger.error("otel-breaker: status endpoint not started: %s", exc)
            return None
        except OSError as exc:
            logger.error(
                "otel-breaker: status endpoint not started on %s: %s%s",
                quoted(settings.status_addr),
                exc,
                _port_owner(settings.status_addr),
            )
            return None
        logger.info("otel-breaker: breaker board at %s/ (JSON at /status)", _running.url)
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


def _after_fork() -> None:
    """A forked child has no server thread, and a lock another thread held at the fork
    stays held there forever: forget the parent's server and replace both locks."""
    global _running, _tried, _serving, _serving_lock, _lock
    _running = None
    _tried = False
    _serving = 0
    _serving_lock = threading.Lock()
    _lock = threading.Lock()
    LATENCY.disable()  # nothing shows the child's latency until it starts an endpoint of its own


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
