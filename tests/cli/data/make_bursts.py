"""Regenerate ``bursts.jsonl``, the ``otel-breaker tune`` fixture with a known answer.

``flaky_search`` is called every 2 s. It fails in bursts of 20 calls (40 s);
between bursts come healthy stretches of 60 calls holding a few isolated
failures (single ones and one pair). The best breaker therefore needs a
failure threshold of 3 (2 would open on the pair) and a cooldown of about the
burst's length (40 s among the default candidates). ``steady_lookup`` is
called every 5 s and fails alone now and then: no candidate should change it.

Run: ``python tests/cli/data/make_bursts.py > tests/cli/data/bursts.jsonl``
"""

import json

START = 1_750_000_000.0


def flaky() -> list[dict]:
    records = []
    ts = START
    for _cycle in range(6):
        for index in range(60):
            ok = index not in (14, 15, 37, 52)  # a pair of failures and two single ones
            records.append({"tool": "flaky_search", "ts": ts, "ok": ok})
            ts += 2.0
        for _ in range(20):
            records.append({"tool": "flaky_search", "ts": ts, "ok": False})
            ts += 2.0
    for _ in range(30):
        records.append({"tool": "flaky_search", "ts": ts, "ok": True})
        ts += 2.0
    return records


def steady() -> list[dict]:
    return [{"tool": "steady_lookup", "ts": START + 1 + 5.0 * i, "ok": i % 23 != 11} for i in range(200)]


for record in sorted(flaky() + steady(), key=lambda r: r["ts"]):
    print(json.dumps(record))
