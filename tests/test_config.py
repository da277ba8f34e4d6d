"""OTEL_BREAKER_* variables: every one with a good and a bad value."""

from __future__ import annotations

import logging

import pytest

from otel_breaker import CircuitBreakerConfig
from otel_breaker.config import ConfigError, describe_sources, load_settings, parse_fallbacks, parse_tool_overrides

GOOD_AND_BAD = [
    ("OTEL_BREAKER_ENABLED", "true", "maybe", "enabled", True),
    ("OTEL_BREAKER_FAILURE_THRESHOLD", "3", "zero", None, None),
    ("OTEL_BREAKER_RECOVERY_TIMEOUT", "12.5", "-1", None, None),
    ("OTEL_BREAKER_SUCCESS_THRESHOLD", "1", "0", None, None),
    ("OTEL_BREAKER_TIMEOUT", "none", "soon", None, None),
    ("OTEL_BREAKER_MODE", "observe", "block", None, None),
    ("OTEL_BREAKER_SCOPE", "session", "galaxy", "scope", "session"),
    ("OTEL_BREAKER_TOOLS", "web_search=fast_api", "web_search=warp_speed", None, None),
    ("OTEL_BREAKER_FALLBACKS", "web_search=backup_search", "web_search", None, None),
    ("OTEL_BREAKER_CAPTURE_CONTENT", "1", "perhaps", "capture_content", True),
    ("OTEL_BREAKER_DURATION_METRIC", "false", "nah", "duration_metric", False),
    ("OTEL_BREAKER_TOKENS_PER_CALL", "900", "lots", "tokens_per_call", 900),
    ("OTEL_BREAKER_STATUS_IN_PROMPT", "on", "sure", "status_in_prompt", True),
    ("OTEL_BREAKER_MAX_BREAKERS", "50", "-5", "max_breakers", 50),
    ("OTEL_BREAKER_FAILURE_RATE_THRESHOLD", "0.5", "2", None, None),
    ("OTEL_BREAKER_HALF_OPEN_MAX_CALLS", "2", "many", None, None),
    ("OTEL_BREAKER_BACKOFF_MULTIPLIER", "2", "0.5", None, None),
    ("OTEL_BREAKER_HIGH_STAKES", "transfer_money", "bad name!", "high_stakes", ("transfer_money",)),
]


@pytest.mark.parametrize(("var", "good", "bad", "field", "expected"), GOOD_AND_BAD, ids=[g[0] for g in GOOD_AND_BAD])
def test_each_variable_good_and_bad(var, good, bad, field, expected):
    settings = load_settings({var: good})
    assert settings.sources[var] == "env"
    if field:
        assert getattr(settings, field) == expected
    with pytest.raises(ConfigError) as caught:
        load_settings({var: bad})
    message = str(caught.value)
    assert var in message and repr(bad) in message


def test_breaker_options_land_in_the_default_config():
    settings = load_settings(
        {
            "OTEL_BREAKER_FAILURE_THRESHOLD": "3",
            "OTEL_BREAKER_RECOVERY_TIMEOUT": "12.5",
            "OTEL_BREAKER_SUCCESS_THRESHOLD": "1",
            "OTEL_BREAKER_TIMEOUT": "none",
            "OTEL_BREAKER_MODE": "observe",
        }
    )
    config = settings.defaults
    assert (config.failure_threshold, config.recovery_timeout, config.success_threshold) == (3, 12.5, 1)
    assert config.timeout is None and config.mode == "observe"


def test_all_problems_are_reported_together():
    with pytest.raises(ConfigError) as caught:
        load_settings({"OTEL_BREAKER_MODE": "x", "OTEL_BREAKER_SCOPE": "y"})
    assert len(caught.value.problems) == 2


def test_lenient_loading_logs_and_keeps_defaults(caplog):
    with caplog.at_level(logging.WARNING, logger="otel_breaker"):
        settings = load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "many", "OTEL_BREAKER_SCOPE": "x"}, strict=False)
    assert settings.defaults.failure_threshold == 5 and settings.scope == "agent"
    assert "OTEL_BREAKER_FAILURE_THRESHOLD='many'" in caplog.text


