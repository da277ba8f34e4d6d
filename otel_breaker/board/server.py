"""The HTTP side of the status endpoint and of the fleet board, shared by both.

It must never hurt the program it runs in, whoever connects:

* a bounded pool: at most ``max_workers`` handler threads, started as needed,
  and at most ``max_waiting`` accepted connections waiting for one; past
  that a new connection is closed at once, so slow or idle clients cannot
  grow threads or memory without bound;
* every connection has an idle timeout (a read that waits longer closes it)
  and a deadline (a client that trickles a byte at a time is cut off too);
* the Host header must name a loopback host or the configured address, so a
  web page cannot read the endpoint through DNS rebinding (a rebinding
  attack needs its own host name in the Host header);
* answers come from :class:`otel_breaker.board.model.Board`, which reads the
  breakers at most once per second however many clients poll.

``GET /`` is the board page, ``GET /board.json`` what it polls, ``GET /status``
the rows of ``otel-breaker status --json`` (paged and filtered), and
``POST /control`` the token-guarded control API. Standard library only.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import queue
import socket
import socketserver
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from otel_breaker.board import content_security_policy, page
from otel_breaker.board.model import Board, QueryError

logger = logging.getLogger("otel_breaker")

MAX_BODY_BYTES = 4096
OPERATIONS = ("reset", "open", "close")
CONTROL_OFF = "control is off: set OTEL_BREAKER_STATUS_CONTROL=true and OTEL_BREAKER_STATUS_TOKEN"
#: An idle connection is closed after this many seconds (well within 30).
IDLE_TIMEOUT = 10.0
#: A connection still open this many seconds after a worker took it is shut down.
REQUEST_DEADLINE = 30.0
MAX_WORKERS = 64
MAX_WAITING = 256

#: ``control(op, tool, duration) -> count``; raises LookupError for an unknown tool.
Control = Callable[[str, "str | None", "float | None"], int]


def host_allowed(header: str | None, bind_host: str) -> bool:
    """Whether a request's Host header may reach this endpoint: ``localhost``, a
    loopback address, or the address the endpoint was configured with (any
    address literal when it listens on every interface), with or without a port."""
    if header is None:  # HTTP/1.0 without Host: not a browser, so not a rebinding page
        return True
    text = header.strip().lower()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return False
        host, rest = text[1:end], text[end + 1 :]
        if rest and not (rest[0] == ":" and rest[1:].isdigit()):
            return False
    else:
        host, _, port = text.partition(":")
        if port and not port.isdigit():
            return False
    host = host.rstrip(".")
    if not host:
        return False
    bind = bind_host.strip("[]").lower()
    if host in ("localhost", bind):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if address.is_loopback:
        return True
    return bind in ("0.0.0.0", "::")  # listening everywhere (opted in): any address, never a name


class _Handler(BaseHTTPRequestHandler):
    server: BoardServer
    server_version = "otel-breaker"
    sys_version = ""

    def setup(self) -> None:
        self.timeout = self.server.idle_timeout  # read by StreamRequestHandler.setup
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # quiet: no per-request stderr lines
        logger.debug("otel-breaker status endpoint: " + format, *args)

    def _headers(self, code: int, content_type: str, length: int, extra: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(length))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        for name, value in (extra or {"Cache-Control": "no-store"}).items():
            self.send_header(name, value)
        self.end_headers()

    def _send(self, code: int, body: dict[str, Any] | bytes, extra: dict[str, str] | None = None) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
        self._headers(code, "application/json", len(data), extra)
        if self.command != "HEAD":
            self.wfile.write(data)

    def _host_ok(self) -> bool:
        if host_allowed(self.headers.get("Host"), self.server.bind_host):
            return True
        self._send(403, {"error": "this endpoint answers only to a loopback host or its configured address"})
        return False

    def do_GET(self) -> None:
        if not self._host_ok():
            return
        parsed = urllib.parse.urlsplit(self.path)
        route = parsed.path
        query = dict(urllib.parse.parse_qsl(parsed.query, max_num_fields=16))
        board = self.server.board
        try:
            if route == "/":
                data = page()
                self._headers(
                    200,
                    "text/html; charset=utf-8",
                    len(data),
                    {
                        "Cache-Control": "no-store",
                        "Content-Security-Policy": content_security_policy(),
                        "X-Frame-Options": "DENY",
                    },
                )
                self.wfile.write(data)
            elif route == "/board.json":
                body, etag = board.board_document(query, parsed.query)
                if self.headers.get("If-None-Match") == etag:
                    self._headers(304, "application/json", 0, {"ETag": etag, "Cache-Control": "no-cache"})
                    return
                self._send(200, body, {"ETag": etag, "Cache-Control": "no-cache"})
            elif route == "/status":
                self._send(200, board.status_document(query, parsed.query))
            elif route == "/favicon.ico":
                self._headers(204, "image/x-icon", 0)
            else:
                self._send(404, {"error": "not found; GET / (the board), /board.json or /status"})
        except QueryError as exc:
            self._send(400, {"error": str(exc)[:200]})
        except Exception:
            logger.debug("otel-breaker: status snapshot failed", exc_info=True)
            self._send(503, {"error": "snapshot failed"})

    def do_POST(self) -> None:
        if not self._host_ok():
            return
        if self.path.split("?", 1)[0] != "/control":
            self._send(404, {"error": "not found; POST /control"})
            return
        token = self.server.token
        if token is None or self.server.control is None:
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
            op, tool, duration = control_request(request)
        except ValueError as exc:
            self._send(400, {"error": str(exc)[:200]})
            return
        try:
            count = self.server.control(op, tool, duration)
        except LookupError as exc:
            self._send(404, {"error": str(exc)[:300]})
            return
        except Exception as exc:
            logger.debug("otel-breaker: control failed", exc_info=True)
            self._send(503, {"error": f"control failed: {type(exc).__name__}"})
            return
        self._send(200, {"op": op, "tool": tool, "count": count})


def control_request(request: Any) -> tuple[str, str | None, float | None]:
    """Validate a ``POST /control`` body: (op, tool or None for all, duration)."""
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


class BoardServer(socketserver.TCPServer):
    """A TCP server whose connections are handled by a bounded, lazily grown pool."""

    allow_reuse_address = True
    request_queue_size = 64

    def __init__(
        self,
        address: tuple[str, int],
        board: Board,
        *,
        token: str | None = None,
        control: Control | None = None,
        idle_timeout: float = IDLE_TIMEOUT,
        request_deadline: float = REQUEST_DEADLINE,
        max_workers: int = MAX_WORKERS,
        max_waiting: int = MAX_WAITING,
    ) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        # The pool first: a bind that fails closes the server (server_close) inside __init__.
        self._serving: dict[Any, float] = {}  # connection -> when a worker took it
        self._waiting: queue.Queue[Any] = queue.Queue(maxsize=max_waiting)
        self._workers: list[threading.Thread] = []
        self._idle = 0
        self._pool_lock = threading.Lock()
        super().__init__(address, _Handler)
        self.board = board
        self.token = token
        self.control = control
        self.bind_host = address[0]
        self.idle_timeout = idle_timeout
        self.request_deadline = request_deadline
        self.max_workers = max_workers
        self.refused = 0  # connections closed at once because the pool and its queue were full

    @property
    def threads(self) -> int:
        """Handler threads started so far (never more than ``max_workers``)."""
        return len(self._workers)

    def process_request(self, request: Any, client_address: Any) -> None:
        try:
            self._waiting.put_nowait((request, client_address))
        except queue.Full:
            self.refused += 1
            self.shutdown_request(request)
            return
        with self._pool_lock:
            if self._waiting.qsize() > self._idle and len(self._workers) < self.max_workers:
                worker = threading.Thread(target=self._work, name="otel-breaker-status-worker", daemon=True)
                self._workers.append(worker)
                self._idle += 1
                worker.start()

    def _work(self) -> None:
        while True:
            item = self._waiting.get()
            if item is None:
                return
            with self._pool_lock:
                self._idle -= 1
            request, client_address = item
            self._serving[request] = time.monotonic()
            try:
                self.finish_request(request, client_address)
            except Exception:
                logger.debug("otel-breaker: status request failed", exc_info=True)
            finally:
                self._serving.pop(request, None)
                self.shutdown_request(request)
                with self._pool_lock:
                    self._idle += 1

    def service_actions(self) -> None:
        """Between accepts (at least every poll interval): cut off connections past the deadline."""
        now = time.monotonic()
        for request, taken in list(self._serving.items()):
            if now - taken > self.request_deadline:
                try:
                    request.shutdown(socket.SHUT_RDWR)  # the worker's next read ends; it closes the socket
                except OSError:
                    pass

    def server_close(self) -> None:
        super().server_close()
        while True:  # close what still waits, then stop the workers
            try:
                item = self._waiting.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                self.shutdown_request(item[0])
        for _ in self._workers:
            try:
                self._waiting.put_nowait(None)
            except queue.Full:  # pragma: no cover - drained just above
                break


def serve_in_thread(server: BoardServer, name: str, poll_interval: float = 0.5) -> threading.Thread:
    thread = threading.Thread(
        target=server.serve_forever, name=name, kwargs={"poll_interval": poll_interval}, daemon=True
    )
    thread.start()
    return thread
