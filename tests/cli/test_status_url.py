"""``otel-breaker status --url``: the form of OTEL_BREAKER_STATUS_ADDR, and the variable itself."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from cli_helpers import assert_one_line_error, clean_env, run_cli

from otel_breaker import get_circuit_breaker
from otel_breaker.registry import default_registry
from otel_breaker.status_server import StatusServer


@pytest.fixture
def endpoint() -> Iterator[str]:
    """A real status endpoint of this process with one open breaker; yields its HOST:PORT."""
    default_registry().clear()
    get_circuit_breaker("web_search").force_open()
    server = StatusServer("127.0.0.1", 0)
    try:
        yield server.url.removeprefix("http://").rstrip("/")
    finally:
        server.close()
        default_registry().clear()


def _tools(stdout: str) -> list[tuple[str, str]]:
    return [(row["tool"], row["state"]) for row in json.loads(stdout)["breakers"]]


def test_url_in_the_form_of_the_variable(endpoint):
    result = run_cli("status", "--url", endpoint, "--json")
    assert result.returncode == 0, result.stderr
    assert _tools(result.stdout) == [("web_search", "open")]


def test_the_variable_is_the_default_of_url(endpoint):
    result = run_cli("status", "--json", env=clean_env(OTEL_BREAKER_STATUS_ADDR=endpoint))
    assert result.returncode == 0, result.stderr
    assert _tools(result.stdout) == [("web_search", "open")]
    table = run_cli("status", env=clean_env(OTEL_BREAKER_STATUS_ADDR=endpoint))
    assert "web_search" in table.stdout and "open" in table.stdout


def test_an_address_on_every_interface_is_asked_on_the_loopback(endpoint):
    port = endpoint.rpartition(":")[2]
    result = run_cli("status", "--json", env=clean_env(OTEL_BREAKER_STATUS_ADDR=f"0.0.0.0:{port}"))
    assert result.returncode == 0, result.stderr
    assert _tools(result.stdout) == [("web_search", "open")]


def test_a_named_store_wins_over_the_variable(endpoint):
    """``--store`` names the fleet: the process's variable does not redirect it."""
    result = run_cli("status", "--store", "ftp://nowhere", env=clean_env(OTEL_BREAKER_STATUS_ADDR=endpoint), timeout=60)
    assert_one_line_error(result, "invalid Redis URL")


def test_a_url_that_is_neither_form_is_one_line():
    assert_one_line_error(run_cli("status", "--url", "ftp://x"), "expected http://HOST:PORT or HOST:PORT")
    assert_one_line_error(run_cli("status", "--url", "somewhere"), "expected http://HOST:PORT or HOST:PORT")