def test_tool_overrides_format():
    parsed = parse_tool_overrides("web_search=fast_api;run_code=code_executor,failure_threshold=1")
    assert parsed == {
        "web_search": {"failure_threshold": 3, "recovery_timeout": 30.0},
        "run_code": {"failure_threshold": 1, "recovery_timeout": 60.0},
    }
    settings = load_settings({"OTEL_BREAKER_TOOLS": "run_code=code_executor,failure_threshold=1"})
    assert settings.config_for("run_code").failure_threshold == 1
    assert settings.config_for("other").failure_threshold == 5
    for bad in ("=fast_api", "web search=fast_api", "x=failure_threshold", "x=fast_api,colour=red", "x=timeout=abc"):
        with pytest.raises(ValueError):
            parse_tool_overrides(bad)


def test_fallbacks_format():
    assert parse_fallbacks("web_search=backup_search,bing;fetch=curl") == {
        "web_search": ("backup_search", "bing"),
        "fetch": ("curl",),
    }
    settings = load_settings({"OTEL_BREAKER_FALLBACKS": "web_search=backup_search"})
    assert settings.config_for("web_search").fallbacks == ("backup_search",)


def test_describe_sources_names_every_variable():
    rows = describe_sources(load_settings({"OTEL_BREAKER_MODE": "observe", "OTEL_BREAKER_REDIS_PASSWORD": "s3cret"}))
    by_var = {row[0]: row for row in rows}
    assert by_var["OTEL_BREAKER_MODE"][1:] == ("observe", "env")
    assert by_var["OTEL_BREAKER_FAILURE_THRESHOLD"][2] == "default"
    assert by_var["OTEL_BREAKER_REDIS_PASSWORD"][1] == "***"


def test_the_valid_parts_of_a_list_setting_apply(caplog):
    env = {
        "OTEL_BREAKER_FRAMEWORKS": "langchain,langchian,LangGraph,mcp",
        "OTEL_BREAKER_TOOLS": "search=fast_api;fetch=warp_speed;run_code=timeout=60",
        "OTEL_BREAKER_FALLBACKS": "search=backup;fetch",
        "OTEL_BREAKER_HIGH_STAKES": "deploy,bad name!,pay",
    }
    with caplog.at_level(logging.WARNING, logger="otel_breaker"):
        settings = load_settings(env, strict=False)
    assert settings.frameworks == ("langchain", "mcp")
    assert settings.config_for("search").failure_threshold == 3
    assert settings.config_for("run_code").timeout == 60
    assert "fetch" not in settings.tools
    assert settings.config_for("search").fallbacks == ("backup",)
    assert settings.high_stakes == ("deploy", "pay")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 4  # one line per variable
    (frameworks,) = [line for line in lines if "OTEL_BREAKER_FRAMEWORKS" in line]
    assert "unknown framework 'langchian' (allowed: langchain, openai_agents, pydantic_ai" in frameworks
    assert frameworks.endswith("the valid parts apply")
    with pytest.raises(ConfigError) as caught:
        load_settings(env)
    assert len(caught.value.problems) == 4


def test_a_misspelt_variable_is_a_problem():
    with pytest.raises(ConfigError, match="OTEL_BREAKER_FAILURE_TRESHOLD is not an otel-breaker setting"):
        load_settings({"OTEL_BREAKER_FAILURE_TRESHOLD": "3"})


def test_a_store_that_is_no_url_is_a_problem():
    assert load_settings({"OTEL_BREAKER_STORE": "redis://localhost:6379/0"}).store == "redis://localhost:6379/0"
    with pytest.raises(ConfigError, match="OTEL_BREAKER_STORE='redsi': expected 'memory' or a URL"):
        load_settings({"OTEL_BREAKER_STORE": "redsi"})


def test_no_timeout_unless_asked_for():
    assert load_settings({}).defaults.timeout is None
    assert load_settings({"OTEL_BREAKER_TOOLS": "compile=slow_tool"}).config_for("compile").timeout is None
    settings = load_settings({"OTEL_BREAKER_TIMEOUT": "45", "OTEL_BREAKER_TOOLS": "compile=slow_tool;fetch=timeout=5"})
    assert settings.config_for("compile").timeout == 45  # a preset never clears an explicit timeout
    assert settings.config_for("fetch").timeout == 5
    assert settings.config_for("other").timeout == 45


