"""Malformed URLs, wrong passwords and a Redis without Lua: clear errors, tool calls unharmed."""

from __future__ import annotations

import pytest

from otel_breaker.breaker import CircuitBreakerConfig
from otel_breaker.cli import main
from otel_breaker.config import Settings, set_settings
from otel_breaker.registry import BreakerRegistry
from otel_breaker.store import store_from_url
from otel_breaker.store.memory import MemoryStore
from otel_breaker.store.redis import RedisStore, StoreError
from tests.store.conftest import SOCKET_TIMEOUT


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://localhost:notaport/0", "the port must be a number"),
        ("redis://localhost:99999/0", "the port must be a number"),
        ("redis:///0", "no host"),
        ("redis://localhost:6379/zero", "the database must be a number"),
        ("redis://localhost:6379/0?per_agent=maybe", "per_agent='maybe' must be true or false"),
        ("http://localhost:6379", "the scheme must be"),
    ],
)
def test_malformed_urls_are_named(url, message):
    with pytest.raises(StoreError, match=message):
        RedisStore.from_url(url)


def test_password_never_echoed():
    with pytest.raises(StoreError) as info:
        RedisStore.from_url("redis://user:s3cret@localhost:port/0")
    assert "s3cret" not in str(info.value) and "***" in str(info.value)


def test_unusable_store_setting_falls_back_to_memory(caplog):
    with pytest.raises(ValueError):
        store_from_url("redis://localhost:notaport/0")
    registry = BreakerRegistry(settings=Settings(store="redis://localhost:notaport/0"))
    assert isinstance(registry.store, MemoryStore)
    assert "OTEL_BREAKER_STORE unusable" in caplog.text


def test_wrong_password(make_server, capsys):
    server = make_server(["requirepass right-one"])
    url = f"redis://:wrong-one@127.0.0.1:{server.port}/0"
    store = RedisStore.from_url(url, prefix="pw")
    with pytest.raises(StoreError, match="refused the credentials") as info:
        store.check()
    assert "wrong-one" not in str(info.value)
    breaker = store.create("api", CircuitBreakerConfig())
    assert breaker.call(lambda: "ok") == "ok"  # the call still runs, on the local breaker
    assert store.error_count == 1
    store.close()
    assert main(["status", "--store", url]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "refused the credentials" in err
    # the right password from OTEL_BREAKER_REDIS_PASSWORD
    set_settings(Settings(redis_password="right-one"))
    try:
        good = RedisStore.from_url(server.url, prefix="pw", socket_timeout=SOCKET_TIMEOUT)
        good.check()
        assert good.create("api", CircuitBreakerConfig()).call(lambda: "ok") == "ok"
        assert good.error_count == 0
        good.close()
    finally:
        set_settings(None)


def test_missing_password(make_server):
    server = make_server(["requirepass right-one"])
    store = RedisStore.from_url(server.url, prefix="pw", password="")
    with pytest.raises(StoreError, match=r"refused the credentials|OTEL_BREAKER_REDIS_PASSWORD"):
        store.check()
    store.close()


def test_redis_without_lua(make_server, capsys):
    server = make_server(['rename-command EVAL ""', 'rename-command EVALSHA ""'])
    store = RedisStore.from_url(server.url, prefix="nolua")
    with pytest.raises(StoreError, match="does not run Lua scripts"):
        store.check()
    breaker = store.create("api", CircuitBreakerConfig())
    assert breaker.call(lambda: "ok") == "ok"
    assert store.degraded and "does not run Lua scripts" in store.last_error
    store.close()
    assert main(["status", "--store", server.url]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "does not run Lua scripts" in err


def test_unreachable_redis_is_one_line_and_exit_code_2(capsys):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for verb in (["status"], ["reset", "--all"], ["open", "x"], ["close", "x"]):
        assert main([*verb, "--store", f"redis://127.0.0.1:{port}/0"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "cannot reach Redis" in err, err
