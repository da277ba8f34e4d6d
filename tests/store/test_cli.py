"""``otel-breaker status | reset | open | close`` against a real Redis."""

from __future__ import annotations

import json

import pytest

from otel_breaker.breaker import REJECTED, CircuitBreakerConfig, State
from otel_breaker.cli import main
from tests.store.conftest import wait_for, wait_watching


def boom() -> None:
    raise ConnectionError("down")


@pytest.fixture
def cli(redis_server, prefix, capsys):
    def run(*argv: str) -> tuple[int, str, str]:
        code = main([*argv, "--store", redis_server.url, "--prefix", prefix])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_status_table_and_json(make_store, cli):
    store = make_store()
    search = store.create("search", CircuitBreakerConfig(failure_threshold=2, recovery_timeout=30))
    for _ in range(2):
        with pytest.raises(ConnectionError):
            search.call(boom)
    store.create("fetch", CircuitBreakerConfig(), session_id="s-1").call(lambda: "ok")
    code, out, _ = cli("status")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["TOOL", "SCOPE", "STATE", "FAILURES", "RETRY-AFTER", "LAST", "CHANGE"]
    assert lines[1].startswith("fetch") and "session s-1" in lines[1] and "closed" in lines[1]
    assert lines[2].startswith("search") and " open " in lines[2] and "2 in a row" in lines[2]
    code, out, _ = cli("status", "--json")
    rows = {row["tool"]: row for row in json.loads(out)["breakers"]}
    assert rows["search"]["state"] == "open" and 29 < rows["search"]["retry_after_s"] <= 30
    assert rows["search"]["consecutive_failures"] == 2 and rows["search"]["last_change_ms"] > 0
    assert rows["fetch"]["session"] == "s-1" and rows["fetch"]["retry_after_s"] is None


def test_status_of_an_empty_store(cli):
    code, out, _ = cli("status")
    assert code == 0 and "no breakers" in out


def test_open_and_close_reach_running_workers(make_store, cli):
    store = make_store()
    worker = store.create("deploy", CircuitBreakerConfig())
    wait_watching(store)
    assert worker.call(lambda: "ok") == "ok"
    code, out, _ = cli("open", "deploy")
    assert code == 0 and "opened 1 breaker" in out
    wait_for(lambda: worker.state is State.OPEN, what="the worker to follow the manual open")
    assert worker.try_acquire() == REJECTED
    code, out, _ = cli("status", "--json")
    assert json.loads(out)["breakers"][0]["forced_open"] is True
    assert cli("close", "deploy")[0] == 0
    wait_for(lambda: worker.state is State.CLOSED, what="the worker to follow the manual close")
    assert worker.call(lambda: "ok") == "ok"


def test_open_for_a_duration_then_probes(cli, make_store):
    assert cli("open", "later", "--for", "0", "--create")[0] == 0
    breaker = make_store().create("later", CircuitBreakerConfig())
    assert isinstance(breaker.try_acquire(), tuple)


def test_reset_one_tool_or_all(make_store, cli):
    store = make_store()
    for name in ("a", "b"):
        breaker = store.create(name, CircuitBreakerConfig(failure_threshold=1))
        with pytest.raises(ConnectionError):
            breaker.call(boom)
    code, out, _ = cli("reset", "a")
    assert code == 0 and "reset 1 breaker of tool 'a'" in out
    states = {row["tool"]: row["state"] for row in json.loads(cli("status", "--json")[1])["breakers"]}
    assert states == {"a": "closed", "b": "open"}
    assert cli("reset", "--all")[0] == 0
    states = {row["tool"]: row["state"] for row in json.loads(cli("status", "--json")[1])["breakers"]}
    assert states == {"a": "closed", "b": "closed"}


def test_usage_errors(cli):
    code, _, err = cli("reset")
    assert code == 2 and "name a TOOL or pass --all" in err
    code, _, err = cli("reset", "nothing-here")
    assert code == 2 and "no breaker for tool 'nothing-here'" in err


@pytest.mark.parametrize("verb", ["reset", "open", "close"])
def test_an_unknown_tool_gets_the_same_answer_from_every_verb(make_store, cli, verb):
    make_store().create("known", CircuitBreakerConfig()).call(lambda: "ok")
    code, out, err = cli(verb, "nosuch_tool")
    assert code == 2 and out == ""
    assert "no breaker for tool 'nosuch_tool'" in err
    tools = [row["tool"] for row in json.loads(cli("status", "--json")[1])["breakers"]]
    assert tools == ["known"], "an unknown name made a phantom breaker"


def test_store_from_environment(redis_server, prefix, capsys, monkeypatch):
    monkeypatch.setenv("OTEL_BREAKER_STORE", redis_server.url)
    monkeypatch.setenv("OTEL_BREAKER_REDIS_PREFIX", prefix)
    assert main(["open", "env_tool", "--create"]) == 0
    assert main(["status", "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out.split("\n", 1)[1])["breakers"][0]["tool"] == "env_tool"


def test_no_store_configured(capsys, monkeypatch):
    monkeypatch.delenv("OTEL_BREAKER_STORE", raising=False)
    assert main(["status"]) == 2
    err = capsys.readouterr().err
    assert "no shared store" in err
    assert "--url http://127.0.0.1:PORT" in err and "OTEL_BREAKER_STATUS_ADDR" in err  # the per-process way
    assert len(err.strip().splitlines()) == 1


def test_status_prints_hostile_tool_names_without_escape_sequences(make_store, cli):
    store = make_store()
    hostile = "evil\x1b[2J\x1b]0;pwned\x07\r\nTOOL forged-row" + "x" * 5000
    store.create(hostile, CircuitBreakerConfig(), agent_name="agent\x1b[31m").call(lambda: "ok")
    code, out, _ = cli("status")
    assert code == 0
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out
    lines = out.splitlines()
    assert len(lines) == 2  # the name cannot forge a row
    assert max(len(cell) for cell in lines[1].split("  ") if cell) <= 256
