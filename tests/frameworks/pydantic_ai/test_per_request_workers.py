"""Two worker processes of a PydanticAI service, each building a new agent per
request, share their breakers through a real Redis: a dead tool reaches its
backend at most ``failure_threshold`` (+ in-flight) times across both, and a
different function that shares the dead tool's name (and agent name) is never
rejected, in memory or in Redis."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time
import uuid

import pytest

redis = pytest.importorskip("redis")

WORKER = pathlib.Path(__file__).with_name("per_request_worker.py")
REQUESTS, CALLS, THRESHOLD, WORKERS = 5, 3, 2, 2
UNAVAILABLE = "is temporarily unavailable"


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (.ci/run installs Debian's redis-server)")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    directory = tmp_path_factory.mktemp("redis")
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", directory],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 10
    while True:  # bounded wait for a real server to accept connections
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                process.kill()
                raise
            time.sleep(0.05)
    yield url
    process.terminate()
    process.wait(timeout=10)


def run_workers(redis_url: str, store: str | None) -> tuple[list[dict], int]:
    key = f"reached:{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "COUNTER_URL": redis_url,
        "COUNTER_KEY": key,
        "OTEL_BREAKER_ENABLED": "true",
        "OTEL_BREAKER_FAILURE_THRESHOLD": str(THRESHOLD),
        "OTEL_BREAKER_RECOVERY_TIMEOUT": "600",
        "OTEL_SDK_DISABLED": "true",
        "OTEL_BREAKER_REDIS_PREFIX": f"t{uuid.uuid4().hex[:8]}",
    }
    if store is not None:
        env["OTEL_BREAKER_STORE"] = store
    processes = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(REQUESTS), str(CALLS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(WORKERS)
    ]
    results = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results, int(redis.Redis.from_url(redis_url).get(key) or 0)


def test_workers_with_per_request_agents_share_breakers_through_redis(redis_url):
    results, reached = run_workers(redis_url, redis_url)
    # Each worker may have one call in flight when the other opens the shared breaker.
    assert reached <= THRESHOLD + (WORKERS - 1), f"the dead backend was reached {reached} times"
    for result in results:
        assert all(UNAVAILABLE in text for request in result["dead"][2:] for text in request)
        # The other fetch_weather of the same agent name: different code, its own breaker.
        assert all(text == "sunny in Oslo" for request in result["healthy"] for text in request)


def test_each_worker_alone_remembers_across_requests_in_memory(redis_url):
    results, reached = run_workers(redis_url, None)
    assert reached == THRESHOLD * WORKERS  # per process, but across that process's requests
    for result in results:
        assert all(text == "sunny in Oslo" for request in result["healthy"] for text in request)
