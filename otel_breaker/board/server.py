"""The HTTP side of the status endpoint and of the fleet board, shared by both.

It must never hurt the program it runs in, whoever connects:

* one loop accepts connections and reads them without blocking; a handler
  thread (at most ``max_workers``, started as needed) takes a connection only
  once its whole request has arrived, so idle or slow clients never hold a
  thread and a whole request is answered at once however many of them wait;
* at most ``max_waiting`` connections may still be sending; past that the
  one waiting longest is closed, so idle clients cannot grow memory or keep
  a new request out;
* every connection has an idle timeout (no byte for that long closes it) and
  a deadline (a client that trickles a byte at a time is cut off too);
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
import io
import ipaddress
import json
import logging
import queue
import re
import selectors
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
#: Connections still sending their request, at most; past that the one waiting longest is closed.
MAX_WAITING = 256
#: A request's head and body together, at most (http.server's own line limit is 64 KiB).
MAX_REQUEST_BYTES = 16384
_CHUNK_BYTES = 8192
_ACCEPTS_PER_ROUND = 64
#: How often the loop looks for connections past their idle timeout or deadline.
_SWEEP_SECONDS = 0.1
_WAKE = object()
_CONTENT_LENGTH = re.compile(rb"(?im)^content-length:[ \t]*(\d{1,9})[ \t]*\r?$")

#: The fields a control request may name besides the tool, to act on one breaker of it.
IDENTITY_FIELDS = ("agent", "session", "where")
#: ``control(op, tool, duration, identity) -> count``: ``identity`` holds the fields of
#: :data:`IDENTITY_FIELDS` the request named (None: the breaker has none), and only the
#: breakers of ``tool`` that match all of them are changed; raises LookupError when none is.
Control = Callable[[str, "str | None", "float | None", "dict[str, str | None]"], int]


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
        self.timeout = self.server.idle_timeout  # read by StreamRequestHandler.setup: the answer's writes
        super().setup()
        self.rfile.close()  # the socket's reader is not needed (and would keep the socket open)
        # The server's loop has read the whole request already: the handler never waits on the client.
        self.rfile = io.BytesIO(self.server.received(self.request))

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
            op, tool, duration, identity = control_request(request)
        except ValueError as exc:
            self._send(400, {"error": str(exc)[:200]})
            return
        try:
            count = self.server.control(op, tool, duration, identity)
        except LookupError as exc:
            self._send(404, {"error": str(exc)[:300]})
            return
        except Exception as exc:
            logger.debug("otel-breaker: control failed", exc_info=True)
            self._send(503, {"error": f"control failed: {type(exc).__name__}"})
            return
        self._send(200, {"op": op, "tool": tool, "count": count})


def control_request(request: Any) -> tuple[str, str | None, float | None, dict[str, str | None]]:
    """Validate a ``POST /control`` body: (op, tool or None for all, duration, identity).

    ``agent``, ``session`` and ``where``, when present (a name, or null for none),
    narrow the request to the breakers of the tool with exactly that identity: the
    board acts on the one breaker an operator confirmed, never on every agent's."""
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
    identity: dict[str, str | None] = {}
    for name in IDENTITY_FIELDS:
        if name in request:
            value = request[name]
            if value is not None and (not isinstance(value, str) or len(value) > 1024):
                raise ValueError(f"{name} must be a name of at most 1024 characters or null")
            identity[name] = value or None
    if identity and tool is None:
        raise ValueError(f"{', '.join(identity)} narrow a tool: name the tool too")
    return op, tool, None if duration is None else float(duration), identity


def matches(identity: dict[str, str | None], fields: dict[str, Any]) -> bool:
    """Whether a breaker's ``fields`` (agent, session, where) are those ``identity`` names."""
    return all((fields.get(name) or None) == value for name, value in identity.items())


class _Arrival:
    """A connection whose request is still coming in: the bytes so far, when it was
    accepted and when it last sent something."""

    __slots__ = ("accepted", "address", "data", "heard", "sock")

    def __init__(self, sock: socket.socket, address: Any, now: float) -> None:
        self.sock = sock
        self.address = address
        self.data = bytearray()
        self.accepted = now
        self.heard = now