def test_a_list_with_nothing_valid_falls_back_to_the_default(caplog):
    with caplog.at_level(logging.WARNING, logger="otel_breaker"):
        settings = load_settings({"OTEL_BREAKER_FRAMEWORKS": "langchian"}, strict=False)
    assert settings.frameworks is None  # every installed framework, as when unset
    assert "OTEL_BREAKER_FRAMEWORKS" not in settings.sources
    assert caplog.records[0].getMessage().endswith("using the default")


@pytest.mark.parametrize(
    ("prices", "named"),
    [
        ("gpt=nan:0.00001", "nan"),
        ("gpt=-0.001:0.00001", "-0.001"),
        ("gpt=0.00001:inf", "inf"),
        ("gpt=0.00001:7", "7"),
        ("gpt=cheap:0.1", "cheap"),
    ],
)
def test_prices_are_validated_with_the_other_settings(prices, named):
    with pytest.raises(ConfigError) as error:
        load_settings({"OTEL_BREAKER_PRICES": prices})
    (problem,) = error.value.problems
    assert problem.startswith("OTEL_BREAKER_PRICES=") and named in problem


def test_a_price_file_with_a_negative_price_is_named(tmp_path):
    path = tmp_path / "prices.json"
    path.write_text('{"gpt": {"input": -1, "output": 0.00001}}')
    with pytest.raises(ConfigError, match=r"OTEL_BREAKER_PRICES=.*gpt.*input price -1"):
        load_settings({"OTEL_BREAKER_PRICES": str(path)})
    assert load_settings({"OTEL_BREAKER_PRICES": "gpt=0.000001:0.000002"}, strict=False).prices


def test_bad_prices_fall_back_to_none_with_one_logged_line(caplog):
    with caplog.at_level("WARNING", logger="otel_breaker"):
        settings = load_settings({"OTEL_BREAKER_PRICES": "gpt=nan:1"}, strict=False)
    assert settings.prices is None
    assert caplog.text.count("OTEL_BREAKER_PRICES") == 1


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"OTEL_BREAKER_FAILURE_THRESHOLD": "1" + "0" * 23}, "OTEL_BREAKER_FAILURE_THRESHOLD"),
        ({"OTEL_BREAKER_RECOVERY_TIMEOUT": "1e23"}, "OTEL_BREAKER_RECOVERY_TIMEOUT"),
        ({"OTEL_BREAKER_MAX_BREAKERS": "1" + "0" * 23}, "OTEL_BREAKER_MAX_BREAKERS"),
        ({"OTEL_BREAKER_HEALTH_CHECK_INTERVAL": "0"}, "OTEL_BREAKER_HEALTH_CHECK_INTERVAL"),
        ({"OTEL_BREAKER_BACKOFF_MULTIPLIER": "nan"}, "OTEL_BREAKER_BACKOFF_MULTIPLIER"),
        ({"OTEL_BREAKER_MAX_RECOVERY_TIMEOUT": "0", "OTEL_BREAKER_RECOVERY_TIMEOUT": "30"}, "MAX_RECOVERY_TIMEOUT"),
        ({"OTEL_BREAKER_TOOLS": "search=failure_threshold=" + "9" * 20}, "OTEL_BREAKER_TOOLS"),
        (
            {"OTEL_BREAKER_TOOLS": "search=backoff_multiplier=2,recovery_timeout=900,max_recovery_timeout=10"},
            "max_recovery_timeout",
        ),
    ],
)
def test_absurd_values_are_named_like_every_other_bad_value(env, named):
    with pytest.raises(ConfigError) as error:
        load_settings(env)
    assert any(named in problem for problem in error.value.problems), error.value.problems


def test_absurd_values_in_code_are_rejected_too():
    with pytest.raises(ValueError, match="failure_threshold"):
        CircuitBreakerConfig(failure_threshold=10**23)
    with pytest.raises(ValueError, match="max_recovery_timeout"):
        CircuitBreakerConfig(recovery_timeout=60, max_recovery_timeout=0, backoff_multiplier=2)
    with pytest.raises(ValueError, match="backoff_multiplier"):
        CircuitBreakerConfig(backoff_multiplier=float("nan"))


def test_a_long_run_of_failed_probes_never_overflows_the_cooldown():
    config = CircuitBreakerConfig(recovery_timeout=1, backoff_multiplier=100, max_recovery_timeout=3600)
    assert config.cooldown(10_000) == 3600
