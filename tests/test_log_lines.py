"""Every log line otel-breaker writes is bounded and free of control characters.

A configuration value is the user's text: a 10k-character value pasted by mistake,
or one carrying terminal escapes, must come back as one short, clean line (what is
wrong, and a bounded piece of the value), never echoed whole.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest

from otel_breaker.config import KNOWN_VARIABLES, load_settings
from otel_breaker.sanitize import MAX_LOG_CHARS, log_line

LONG = 10_000
#: What a process does after start-up with each setting: reads the configuration, starts
#: the status endpoint, builds the store, makes a guarded call (telemetry reads prices).
DRIVER = textwrap.dedent(
    """
    import logging, sys
    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format="%(message)s")
    from otel_breaker import guard, status_server, telemetry
    from otel_breaker.config import get_settings
    from otel_breaker.instrumentation.autostart import autostart
    from opentelemetry.sdk.metrics import MeterProvider
    autostart()
    status_server.start_from_settings()
    telemetry.configure(meter_provider=MeterProvider())
    guard("probe_tool")(lambda: 1)()
    get_settings().config_for("probe_tool")
    """
)

#: A bad value of 10,000 characters with terminal escapes, newlines and other controls in it.
HOSTILE = ("\x1b[2J\x1b]0;title\x07bad\nvalue\r\t\x7f\x9b=;," * (LONG // 30 + 1))[:LONG]


def _values() -> list[str]:
    return [
        HOSTILE,  # one long word, escapes and controls in it
        ("tool=" + "y" * 400 + ";") * (LONG // 406),  # many long entries, each bad
    ]


def _run(var: str, value: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update({"OTEL_BREAKER_ENABLED": "true", "OTEL_SDK_DISABLED": "true", var: value})
    done = subprocess.run(
        [sys.executable, "-c", DRIVER], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stderr.splitlines()


def _bad_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if len(line) > MAX_LOG_CHARS or line != log_line(line)]


def test_every_variable_with_a_ten_thousand_character_value_logs_bounded_clean_lines():
    cases = [(var, value) for var in sorted(KNOWN_VARIABLES) for value in _values()]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda case: _run(*case), cases))
    longest = max(len(line) for lines in results for line in lines)
    print(f"longest log line over {len(cases)} runs: {longest} characters")
    offenders = {}
    for (var, _), lines in zip(cases, results, strict=True):
        bad = _bad_lines(lines)
        if bad:
            offenders.setdefault(var, []).extend(line[:120] for line in bad)
    assert not offenders, offenders
    assert longest <= MAX_LOG_CHARS


@pytest.mark.parametrize("var", sorted(KNOWN_VARIABLES))
def test_a_bad_value_is_still_named_in_one_line(var, caplog):
    with caplog.at_level(logging.WARNING, logger="otel_breaker"):
        load_settings({var: HOSTILE}, strict=False)
    for record in caplog.records:
        message = record.getMessage()
        assert len(message) <= MAX_LOG_CHARS and message == log_line(message)
        assert var in message


@pytest.mark.parametrize("digits", ["١٢", "１２", "१२"])
@pytest.mark.parametrize("var", ["OTEL_BREAKER_FAILURE_THRESHOLD", "OTEL_BREAKER_RECOVERY_TIMEOUT"])
def test_digits_of_other_scripts_are_not_read_as_numbers(var, digits, caplog):
    with caplog.at_level(logging.WARNING, logger="otel_breaker"):
        settings = load_settings({var: digits}, strict=False)
    assert settings.sources.get(var) != "env"
    assert any("ASCII" in record.getMessage() for record in caplog.records)


def test_the_log_filter_bounds_lines_that_bypass_the_configuration(caplog):
    """Any record of the ``otel_breaker`` logger: a long argument is cut, controls go."""
    logger = logging.getLogger("otel_breaker")
    with caplog.at_level(logging.WARNING, logger="otel_breaker"):
        logger.warning("otel-breaker: %s", HOSTILE)
    (record,) = caplog.records
    message = record.getMessage()
    assert len(message) <= MAX_LOG_CHARS
    assert message == log_line(message)
    assert message.startswith("otel-breaker: ")


#: A state listener that fails with a long message full of escape sequences, in a fresh
#: interpreter that imports ``logging`` and ``otel_breaker.breaker`` in the order asked.
#: Prints each record of the root logger's handler as its handler wrote it.
FAILING_LISTENER = textwrap.dedent(
    """
    import json, sys

    if sys.argv[1] == "package-first":
        import otel_breaker.breaker as breaker_module
        import logging
    else:
        import logging
        import otel_breaker.breaker as breaker_module


    class Kept(logging.Handler):
        def __init__(self):
            super().__init__()
            self.lines = []

        def emit(self, record):
            self.lines.append(self.format(record))


    kept = Kept()
    logging.getLogger().addHandler(kept)
    breaker = breaker_module.CircuitBreaker("listened_tool")


    def failing(change):
        raise RuntimeError("\\x1b[31mred\\x1b[0m " + "very long reason " * 400)


    breaker.on_state_change(failing)
    breaker.force_open()
    print(json.dumps(kept.lines))
    """
)


@pytest.mark.parametrize("order", ["logging-first", "package-first"])
def test_a_failing_listener_logs_one_bounded_clean_record_whatever_the_import_order(order):
    done = subprocess.run(
        [sys.executable, "-c", FAILING_LISTENER, order], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (record,) = json.loads(done.stdout)
    assert record.startswith("otel-breaker: state listener")
    assert len(record) <= 1_100, len(record)
    assert "\x1b" not in record