def request_complete(data: bytes | bytearray) -> bool:
    """Whether ``data`` holds a whole request: its head, and the body its
    ``Content-Length`` announces when that is within :data:`MAX_BODY_BYTES` (a longer
    one is the handler's to refuse, so it need not be waited for)."""
    end = data.find(b"\r\n\r\n")
    gap = 4
    if end < 0:
        end = data.find(b"\n\n")
        gap = 2
    if end < 0:
        return False
    found = _CONTENT_LENGTH.search(bytes(data[:end]))
    if found is None:
        return True
    length = int(found.group(1))
    return length > MAX_BODY_BYTES or len(data) >= end + gap + length


class BoardServer(socketserver.TCPServer):
    """A TCP server that answers only whole requests, so idle clients cannot starve it.

    One loop (``serve_forever``) accepts connections and reads them without
    blocking until a request's head (and its small body) has arrived; only then
    does a handler thread take it, and answers it from bytes already read. A
    connection that sends nothing for ``idle_timeout`` seconds, or no whole
    request within ``request_deadline``, is closed by the loop; when
    ``max_waiting`` connections are still sending, the one waiting longest is
    closed to make room. Idle and slow clients therefore never hold a thread, and
    a request that arrives whole is answered at once however many of them wait.
    """

    allow_reuse_address = True
    request_queue_size = 128

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
        # Everything server_close needs first: a bind that fails closes the server inside __init__.
        self._arrivals: dict[socket.socket, _Arrival] = {}  # insertion order: who waits longest first
        self._received: dict[socket.socket, bytes] = {}
        self._serving: dict[socket.socket, float] = {}  # connection -> when a worker took it
        self._ready: queue.SimpleQueue[tuple[socket.socket, Any] | None] = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._pending = 0  # whole requests handed over and not yet taken by a worker
        self._busy = 0  # workers answering a request
        self._pool_lock = threading.Lock()
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_reader.setblocking(False)
        super().__init__(address, _Handler)
        self.socket.setblocking(False)
        self.board = board
        self.token = token
        self.control = control
        self.bind_host = address[0]
        self.idle_timeout = idle_timeout
        self.request_deadline = request_deadline
        self.max_workers = max_workers
        self.max_waiting = max_waiting
        #: Connections closed unanswered to make room (the one waiting longest each time).
        self.refused = 0

    @property
    def threads(self) -> int:
        """Handler threads started so far (never more than ``max_workers``)."""
        return len(self._workers)

    @property
    def waiting(self) -> int:
        """Connections still sending their request."""
        return len(self._arrivals)

    # -- the loop: accept, receive, sweep ------------------------------------------------------------

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Accept and receive until :meth:`shutdown`; whole requests go to the workers."""
        self._stop.clear()
        self._stopped.clear()
        selector = selectors.DefaultSelector()
        try:
            selector.register(self.socket, selectors.EVENT_READ, None)
            selector.register(self._wake_reader, selectors.EVENT_READ, _WAKE)
            while not self._stop.is_set():
                for key, _ in selector.select(min(poll_interval, _SWEEP_SECONDS)):
                    if key.data is None:
                        self._accept(selector)
                    elif key.data is _WAKE:
                        self._drain_wake()
                    else:
                        self._receive(selector, key.data)
                self._sweep(selector)
                self.service_actions()
        finally:
            for arrival in list(self._arrivals.values()):
                self._drop(selector, arrival)
            selector.close()
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop ``serve_forever`` (from another thread) and wait until it has."""
        self._stop.set()
        try:
            self._wake_writer.send(b"x")
        except OSError:
            pass
        self._stopped.wait()

    def _drain_wake(self) -> None:
        try:
            while self._wake_reader.recv(64):
                pass
        except OSError:
            pass

    def _accept(self, selector: selectors.BaseSelector) -> None:
        for _ in range(_ACCEPTS_PER_ROUND):
            try:
                sock, address = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of descriptors, or the listener closed: try again next round
                logger.debug("otel-breaker: status endpoint accept failed", exc_info=True)
                return
            sock.setblocking(False)
            if len(self._arrivals) >= self.max_waiting:
                self.refused += 1
                self._drop(selector, next(iter(self._arrivals.values())))
            arrival = _Arrival(sock, address, time.monotonic())
            self._arrivals[sock] = arrival
            selector.register(sock, selectors.EVENT_READ, arrival)

    def _receive(self, selector: selectors.BaseSelector, arrival: _Arrival) -> None:
        try:
            chunk = arrival.sock.recv(_CHUNK_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:  # the client left
            self._drop(selector, arrival)
            return
        arrival.data += chunk
        arrival.heard = time.monotonic()
        if not request_complete(arrival.data):
            if len(arrival.data) > MAX_REQUEST_BYTES:
                self._drop(selector, arrival)
            return
        selector.unregister(arrival.sock)
        del self._arrivals[arrival.sock]
        self._hand_over(arrival.sock, arrival.address, bytes(arrival.data))

    def _sweep(self, selector: selectors.BaseSelector) -> None:
        """Close connections idle past ``idle_timeout`` or still sending past ``request_deadline``."""
        now = time.monotonic()
        for arrival in list(self._arrivals.values()):
            if now - arrival.heard > self.idle_timeout or now - arrival.accepted > self.request_deadline:
                self._drop(selector, arrival)

    def _drop(self, selector: selectors.BaseSelector, arrival: _Arrival) -> None:
        self._arrivals.pop(arrival.sock, None)
        try:
            selector.unregister(arrival.sock)
        except (KeyError, ValueError):
            pass
        self.shutdown_request(arrival.sock)

    # -- the workers ---------------------------------------------------------------------------------

    def _hand_over(self, sock: socket.socket, address: Any, data: bytes) -> None:
        """Give a whole request to a worker, starting one when none is free."""
        with self._pool_lock:
            if self._pending >= self.max_waiting:  # every worker busy and a full queue: no answer
                self.refused += 1
                self.shutdown_request(sock)
                return
            self._pending += 1
            if self._pending > len(self._workers) - self._busy and len(self._workers) < self.max_workers:
                worker = threading.Thread(target=self._work, name="otel-breaker-status-worker", daemon=True)
                self._workers.append(worker)
                worker.start()
        sock.setblocking(True)
        sock.settimeout(self.idle_timeout)  # the answer's writes: a client that stops reading
        self._received[sock] = data
        self._ready.put((sock, address))

    def received(self, sock: socket.socket) -> bytes:
        """The request the loop read for ``sock`` (the handler reads it from memory)."""
        return self._received.pop(sock, b"")

    def _work(self) -> None:
        while True:
            item = self._ready.get()
            if item is None:
                return
            with self._pool_lock:
                self._pending -= 1
                self._busy += 1
            sock, address = item
            self._serving[sock] = time.monotonic()
            try:
                self.finish_request(sock, address)
            except Exception:
                logger.debug("otel-breaker: status request failed", exc_info=True)
            finally:
                self._serving.pop(sock, None)
                self._received.pop(sock, None)
                self.shutdown_request(sock)
                with self._pool_lock:
                    self._busy -= 1

    def service_actions(self) -> None:
        """Each round of the loop: cut off answers still being written past the deadline."""
        now = time.monotonic()
        for sock, taken in list(self._serving.items()):
            if now - taken > self.request_deadline:
                try:
                    sock.shutdown(socket.SHUT_RDWR)  # the worker's next write ends; it closes the socket
                except OSError:
                    pass

    def server_close(self) -> None:
        super().server_close()
        for arrival in list(self._arrivals.values()):  # when the loop never ran or already stopped
            self._arrivals.pop(arrival.sock, None)
            self.shutdown_request(arrival.sock)
        for end in (self._wake_reader, self._wake_writer):
            end.close()
        for _ in self._workers:
            self._ready.put(None)


def serve_in_thread(server: BoardServer, name: str, poll_interval: float = 0.5) -> threading.Thread:
    thread = threading.Thread(
        target=server.serve_forever, name=name, kwargs={"poll_interval": poll_interval}, daemon=True
    )
    thread.start()
    return thread
