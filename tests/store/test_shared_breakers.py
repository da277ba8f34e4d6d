"""The Redis store against a real redis-server: decisions, round-trips, sharing, scopes."""

from __future__ import annotations

import asyncio
import math

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_breaker import breaker as breaker_module
from otel_breaker.breaker import REJECTED, CircuitBreaker, CircuitBreakerConfig, State
from otel_breaker.classify import FAILURE, IGNORED, SUCCESS
from otel_breaker.config import Settings
from otel_breaker.registry import BreakerRegistry
from otel_breaker.store import store_from_url
from otel_breaker.store.redis import DEFAULT_SOCKET_TIMEOUT, RedisStorage, RedisStore
from otel_breaker.telemetry.events import REASON_SHARED_STORE
from otel_breaker.toolcall import ToolCall
from tests.store.conftest import SOCKET_TIMEOUT, wait_for, wait_watching


def evalsha_calls(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def ok() -> str:
    return "ok"


def boom() -> None:
    raise ConnectionError("down")


def run(breaker: CircuitBreaker, fn) -> object:
    try:
        return breaker.call(fn)
    except ConnectionError as exc:
        return exc


@pytest.fixture
def transitions():
    seen = []
    listener = seen.append
    breaker_module.add_global_listener(listener)
    yield seen
    breaker_module.remove_global_listener(listener)


# -- basic decisions -------------------------------------------------------------------------


def test_opens_after_threshold_and_rejects_without_running_the_tool(make_store, transitions):
    breaker = make_store().create("search", CircuitBreakerConfig(failure_threshold=3, recovery_timeout=30))
    assert isinstance(breaker.storage, RedisStorage)
    for _ in range(3):
        assert isinstance(run(breaker, boom), ConnectionError)
    assert breaker.state is State.OPEN
    assert [(c.from_state, c.to_state, c.reason) for c in transitions] == [
        (State.CLOSED, State.OPEN, "consecutive_failures=3")
    ]
    calls = []
    result = breaker.call(lambda: calls.append(1))
    assert calls == [] and result["circuit_open"] is True
    assert 29 < breaker.retry_after <= 30
    stats = breaker.stats
    assert (stats.failure_count, stats.rejected_requests, stats.consecutive_failures) == (3, 1, 3)


def test_one_round_trip_per_call_when_closed_and_none_while_open(make_store, redis_server):
    client = redis_server.client()
    store = make_store()
    breaker = store.create("fetch", CircuitBreakerConfig(failure_threshold=2, recovery_timeout=60))
    wait_watching(store)
    assert breaker.call(ok) == "ok"  # proves the tool healthy: from now on acquire is local
    before = evalsha_calls(client)
    for _ in range(100):
        assert breaker.call(ok) == "ok"
    assert evalsha_calls(client) - before == 100
    run(breaker, boom)
    run(breaker, boom)
    assert breaker.state is State.OPEN
    before = evalsha_calls(client)
    for _ in range(100):
        assert breaker.call(ok)["circuit_open"] is True
    assert evalsha_calls(client) - before == 0


def test_success_resets_the_streak_across_workers(make_store):
    config = CircuitBreakerConfig(failure_threshold=3)
    a = make_store().create("t", config)
    b = make_store().create("t", config)
    run(a, boom)
    run(b, boom)
    assert b.stats.consecutive_failures == 2
    a.call(ok)
    run(b, boom)
    run(a, boom)
    assert a.state is State.CLOSED and a.stats.consecutive_failures == 2
    run(b, boom)
    assert b.state is State.OPEN


def test_probe_success_closes_and_probe_failure_reopens_with_backoff(make_store, transitions):
    config = CircuitBreakerConfig(
        failure_threshold=1, success_threshold=2, recovery_timeout=10, backoff_multiplier=2, max_recovery_timeout=100
    )
    breaker = make_store().create("probe", config)
    run(breaker, boom)
    assert breaker.state is State.OPEN and 9 < breaker.retry_after <= 10
    breaker.force_open(duration=0)  # cooldown over: the next call probes
    run(breaker, boom)  # the probe fails: open again, cooldown doubled
    assert breaker.state is State.OPEN and 19 < breaker.retry_after <= 20
    breaker.force_open(duration=0)
    assert breaker.call(ok) == "ok"
    assert breaker.state is State.HALF_OPEN
    assert breaker.call(ok) == "ok"
    assert breaker.state is State.CLOSED
    kinds = [(c.from_state.value, c.to_state.value, c.reason) for c in transitions]
    assert kinds == [
        ("closed", "open", "consecutive_failures=1"),
        ("open", "half_open", "cooldown_elapsed"),
        ("half_open", "open", "probe_failed"),
        ("open", "half_open", "cooldown_elapsed"),
        ("half_open", "closed", "probe_succeeded"),
    ]


def test_stale_permit_never_counts_as_a_probe(make_store):
    breaker = make_store(cautious=False).create("stale", CircuitBreakerConfig(failure_threshold=1))
    old = breaker.try_acquire()
    run(breaker, boom)
    breaker.force_open(duration=0)
    probe = breaker.try_acquire()
    assert isinstance(probe, tuple)
    breaker.on_outcome(old, SUCCESS)  # admitted before the breaker opened
    assert breaker.state is State.HALF_OPEN
    breaker.on_outcome(probe, FAILURE)
    assert breaker.state is State.OPEN


def test_failure_rate_window(make_store):
    config = CircuitBreakerConfig(failure_threshold=100, failure_rate_threshold=0.5, minimum_calls=4)
    breaker = make_store().create("rate", config)
    reasons = []
    breaker.on_state_change(lambda change: reasons.append(change.reason))
    for fn in (ok, boom, ok):
        run(breaker, fn)
    assert breaker.state is State.CLOSED
    assert breaker.recent_failure_rate() == pytest.approx(1 / 3)
    run(breaker, boom)
    assert breaker.state is State.OPEN and reasons == ["failure_rate=0.50"]


def test_ignored_outcomes_do_not_move_the_state(make_store):
    breaker = make_store().create("ign", CircuitBreakerConfig(failure_threshold=1))
    permit = breaker.try_acquire()
    breaker.on_outcome(permit, IGNORED)
    assert breaker.state is State.CLOSED and breaker.stats.ignored_count == 1


def test_health_check_moves_open_to_half_open_but_not_a_forced_open(make_store):
    breaker = make_store().create("hc", CircuitBreakerConfig(failure_threshold=1, recovery_timeout=60))
    run(breaker, boom)
    assert breaker.health_check_passed() is True
    assert breaker.state is State.HALF_OPEN
    breaker.force_open()
    assert breaker.retry_after == math.inf
    assert breaker.health_check_passed() is False
    assert breaker.state is State.OPEN
    breaker.reset()
    assert breaker.state is State.CLOSED and breaker.stats.failure_count == 0


def test_cautious_admission_limits_unproven_calls_in_flight(make_store):
    breaker = make_store().create("cold", CircuitBreakerConfig(failure_threshold=3))
    permits = [breaker.try_acquire() for _ in range(5)]
    assert permits[3:] == [REJECTED, REJECTED]
    breaker.on_outcome(permits[0], SUCCESS)  # proven healthy: no more limit
    assert all(breaker.try_acquire() != REJECTED for _ in range(10))


def test_without_cautious_admission_every_closed_call_is_admitted(make_store):
    breaker = make_store(cautious=False).create("free", CircuitBreakerConfig(failure_threshold=3))
    assert REJECTED not in [breaker.try_acquire() for _ in range(10)]


def test_dead_probe_lease_expires_and_another_worker_probes(make_store):
    config = CircuitBreakerConfig(failure_threshold=1, timeout=0.2)
    a = make_store().create("lease", config)
    b = make_store().create("lease", config)
    run(a, boom)
    a.force_open(duration=0)
    assert isinstance(a.try_acquire(), tuple)  # this worker dies holding the probe
    assert b.try_acquire() == REJECTED
    permits = []

    def b_probes() -> bool:
        permits.append(b.try_acquire())
        return isinstance(permits[-1], tuple)

    wait_for(b_probes, what="the dead worker's lease to expire on the server")
    b.on_outcome(permits[-1], SUCCESS)
    b.on_outcome(b.try_acquire(), SUCCESS)
    assert b.state is State.CLOSED


# -- the state machine matches breaker.py -----------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("acquire")),
        st.tuples(st.just("record"), st.integers(0, 5), st.sampled_from([SUCCESS, FAILURE, IGNORED])),
        st.tuples(st.sampled_from(["cooldown_over", "close", "reset", "health", "open"])),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ops=OPS,
    threshold=st.integers(1, 4),
    successes=st.integers(1, 3),
    probes=st.integers(1, 2),
)
def test_same_decisions_as_the_in_memory_state_machine(make_store, ops, threshold, successes, probes):
    config = CircuitBreakerConfig(
        failure_threshold=threshold, success_threshold=successes, half_open_max_calls=probes, recovery_timeout=60
    )
    # a generous timeout: this compares decisions; a busy machine's 50 ms stall would be an outage instead
    store = make_store(cautious=False, watch=False, socket_timeout=2.0)
    shared = store.create("model", config)
    shared.reset()
    local = CircuitBreaker("model", config)
    held: list[tuple] = []
    for op in ops:
        if op[0] == "acquire":
            pair = (shared.try_acquire(), local.try_acquire())
            kinds = [("probe" if isinstance(p, tuple) else "rejected" if p == REJECTED else "closed") for p in pair]
            assert kinds[0] == kinds[1], (op, kinds)
            if kinds[0] != "rejected":
                held.append(pair)
        elif op[0] == "record":
            if held:
                shared_permit, local_permit = held.pop(op[1] % len(held))
                shared.on_outcome(shared_permit, op[2])
                local.on_outcome(local_permit, op[2])
        elif op[0] == "cooldown_over":
            if local.state is State.OPEN and local._open_until != math.inf:
                shared.force_open(duration=0)
                local.force_open(duration=0)
        elif op[0] == "close":
            shared.force_close()
            local.force_close()
        elif op[0] == "reset":
            shared.reset()
            local.reset()
        elif op[0] == "health":
            assert shared.health_check_passed() == local.health_check_passed()
        elif op[0] == "open":
            shared.force_open()
            local.force_open()
        assert shared.state is local.state, op
        assert shared.stats.consecutive_failures == local.stats.consecutive_failures, op
    store.client.delete(*shared.storage.keys)


