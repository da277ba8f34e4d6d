"""The status endpoint cannot hurt the agent, and only loopback clients reach it.

Bounded work per request (one snapshot per second whatever the polling, compact
pages), the Host check against DNS rebinding, idle timeouts, and handler threads
that only ever take whole requests, over real sockets.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

import pytest

from otel_breaker import CircuitBreakerConfig
from otel_breaker.board.server import host_allowed
from otel_breaker.registry import BreakerRegistry
from otel_breaker.status_server import StatusServer


def boom():
    raise ConnectionError("down")


@pytest.fixture
def registry(clock):
    registry = BreakerRegistry(clock=clock)
    for index in range(30):
        registry.get(f"tool_{index:02d}").call(lambda: 1)
    broken = registry.get("search", CircuitBreakerConfig(failure_threshold=1, recovery_timeout=30))
    with pytest.raises(ConnectionError):
        broken.call(boom)
    return registry


@pytest.fixture
def server(registry):
    running = StatusServer("127.0.0.1", 0, registry=registry, idle_timeout=0.5)
    yield running
    running.close()


def request(server: StatusServer, path: str, host: str | None = None) -> tuple[int, bytes, dict[str, str]]:
    port = int(server.url.rsplit(":", 1)[1])
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {} if host is None else {"Host": host}
    connection.request("GET", path, headers=headers)  # a Host header given replaces the default one
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return response.status, body, dict(response.getheaders())


# -- cost -------------------------------------------------------------------------------------------


def test_many_polls_read_the_breakers_once_a_second(server):
    before = server.board.snapshots
    for _ in range(50):
        assert request(server, "/status")[0] == 200
        assert request(server, "/board.json")[0] == 200
    assert server.board.snapshots - before == 1  # 100 requests within the cache's second: one snapshot


def test_answers_are_compact_and_paged(server):
    code, body, _ = request(server, "/status?limit=10")
    document = json.loads(body)
    assert code == 200 and b"\n" not in body and b", " not in body
    assert document["total"] == 31 and len(document["breakers"]) == 10 and document["next_offset"] == 10
    rest = json.loads(request(server, "/status?limit=10&offset=30")[1])
    assert len(rest["breakers"]) == 1 and "next_offset" not in rest
    assert json.loads(request(server, "/status?limit=100000")[1])["breakers"].__len__() == 31  # clamped, not refused


def test_filters_by_tool_state_and_agent(server):
    only_open = json.loads(request(server, "/status?state=open")[1])
    assert [row["tool"] for row in only_open["breakers"]] == ["search"]
    assert json.loads(request(server, "/status?tool=tool_03")[1])["total"] == 1
    assert json.loads(request(server, "/status?agent=nobody")[1])["total"] == 0
    code, body, _ = request(server, "/status?state=exploded")
    assert code == 400 and "state must be one of" in json.loads(body)["error"]
    assert request(server, "/status?limit=x")[0] == 400


def test_a_change_shows_within_the_cache_second(server, registry, clock):
    request(server, "/status")
    registry.get("tool_00").force_open()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        rows = json.loads(request(server, "/status?tool=tool_00")[1])["breakers"]
        if rows[0]["state"] == "open":
            break
        time.sleep(0.1)
    else:
        pytest.fail("a forced open did not show within 5 s")


# -- Host header --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    ["evil.example", "evil.example:80", "attacker.localhost.evil.example", "10.0.0.1", "localhost:x", "[::1]x", ""],
)
def test_foreign_host_headers_are_refused(server, host):
    for path in ("/status", "/", "/board.json"):
        code, body, _ = request(server, path, host=host)
        assert code == 403, (path, host)
        assert b"breakers" not in body


@pytest.mark.parametrize("host", ["localhost", "LOCALHOST:9464", "127.0.0.1", "127.0.0.1:9464", "127.1.2.3", "[::1]:9"])
def test_loopback_host_headers_are_served(server, host):
    assert request(server, "/status", host=host)[0] == 200


def test_the_configured_address_is_allowed():
    assert host_allowed("192.168.1.7:9464", "192.168.1.7")
    assert not host_allowed("192.168.1.8:9464", "192.168.1.7")
    assert host_allowed("192.168.1.8:9464", "0.0.0.0")  # every interface (opted in): any address literal...
    assert not host_allowed("rebind.example:9464", "0.0.0.0")  # ...but never a name
    assert host_allowed(None, "127.0.0.1")  # HTTP/1.0 without Host is not a browser


# -- slow clients -----------------------------------------------------------------------------------


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_an_idle_connection_is_closed(server):
    port = int(server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as idle:
        assert _closed_within(idle, 5.0)
    with socket.create_connection(("127.0.0.1", port)) as slow:
        slow.sendall(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finishes its headers
        assert _closed_within(slow, 5.0)


def test_the_default_idle_timeout_is_within_30_seconds():
    from otel_breaker.board.server import IDLE_TIMEOUT

    assert 0 < IDLE_TIMEOUT <= 30


def test_idle_clients_grow_no_threads(registry):
    running = StatusServer("127.0.0.1", 0, registry=registry, idle_timeout=5.0)
    port = int(running.url.rsplit(":", 1)[1])
    before = threading.active_count()
    sockets = []
    try:
        for _ in range(300):
            sockets.append(socket.create_connection(("127.0.0.1", port)))
        assert request(running, "/status")[0] == 200  # answered while 300 wait...
        assert running.threads <= 1  # ...by one thread: idle connections hold none
        assert threading.active_count() - before <= 1
    finally:
        for sock in sockets:
            sock.close()
        running.close()


#: Long enough that a request stuck behind idle connections would plainly wait for it.
LONG_IDLE_TIMEOUT = 20.0


@pytest.mark.parametrize("idle", [2, 20, 200])
def test_half_requests_never_delay_a_whole_one(registry, idle):
    """Connections that sent part of a request (or nothing) hold no handler thread: a
    whole request is answered at once. Before, it waited for the idle timeout."""
    running = StatusServer("127.0.0.1", 0, registry=registry, idle_timeout=LONG_IDLE_TIMEOUT)
    port = int(running.url.rsplit(":", 1)[1])
    sockets = []
    try:
        for index in range(idle):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            if index % 2 == 0:
                sock.sendall(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never ends its head
            sockets.append(sock)
        started = time.monotonic()
        code, body, _ = request(running, "/status?tool=search")
        took = time.monotonic() - started
        print(f"\n{idle} half-open connections: GET /status answered in {took * 1000:.1f} ms")
        assert code == 200 and json.loads(body)["breakers"][0]["state"] == "open"
        assert took < LONG_IDLE_TIMEOUT / 10  # well before the idle timeout the old pool waited for
        assert running.threads <= 2  # the half-open connections hold none
    finally:
        for sock in sockets:
            sock.close()
        running.close()


def test_past_the_waiting_room_the_longest_waiting_connection_is_closed(registry):
    from otel_breaker.board.model import Board
    from otel_breaker.board.server import BoardServer, serve_in_thread
    from otel_breaker.status_server import ProcessSource

    server = BoardServer(
        ("127.0.0.1", 0), Board(ProcessSource(registry)), idle_timeout=30.0, max_workers=2, max_waiting=3
    )
    thread = serve_in_thread(server, "test-board")
    port = server.server_address[1]
    sockets = []
    try:
        for _ in range(4):
            sockets.append(socket.create_connection(("127.0.0.1", port)))
            deadline = time.monotonic() + 10  # each accepted before the next, so "longest" is defined
            while server.waiting + server.refused < len(sockets) and time.monotonic() < deadline:
                time.sleep(0.01)
        assert _closed_within(sockets[0], 5.0)  # the first made room for the fourth
        assert server.refused == 1 and server.waiting == 3
        sockets[-1].sendall(b"GET /status HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        sockets[-1].settimeout(10)
        assert sockets[-1].recv(64).startswith(b"HTTP/1.0 200")
        assert server.threads == 1
    finally:
        for sock in sockets:
            sock.close()
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_client_that_trickles_bytes_is_cut_off_at_the_deadline(registry):
    from otel_breaker.board.model import Board
    from otel_breaker.board.server import BoardServer, serve_in_thread
    from otel_breaker.status_server import ProcessSource

    server = BoardServer(("127.0.0.1", 0), Board(ProcessSource(registry)), idle_timeout=1.0, request_deadline=1.5)
    thread = serve_in_thread(server, "test-board", poll_interval=0.1)
    try:
        with socket.create_connection(("127.0.0.1", server.server_address[1])) as slow:
            slow.sendall(b"GET /status HTTP/1.1\r\n")
            started = time.monotonic()
            cut = False
            while time.monotonic() - started < 10:
                try:
                    slow.sendall(b"X-Slow: 1\r\n")  # a header line every 0.2 s: never idle for 1 s
                except OSError:
                    cut = True
                    break
                if _closed_within(slow, 0.2):
                    cut = True
                    break
            assert cut and time.monotonic() - started < 5
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
