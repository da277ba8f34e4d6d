"""A Redis ACL user limited to the breakers' keys and channel shares breakers; one refused
anything they need is told so in one line, naming the command, at the store's first connection,
by ``check`` and by ``otel-breaker doctor``."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from otel_breaker.breaker import REJECTED, CircuitBreakerConfig, State
from otel_breaker.store.redis import RedisStore, StoreError
from tests.store.conftest import SOCKET_TIMEOUT, wait_for, wait_watching

PREFIX = "acl"
PASSWORD = "acl-secret"
#: Every command the store, its change feed and the command line run (docs/redis.md lists the same).
MINIMAL = (
    "+ping +info +evalsha +script|load +subscribe +time +hmget +hget +hset +hincrby +hdel +pexpire "
    "+zadd +zcard +zremrangebyscore +zrem +del +get +set +publish +scan +hgetall"
)


@pytest.fixture
def server(make_server):
    """A server of this test's own, with no channel given to new users (Redis 7's default, set explicitly)."""
    return make_server(["acl-pubsub-default resetchannels"])


def _user(server, name: str, rules: str) -> str:
    """Create ``name`` with ``rules``; returns the store URL that logs in as it."""
    with server.client() as admin:
        admin.execute_command("ACL", "SETUSER", name, "reset", "on", f">{PASSWORD}", *rules.split())
    return f"redis://{name}:{PASSWORD}@127.0.0.1:{server.port}/0"


def _store(url: str) -> RedisStore:
    return RedisStore.from_url(url, prefix=PREFIX, socket_timeout=SOCKET_TIMEOUT, rejoin_interval=0.2)


def _open_and_follow(url: str) -> None:
    """Two workers as this user: one opens a breaker, the other follows without asking Redis."""
    first, second = _store(url), _store(url)
    try:
        config = CircuitBreakerConfig(failure_threshold=1, recovery_timeout=600)
        mine, theirs = first.create("web_search", config), second.create("web_search", config)
        wait_watching(first, second)
        assert theirs.call(lambda: "ok") == "ok"
        with pytest.raises(ConnectionError):
            mine.call(_dead)
        wait_for(lambda: theirs.state is State.OPEN, what="the other worker to follow the opening")
        assert theirs.try_acquire() == REJECTED
        assert first.error_count == second.error_count == 0, (first.last_error, second.last_error)
    finally:
        first.close()
        second.close()


def _dead() -> None:
    raise ConnectionError("backend down")


def test_a_user_given_the_keys_and_the_channel_pattern_shares_breakers(server):
    url = _user(server, "breakers", "~{acl:* &{acl:* +@all")
    _store(url).check()
    _open_and_follow(url)


def test_the_minimal_set_of_commands_is_enough(server):
    url = _user(server, "minimal", f"~{{acl:* &{{acl:* {MINIMAL}")
    _store(url).check()
    _open_and_follow(url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_BREAKER_STORE=url, OTEL_BREAKER_REDIS_PREFIX=PREFIX)
    status = subprocess.run(
        [sys.executable, "-m", "otel_breaker", "status"], capture_output=True, text=True, env=env, timeout=60
    )
    assert status.returncode == 0, status.stderr
    assert "web_search" in status.stdout and "open" in status.stdout


def test_a_user_limited_to_the_keys_alone_is_told_the_channel_is_missing(server, caplog):
    url = _user(server, "keys_only", "~{acl:* +@all")
    store = _store(url)
    try:
        with pytest.raises(StoreError) as info:
            store.check()
        line = str(info.value)
        assert "\n" not in line
        assert "keys_only" in line and "PUBLISH {acl:events}" in line and PASSWORD not in line
        assert "ACL SETUSER keys_only ~{acl:* &{acl:* +@all" in line
        # at the first connection of a working store: one warning, the same line; calls still run
        caplog.set_level(logging.WARNING, logger="otel_breaker")
        breaker = store.create("web_search", CircuitBreakerConfig(failure_threshold=1))
        assert breaker.call(lambda: "ok") == "ok"
        assert store.degraded and "PUBLISH {acl:events}" in (store.last_error or "")
        (refused,) = [r.getMessage() for r in caplog.records if "may not run" in r.getMessage()]
        assert "PUBLISH {acl:events}" in refused and "SUBSCRIBE {acl:events}" in refused, refused
    finally:
        store.close()


def test_a_refused_command_is_named(server):
    url = _user(server, "no_zadd", "~{acl:* &{acl:* +@all -zadd")
    with pytest.raises(StoreError, match=r"may not run ZADD \{acl:check\}:leases \(") as info:
        _store(url).check()
    assert "\n" not in str(info.value)


def test_a_user_refused_the_script_itself_is_told_which_command(server):
    url = _user(server, "no_scripts", "~{acl:* &{acl:* +@all -evalsha -eval")
    with pytest.raises(StoreError, match="may not run EVALSHA"):
        _store(url).check()


def test_doctor_names_the_missing_permission_in_one_line(server):
    url = _user(server, "keys_only", "~{acl:* +@all")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_BREAKER_STORE=url, OTEL_BREAKER_REDIS_PREFIX=PREFIX)
    result = subprocess.run(
        [sys.executable, "-m", "otel_breaker", "doctor"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 1, result.stdout
    lines = [line for line in result.stdout.splitlines() if "may not run" in line]
    assert len(lines) == 1, result.stdout
    assert "PUBLISH {acl:events}" in lines[0] and "ACL SETUSER keys_only" in lines[0]
    assert PASSWORD not in result.stdout


def test_the_minimal_set_reports_rejections_and_latency(server):
    """The workers' reports (for the fleet board) need nothing beyond the documented set."""
    url = _user(server, "reporter", f"~{{acl:* &{{acl:* {MINIMAL}")
    store = RedisStore.from_url(url, prefix=PREFIX, socket_timeout=SOCKET_TIMEOUT, report_interval=3600.0)
    try:
        breaker = store.create("inventory", CircuitBreakerConfig())
        assert breaker.call(lambda: "ok") == "ok"
        breaker.force_open(None)
        for _ in range(3):
            assert breaker.try_acquire() == REJECTED
        assert store.report(), store._reporter.failures
        (row,) = store.snapshot()
        assert row["rejected"] == 3 and row["latency_p50_ms"] is not None
        assert store.error_count == 0, store.last_error
    finally:
        store.close()