# -- sharing between workers ------------------------------------------------------------------


def test_other_workers_follow_a_transition_without_reporting_it(make_store, transitions):
    config = CircuitBreakerConfig(failure_threshold=2, recovery_timeout=60)
    a_store, b_store = make_store(), make_store()
    a = a_store.create("shared", config)
    b = b_store.create("shared", config)
    wait_watching(a_store, b_store)
    b_changes = []
    b.on_state_change(b_changes.append)
    run(a, boom)
    run(a, boom)
    wait_for(lambda: b.state is State.OPEN, what="worker b to see the opening")
    assert 59 < b.retry_after <= 60
    assert len(transitions) == 1 and b_changes == []
    before = evalsha_calls(a_store.client)
    assert b.call(ok)["circuit_open"] is True  # rejected locally
    assert evalsha_calls(a_store.client) == before
    a.force_close()
    wait_for(lambda: b.state is State.CLOSED, what="worker b to see the close")


def test_redis_keys_follow_the_registrys_tool_identity(make_store, prefix, redis_server):
    """The shared key is the identity the in-memory registry uses: agent name (agent
    scope), tool name and where the tool runs; never anything process-local."""
    store = make_store()
    agents = BreakerRegistry(store=store, settings=Settings())
    one = agents.breaker_for(ToolCall("tool", agent=object(), agent_name="planner", origin="app.tools:tool"))
    two = agents.breaker_for(ToolCall("tool", agent=object(), agent_name="writer", origin="app.tools:tool"))
    assert one.storage.key == "{" + prefix + ":k:planner/tool/app.tools%3Atool}"
    assert two.storage.key == "{" + prefix + ":k:writer/tool/app.tools%3Atool}"
    # A new agent object of the same name (the next request) finds the same key.
    again = BreakerRegistry(store=store, settings=Settings()).breaker_for(
        ToolCall("tool", agent=object(), agent_name="planner", origin="app.tools:tool")
    )
    assert again.storage.key == one.storage.key
    # Same name, other code: another key.
    other = agents.breaker_for(ToolCall("tool", agent_name="planner", origin="app.other:tool"))
    assert other.storage.key != one.storage.key
    # Process scope: agents share by tool identity.
    shared = BreakerRegistry(store=store, settings=Settings(scope="process"))
    three = shared.breaker_for(ToolCall("tool", agent_name="planner", origin="app.tools:tool"))
    four = shared.breaker_for(ToolCall("tool", agent_name="writer", origin="app.tools:tool"))
    assert three.storage.key == four.storage.key == "{" + prefix + ":k:/tool/app.tools%3Atool}"
    one.try_acquire()
    ttl = store.client.pttl(one.storage.key)
    assert 0 < ttl <= 7 * 86400 * 1000
    # The key reads back as the identity it was made from (for `otel-breaker status`).
    rows = {row["key"]: row for row in store.snapshot()}
    assert rows[one.storage.key]["where"] == "app.tools:tool" and rows[one.storage.key]["agent"] == "planner"


