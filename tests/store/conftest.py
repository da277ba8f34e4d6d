"""A real redis-server for the shared-store tests, started on a random loopback port."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

#: Socket timeout of the tests' Redis clients. A worker's default is 50 ms, which a busy CI machine
#: (load average 12-20 on 2 cores) exceeds: the store would then decide locally for a reason no
#: test is about. Tests of timeouts and outages pass their own.
SOCKET_TIMEOUT = 5.0

REDIS_SERVER = shutil.which("redis-server") or (
    "/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None
)

pytest.importorskip("redis", reason="the redis client is not installed (pip install 'otel-breaker[redis]')")
import redis  # noqa: E402

from otel_breaker.store.redis import RedisStore  # noqa: E402


def _free_port(cluster: bool = False) -> int:
    """A free loopback port; for a Cluster node, one whose bus port (port + 10000) is free and valid too."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if not cluster:
            return port
        if port + 10000 > 65535:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


class RedisServer:
    """One redis-server process: start, stop (SIGTERM), pause (SIGSTOP), start again on the same port."""

    def __init__(self, workdir: Path, config_lines: list[str] | None = None, sentinel: bool = False) -> None:
        self.workdir = workdir
        self.sentinel = sentinel
        self.port = _free_port(cluster=any(line.startswith("cluster-enabled") for line in config_lines or []))
        self.config_lines = config_lines or []
        self.password: str | None = None
        for line in self.config_lines:
            if line.startswith("requirepass "):
                self.password = line.split(" ", 1)[1].strip('"')
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        config = self.workdir / "redis.conf"
        lines = [
            f"port {self.port}",
            "bind 127.0.0.1",
            'save ""',
            "appendonly no",
            f"dir {self.workdir}",
            "protected-mode no",
            *self.config_lines,
        ]
        if self.sentinel:
            lines = [line for line in lines if not line.startswith(("save ", "appendonly "))]
        config.write_text("\n".join(lines) + "\n")
        self.process = subprocess.Popen(
            [REDIS_SERVER, str(config), *(["--sentinel"] if self.sentinel else [])],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
        )
        client = redis.Redis(
            port=self.port, password=self.password, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT
        )
        deadline = time.monotonic() + 30
        while True:  # bounded polling for a real server to accept connections
            try:
                client.ping()
                break
            except (redis.ConnectionError, redis.TimeoutError):
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start on port {self.port}") from None
                time.sleep(0.02)
            finally:
                client.close()

    def kill(self) -> None:
        """The machine dies: SIGKILL, no goodbye to clients or to the cluster."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            self.process.wait(timeout=10)
        self.process = None

    def pause(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, password=self.password)


def _require_binary() -> None:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (.ci/run installs Debian's redis-server)")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """One server for the whole session; tests separate themselves by key prefix."""
    _require_binary()
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def make_server(tmp_path):
    """Servers of the test's own (to stop, restart or configure differently)."""
    _require_binary()
    servers: list[RedisServer] = []

    def make(config_lines: list[str] | None = None, start: bool = True) -> RedisServer:
        directory = tmp_path / f"redis{len(servers)}"
        directory.mkdir()
        server = RedisServer(directory, config_lines)
        servers.append(server)
        if start:
            server.start()
        return server

    yield make
    for server in servers:
        server.stop()


def _require_cli() -> None:
    _require_binary()
    if shutil.which("redis-cli") is None:
        pytest.skip("redis-cli is not installed (.ci/run installs Debian's redis-tools)")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """One 3-primary Redis Cluster (no replicas, no password) for the whole session."""
    _require_cli()
    from tests.store.deployments import Cluster

    deployment = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        deployment.start()
        yield deployment
    finally:
        deployment.stop()


@pytest.fixture
def make_cluster(tmp_path):
    """Clusters of the test's own (to kill nodes of)."""
    _require_cli()
    from tests.store.deployments import Cluster

    made = []

    def make(**options):
        directory = tmp_path / f"cluster{len(made)}"
        directory.mkdir()
        deployment = Cluster(directory, **options)
        made.append(deployment)
        deployment.start()
        return deployment

    yield make
    for deployment in made:
        deployment.stop()


@pytest.fixture
def make_sentinel(tmp_path):
    """A primary, a replica and a Sentinel of the test's own."""
    _require_binary()
    from tests.store.deployments import SentinelSet

    made = []

    def make(**options):
        directory = tmp_path / f"sentinel{len(made)}"
        directory.mkdir()
        deployment = SentinelSet(directory, **options)
        made.append(deployment)
        deployment.start()
        return deployment

    yield make
    for deployment in made:
        deployment.stop()


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def make_store(redis_server, prefix):
    """Stores on the session server under this test's prefix; closed at the end."""
    stores: list[RedisStore] = []

    def make(url: str | None = None, **options) -> RedisStore:
        options.setdefault("prefix", prefix)
        options.setdefault("socket_timeout", SOCKET_TIMEOUT)
        store = RedisStore.from_url(url or redis_server.url, **options)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


def wait_for(predicate, timeout: float = 30.0, what: str = "condition") -> None:
    """Bounded polling for something a real server or another worker does."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def wait_watching(*stores: RedisStore) -> None:
    for store in stores:
        wait_for(lambda store=store: store.watching, what="the change feed to subscribe")
