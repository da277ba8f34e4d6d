"""One worker process of the multi-process store tests.

``python worker.py SCENARIO JSON-ARGS`` prints one JSON line of results.
Scenarios:

* ``storm``: an agent loop that calls a dead tool ``attempts`` times through the
  guarded call path (every call that reaches the tool increments a counter);
  with ``tools``, each attempt calls every one of those dead tools (counted per
  tool in the hash ``reached_key:tools``);
* ``race``: ``threads`` threads acquire the same breaker at once and hold
  their permits; reports how many probes were handed out;
* ``report``: calls the open tool ``open_tool`` ``rejects`` times (each one rejected)
  and the healthy tool ``tool`` once per entry of ``durations``, each call taking
  exactly that many seconds of the breakers' clock (a fake one, moved by the tool);
  the store reports both as it closes.
"""

from __future__ import annotations

import json
import sys
import threading
import time

import redis

from otel_breaker import breaker as breaker_module
from otel_breaker.breaker import REJECTED, CircuitBreakerConfig
from otel_breaker.guards import Guard
from otel_breaker.registry import BreakerRegistry
from otel_breaker.store.memory import MemoryStore
from otel_breaker.store.redis import RedisStore
from otel_breaker.toolcall import ToolCall


def _wait_for_go(control: redis.Redis, key: str) -> None:
    deadline = time.monotonic() + 30
    while not control.exists(key):
        if time.monotonic() > deadline:
            raise SystemExit("no go signal")
        time.sleep(0.001)


def main() -> None:
    scenario, raw = sys.argv[1], sys.argv[2]
    opts = json.loads(raw)
    offset = float(opts.get("clock_offset", 0.0))
    if offset:
        # This host's clocks are off by ``offset`` seconds: wall clock and the breaker's clock.
        real_time, real_monotonic = time.time, time.monotonic
        time.time = lambda: real_time() + offset
        clock = lambda: real_monotonic() + offset  # noqa: E731
    elif opts.get("fake_clock"):
        now = [1000.0]  # moved only by the tool: every duration is exact

        def clock() -> float:
            return now[0]
    else:
        clock = None
    control = redis.Redis.from_url(opts["control_url"])
    transitions: list[tuple[str, str]] = []
    breaker_module.add_global_listener(
        lambda change: transitions.append((change.from_state.value, change.to_state.value))
    )
    config = CircuitBreakerConfig(
        failure_threshold=opts.get("failure_threshold", 5),
        half_open_max_calls=opts.get("half_open_max_calls", 1),
        recovery_timeout=opts.get("recovery_timeout", 60.0),
        timeout=opts.get("timeout", 30.0),
    )
    if opts["store"] == "memory":
        store = MemoryStore()
    else:
        store = RedisStore.from_url(
            opts["store"], prefix=opts["prefix"], socket_timeout=opts.get("socket_timeout", 5.0)
        )
    registry = BreakerRegistry(store=store, clock=clock)
    tools = opts.get("tools") or [opts.get("tool", "web_search")]
    breakers = [registry.get(tool, config) for tool in tools]
    breaker = breakers[0]
    if isinstance(store, RedisStore):
        deadline = time.monotonic() + 10
        while not store.watching and time.monotonic() < deadline:
            time.sleep(0.001)
    result: dict = {}
    control.incr(opts["ready_key"])
    _wait_for_go(control, opts["go_key"])

    if scenario == "storm":
        guard = Guard(registry)
        delay = opts.get("tool_delay", 0.0)

        def dead_tool(name: str) -> None:
            control.incr(opts["reached_key"])
            control.hincrby(opts["reached_key"] + ":tools", name, 1)
            if delay:
                time.sleep(delay)  # the dead service times out instead of refusing at once
            raise ConnectionError("connection refused")

        reached = rejected = 0
        for _attempt in range(opts.get("attempts", 3)):
            for tool in tools:
                try:
                    value = guard.call(ToolCall(tool), dead_tool, (tool,))
                except ConnectionError:
                    reached += 1
                    continue
                if isinstance(value, dict) and value.get("error"):
                    rejected += 1
        result = {"reached": reached, "rejected": rejected}
    elif scenario == "race":
        threads = opts.get("threads", 50)
        barrier = threading.Barrier(threads)
        permits: list = []
        lock = threading.Lock()

        def hit() -> None:
            barrier.wait()
            permit = breaker.try_acquire()
            with lock:
                permits.append(permit)

        workers = [threading.Thread(target=hit) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        result = {
            "probes": sum(isinstance(p, tuple) for p in permits),
            "rejected": sum(p == REJECTED for p in permits),
            "admitted_closed": sum(not isinstance(p, tuple) and p != REJECTED for p in permits),
        }
    elif scenario == "report":
        guard = Guard(registry)

        def tool(seconds: float) -> str:
            now[0] += seconds
            return "ok"

        rejected = 0
        for _ in range(opts["rejects"]):
            value = guard.call(ToolCall(opts["open_tool"]), tool, (0.0,))
            if isinstance(value, dict) and value.get("error"):
                rejected += 1
        for seconds in opts["durations"]:
            guard.call(ToolCall(opts["tool"]), tool, (seconds,))
        result = {"rejected": rejected, "calls": len(opts["durations"])}
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    result["transitions"] = transitions
    result["errors"] = getattr(store, "error_count", 0)
    print(json.dumps(result), flush=True)
    store.close()


if __name__ == "__main__":
    main()