def test_session_scope_keys_live_under_the_prefix_and_expire(make_store, prefix):
    store = make_store()
    registry = BreakerRegistry(store=store, settings=Settings(scope="session"))
    with registry.session("sess-1"):
        breaker = registry.breaker_for(ToolCall("lookup"))
        assert breaker.call(ok) == "ok"
    assert breaker.storage.key == "{" + prefix + ":s:sess-1:k:/lookup/}"
    assert 0 < store.client.pttl(breaker.storage.key) <= 3600 * 1000
    other = registry.breaker_for(ToolCall("lookup"))
    assert other.storage.key == "{" + prefix + ":k:/lookup/}"


def test_registry_picks_the_store_from_settings(redis_server, prefix):
    from otel_breaker.config import set_settings

    settings_ = Settings(store=redis_server.url, redis_prefix=prefix)
    set_settings(settings_)  # OTEL_BREAKER_STORE / OTEL_BREAKER_REDIS_PREFIX, as the environment would set them
    registry = BreakerRegistry(settings=settings_)
    try:
        assert isinstance(registry.store, RedisStore)
        assert registry.store.prefix == prefix
        breaker = registry.get("via_env")
        assert isinstance(breaker.storage, RedisStorage) and breaker.call(ok) == "ok"
        assert registry.store.error_count == 0 and registry.store.name == "redis"
    finally:
        set_settings(None)
        registry.store.close()


def test_a_registrys_own_settings_choose_the_prefix(redis_server, prefix):
    registry = BreakerRegistry(settings=Settings(store=redis_server.url, redis_prefix=prefix + "-own"))
    try:
        assert registry.store.prefix == prefix + "-own"  # not the process-wide settings' prefix
    finally:
        registry.store.close()


def test_script_is_loaded_again_after_noscript(make_store):
    store = make_store()
    breaker = store.create("flush", CircuitBreakerConfig())
    assert breaker.call(ok) == "ok"
    store.client.script_flush()
    run(breaker, boom)
    assert breaker.stats.consecutive_failures == 1 and store.error_count == 0


def test_keys_share_one_cluster_slot(make_store):
    from redis.crc import key_slot

    breaker = make_store().create("slot", CircuitBreakerConfig())
    slots = {key_slot(k.encode()) for k in breaker.storage.keys}
    assert len(slots) == 1


# -- asyncio client -----------------------------------------------------------------------------


def test_asyncio_client(redis_server, prefix):
    import redis.asyncio

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(redis_server.url, socket_timeout=SOCKET_TIMEOUT)
        store = RedisStore(client, prefix=prefix)
        try:
            breaker = store.create("async_tool", CircuitBreakerConfig(failure_threshold=2))

            async def tool() -> str:
                return "done"

            assert await breaker.acall(tool) == "done"
            permit = await breaker.atry_acquire()
            await breaker.aon_outcome(permit, FAILURE)
            permit = await breaker.atry_acquire()
            await breaker.aon_outcome(permit, FAILURE)
            assert breaker.state is State.OPEN
            assert await breaker.atry_acquire() == REJECTED
            assert store.error_count == 0
        finally:
            store.close()
            await client.aclose()

    asyncio.run(main())


def test_store_from_url_builds_a_redis_store(redis_server, prefix):
    store = store_from_url(redis_server.url)
    try:
        assert isinstance(store, RedisStore)
        # the default a worker gets, read without asking the server anything (a busy machine can
        # take longer than 50 ms to answer: that is the store's business, not this test's)
        assert store._clients.socket_timeout == DEFAULT_SOCKET_TIMEOUT == 0.05
    finally:
        store.close()


def test_forked_worker_follows_changes_again(make_store):
    """Pre-fork servers (gunicorn --preload) create the store before forking workers."""
    import os

    store = make_store()
    breaker = store.create("forked", CircuitBreakerConfig(failure_threshold=1))
    wait_watching(store)
    assert breaker.call(ok) == "ok"
    pid = os.fork()
    if pid == 0:  # the child: its feed thread must be new, and it must see another worker's change
        code = 1
        try:
            wait_watching(store)
            other = RedisStore(store.client, prefix=store.prefix, watch=False)
            other.create("forked", CircuitBreakerConfig()).force_open()
            wait_for(lambda: breaker.state is State.OPEN, what="the child to follow the change")
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_acall_goes_through_the_asyncio_client_without_blocking_calls(redis_server, prefix):
    import redis.asyncio

    class CountingStore(RedisStore):
        blocking = 0

        def run_script(self, *args, **kwargs):
            CountingStore.blocking += 1
            return super().run_script(*args, **kwargs)

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(redis_server.url, socket_timeout=SOCKET_TIMEOUT)
        store = CountingStore(client, prefix=prefix)
        try:
            breaker = store.create("async_guarded", CircuitBreakerConfig(failure_threshold=2))

            async def fail() -> None:
                raise ConnectionError("down")

            for _ in range(2):
                with pytest.raises(ConnectionError):
                    await breaker.acall(fail)
            assert breaker.state is State.OPEN
            assert (await breaker.acall(fail))["circuit_open"] is True
            assert CountingStore.blocking == 0
            assert store.error_count == 0
        finally:
            store.close()
            await client.aclose()

    asyncio.run(main())


def test_a_change_missed_while_the_feed_was_down_is_read_from_redis(make_store, redis_server):
    config = CircuitBreakerConfig(failure_threshold=2, recovery_timeout=60)
    a_store, b_store = make_store(), make_store()
    a = a_store.create("gap", config)
    b = b_store.create("gap", config)
    wait_watching(a_store, b_store)
    a.force_open()  # until closed: b rejects locally while it watches the feed
    wait_for(lambda: b.state is State.OPEN, what="worker b to see the opening")
    with redis_server.client() as admin:
        admin.client_kill_filter(_type="pubsub")  # every change feed drops its subscription
    wait_for(lambda: not b_store.watching, what="worker b's feed to notice")
    a.force_close()  # published while b hears nothing
    wait_watching(b_store)
    assert b.call(ok) == "ok"  # b asked Redis once instead of trusting what it saw before the gap
    assert b.state is State.CLOSED


def test_a_followed_change_is_a_log_event_in_the_following_worker(make_store, otel):
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

    from otel_breaker import semconv, telemetry

    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    telemetry.configure(logger_provider=provider)
    config = CircuitBreakerConfig(failure_threshold=1, recovery_timeout=60)
    a_store, b_store = make_store(), make_store()
    a = a_store.create("followed", config)
    b = b_store.create("followed", config, agent_name="worker-b")
    wait_watching(a_store, b_store)

    def followed_events():
        return [
            data.log_record.attributes
            for data in exporter.get_finished_logs()
            if data.log_record.event_name == semconv.EVENT_STATE_CHANGE
            and data.log_record.attributes.get(semconv.ATTR_REASON) == REASON_SHARED_STORE
        ]

    run(a, boom)
    wait_for(lambda: followed_events(), what="worker b to log the opening it followed")
    (opened,) = followed_events()
    assert opened[semconv.ATTR_TO_STATE] == "open" and opened[semconv.ATTR_FROM_STATE] == "closed"
    assert b.state is State.OPEN
    a.force_close()  # as the command line does
    wait_for(lambda: len(followed_events()) == 2, what="worker b to log the close it followed")
    assert followed_events()[1][semconv.ATTR_TO_STATE] == "closed"
    provider.shutdown()


def test_a_health_check_after_the_cooldown_moves_nothing_read_or_not(make_store):
    config = CircuitBreakerConfig(failure_threshold=1, recovery_timeout=60)
    store = make_store(cautious=False, watch=False, socket_timeout=2.0)
    shared = store.create("health_after_cooldown", config)
    local = CircuitBreaker("health_after_cooldown", config)
    for breaker in (shared, local):
        breaker.force_open(duration=0)
    local.state  # noqa: B018 - a dashboard read applies the elapsed cooldown on one side only
    assert (shared.health_check_passed(), local.health_check_passed()) == (False, False)
    assert shared.state is local.state is State.HALF_OPEN


def test_a_change_heard_before_its_own_reply_is_not_a_followed_change(make_store, otel):
    """A store's own change can reach its change feed before the script's reply is
    applied: it is mirrored, but never logged as another worker's change. The same
    message from another store is."""
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

    from otel_breaker import semconv, telemetry

    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    telemetry.configure(logger_provider=provider)
    store = make_store(watch=False)
    breaker = store.create("own_echo", CircuitBreakerConfig(failure_threshold=1, recovery_timeout=60))
    assert run(breaker, ok) == "ok"
    key, ver = breaker.storage.key, breaker.shared_version

    def followed() -> int:
        return sum(
            1
            for data in exporter.get_finished_logs()
            if data.log_record.event_name == semconv.EVENT_STATE_CHANGE
            and data.log_record.attributes.get(semconv.ATTR_REASON) == REASON_SHARED_STORE
        )

    store._feed._apply(f"{ver + 1}|7|1|60000|1|0:{store.origin}|{key}")  # our own opening, heard early
    assert breaker.state is State.OPEN and followed() == 0
    store._feed._apply(f"{ver + 2}|8|0|0|0|1:{'0' * 12}|{key}")  # another worker closed it
    assert breaker.state is State.CLOSED and followed() == 1
    provider.shutdown()


def test_a_state_change_read_in_a_reply_drops_cached_rejections_naming_it(make_store, redis_server, prefix):
    """Another worker (another process) opened a fallback, and this worker learns it
    from its own script reply (no change feed): rejections that offered the fallback
    are built afresh, as when the feed tells it."""
    import subprocess
    import sys

    from otel_breaker.registry import default_registry

    registry = default_registry()
    previous = registry.store
    registry.use_store(make_store(watch=False))
    try:
        config = CircuitBreakerConfig(failure_threshold=1, recovery_timeout=60)
        primary = registry.get(
            "primary", CircuitBreakerConfig(failure_threshold=1, recovery_timeout=60, fallbacks=("backup",))
        )
        backup = registry.get("backup", config)
        assert run(backup, ok) == "ok"
        run(primary, boom)
        assert primary.call(ok)["alternatives"] == ["backup"]  # cached from here on
        other_worker = (
            "from otel_breaker.store.redis import RedisStore\n"
            f"store = RedisStore.from_url({redis_server.url!r}, prefix={prefix!r}, watch=False, socket_timeout=5.0)\n"
            "from otel_breaker.breaker import CircuitBreakerConfig\n"
            "store.create('backup', CircuitBreakerConfig()).force_open(60)\n"
            "store.close()\n"
        )
        subprocess.run([sys.executable, "-c", other_worker], check=True, timeout=60)
        assert backup.state is State.CLOSED  # nothing heard yet
        assert backup.call(ok)["circuit_open"] is True  # the reply says open
        assert backup.state is State.OPEN
        assert primary.call(ok)["alternatives"] == []
    finally:
        registry.use_store(previous)


def test_redis_keys_are_bounded_and_escaped_for_any_name(make_store, prefix):
    store = make_store()
    registry = BreakerRegistry(store=store, settings=Settings())
    long_a, long_b = "a" * 5000 + "x", "a" * 5000 + "y"
    one = registry.breaker_for(ToolCall(long_a, agent_name="{evil}/agent:%", origin="m:f"))
    two = registry.breaker_for(ToolCall(long_b, agent_name="{evil}/agent:%", origin="m:f"))
    assert one.storage.key != two.storage.key  # cut, but still apart
    assert all(len(b.storage.key) < 600 for b in (one, two))
    assert one.storage.key.count("{") == 1 and one.storage.key.count("}") == 1  # one hash tag
    assert one.call(ok) == "ok" and two.call(ok) == "ok"


def test_a_slow_call_rate_one_worker_sees_opens_the_tool_for_every_worker(make_store, transitions):
    """Slow calls are judged by the worker that made them; the opening is shared, with its reason."""
    config = CircuitBreakerConfig(slow_call_seconds=1.0, slow_call_rate=0.5, minimum_calls=2, recovery_timeout=60)
    slow_worker = make_store().create("render", config)
    other_worker = make_store().create("render", config)
    slow_worker.record_duration(0.2)
    assert slow_worker.state is State.CLOSED
    slow_worker.record_duration(5.0)  # 1 of 2 slow: the rate is reached
    assert slow_worker.state is State.OPEN and 59 < slow_worker.retry_after <= 60
    calls = []
    assert other_worker.call(lambda: calls.append(1))["circuit_open"] is True and calls == []
    moves = [(c.from_state.value, c.to_state.value, c.reason) for c in transitions]
    assert ("closed", "open", "slow_call_rate") in moves


def test_a_retry_hint_one_worker_reads_opens_the_tool_for_every_worker_for_that_long(make_store, transitions):
    config = CircuitBreakerConfig(failure_threshold=5, max_recovery_timeout=300)
    reader = make_store().create("quota", config)
    other_worker = make_store().create("quota", config)
    assert reader.open_for(120) == 120
    assert other_worker.call(ok)["circuit_open"] is True and 119 < other_worker.retry_after <= 120
    moves = [(c.from_state.value, c.to_state.value, c.reason) for c in transitions]
    assert ("closed", "open", "retry_after") in moves
