"""``otel-breaker tune``: replaying recorded outcomes finds the answer the recording was built to have.

``data/bursts.jsonl`` (see ``data/make_bursts.py``): ``flaky_search`` is called every 2 s and
fails in 6 bursts of 20 calls (40 s), with healthy stretches holding a pair of failures and
two single ones. Threshold 3 is the lowest that ignores the pair; a 40 s cooldown lets the
first probe land just after a burst ends. ``steady_lookup`` only ever fails alone.
"""

from __future__ import annotations

import json

import pytest
from cli_helpers import DATA, assert_one_line_error, run_cli

from otel_breaker.config import parse_tool_overrides

BURSTS = str(DATA / "bursts.jsonl")


def test_tune_recommends_the_known_answer():
    result = run_cli("tune", BURSTS)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith(f"Replayed 710 tool calls of 2 tools from {BURSTS} (JSONL)")
    assert "flaky_search  (510 calls, 144 failed)" in out
    assert "recommended: failure_threshold=3, recovery_timeout=40s (avoids 102 failed calls, wrongly rejects 12)" in out
    steady = out.split("steady_lookup")[1]
    assert "recommended: keep the current settings" in steady
    paste = out.strip().splitlines()[-1]
    assert paste == "OTEL_BREAKER_TOOLS='flaky_search=failure_threshold=3,recovery_timeout=40'"
    assert parse_tool_overrides(paste.split("=", 1)[1].strip("'")) == {
        "flaky_search": {"failure_threshold": 3, "recovery_timeout": 40.0}
    }


def test_tune_prints_every_candidate_with_its_numbers():
    result = run_cli("tune", BURSTS, "--tool", "flaky_search")
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith("  ") and line.split()[0].isdigit()]
    candidates = {(int(r[0]), r[1]) for r in rows}
    # the default grid (5 thresholds x 7 cooldowns; the current configuration, 5 and 60s, is in it)
    assert len(rows) == len(candidates) == 35
    assert (5, "60s") in candidates
    assert any(line.endswith("(current)") for line in result.stdout.splitlines())
    best = rows[0]
    # threshold, cooldown, avoided, wrongly rejected, tokens saved, time to recover, openings, score
    assert best == ["3", "40s", "102", "12", "153,000", "6s", "6", "66"]


def test_tune_json_reports_each_metric_per_candidate():
    result = run_cli(
        "tune", BURSTS, "--json", "--thresholds", "2,3", "--cooldowns", "30,40,300", "--tokens-per-call", "1000"
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    flaky = data["tools"]["flaky_search"]
    by_key = {(c["failure_threshold"], c["recovery_timeout"]): c for c in flaky["candidates"]}
    best = by_key[(3, 40.0)]
    # per burst: 17 failures after the third are rejected; the probe at +44 s follows 2 rejected healthy calls
    assert best["failed_calls_avoided"] == 6 * 17
    assert best["healthy_calls_wrongly_rejected"] == 6 * 2
    assert best["tokens_saved"] == 102 * 1000
    assert best["openings"] == 6
    assert best["time_to_recover_s"] == 6.0
    # a 30 s cooldown probes inside the burst, fails and stays open 30 s more into the healthy stretch
    assert by_key[(3, 30.0)]["healthy_calls_wrongly_rejected"] > best["healthy_calls_wrongly_rejected"]
    # threshold 2 opens on the pair of failures in every healthy stretch too
    assert by_key[(2, 40.0)]["openings"] == 12
    assert flaky["recommended"]["failure_threshold"] == 3
    assert data["otel_breaker_tools"] == "flaky_search=failure_threshold=3,recovery_timeout=40"
    assert data["tools"]["steady_lookup"]["recommended"] is None


def test_the_weight_of_a_wrong_rejection_changes_the_answer():
    data = json.loads(run_cli("tune", BURSTS, "--json", "--wrong-weight", "0").stdout)
    # when rejecting healthy calls costs nothing, the longest cooldown avoids the most failures
    assert data["tools"]["flaky_search"]["recommended"]["recovery_timeout"] == 300.0


def _outcome_attributes(record: dict) -> list[dict]:
    """The judged outcome's span attributes, for a record that carries them."""
    names = {
        "outcome": "otel_breaker.outcome",
        "reason": "otel_breaker.outcome.reason",
        "rule": "otel_breaker.outcome.rule",
    }
    return [{"key": names[key], "value": {"stringValue": record[key]}} for key in names if key in record]


def _otlp_lines(records: list[dict]) -> list[str]:
    """Collector file-exporter lines: one ExportTraceServiceRequest as JSON per line."""
    lines = []
    for start in range(0, len(records), 100):
        spans = []
        for index, record in enumerate(records[start : start + 100]):
            nanos = int(record["ts"] * 1e9)
            span = {
                "traceId": f"{start + index:032x}",
                "spanId": f"{start + index:016x}",
                "name": f"execute_tool {record['tool']}",
                "kind": 1,
                "startTimeUnixNano": str(nanos),
                "endTimeUnixNano": str(nanos + 500_000_000),
                "attributes": [
                    {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
                    {"key": "gen_ai.tool.name", "value": {"stringValue": record["tool"]}},
                    *_outcome_attributes(record),
                ],
                "status": {} if record["ok"] else {"code": 2},
            }
            spans.append(span)
        # a model call and a span a breaker rejected: neither is a tool outcome
        spans.append({"name": "chat", "startTimeUnixNano": "1", "attributes": [], "status": {}})
        spans.append(
            {
                "name": "execute_tool flaky_search",
                "startTimeUnixNano": "2",
                "attributes": [
                    {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
                    {"key": "gen_ai.tool.name", "value": {"stringValue": "flaky_search"}},
                    {"key": "otel_breaker.rejected", "value": {"boolValue": True}},
                ],
                "status": {"code": 2},
            }
        )
        lines.append(
            json.dumps(
                {
                    "resourceSpans": [
                        {
                            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "agent"}}]},
                            "scopeSpans": [{"scope": {"name": "otel_breaker"}, "spans": spans}],
                        }
                    ]
                }
            )
        )
    return lines


def test_tune_reads_collector_otlp_json(tmp_path):
    records = [json.loads(line) for line in (DATA / "bursts.jsonl").read_text().splitlines()]
    trace = tmp_path / "traces.json"
    lines = _otlp_lines(records)
    trace.write_text("\n".join(lines) + "\n")
    result = run_cli("tune", str(trace))
    assert result.returncode == 0, result.stderr
    assert f"from {trace} (OTLP JSON); skipped {len(lines)} spans a breaker rejected" in result.stdout
    assert result.stdout.strip().endswith("OTEL_BREAKER_TOOLS='flaky_search=failure_threshold=3,recovery_timeout=40'")


def test_tune_reads_a_pretty_printed_otlp_document(tmp_path):
    records = [json.loads(line) for line in (DATA / "bursts.jsonl").read_text().splitlines()][:50]
    document = json.loads(_otlp_lines(records)[0])
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps(document, indent=2))
    result = run_cli("tune", str(trace), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["format"] == "OTLP JSON"


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (
            '{"tool": "a", "ts": 1, "ok": true}\n{"tool": "a", "ts": 2, "ok": true}\n{"tool": "a", "ts": 3,\n',
            ":3: not valid JSON",
        ),
        ('{"tool": "a", "ts": 1, "ok": true}\n{"tool": "a", "ok": true}\n', ":2: missing 'ts'"),
        ('{"tool": "a", "ts": 1, "ok": "yes"}\n', ":1: 'ok' must be true or false"),
        ('{"tool": "a", "ts": "noon", "ok": true}\n', ":1: 'ts' must be a number of seconds"),
        ('{"tool": "bad name\\n<|im_start|>", "ts": 1, "ok": true}\n', ":1: invalid tool name"),
        ("[1, 2]\n", ":1: expected a JSON object, got list"),
        ('{"hello": 1}\n', ":1: neither an OTLP export (resourceSpans) nor a {tool, ts, ok} record"),
        (
            '{"resourceSpans": [{"scopeSpans": [{"spans": [{"attributes": [{"value": {}}]}]}]}]}\n',
            ":1: malformed OTLP span data",
        ),
        ('{"resourceSpans": []}\n', "no tool calls found"),
        ("\n\n", "empty file"),
    ],
)
def test_bad_files_are_one_line_errors_naming_the_line(tmp_path, content, fragment):
    path = tmp_path / "calls.jsonl"
    path.write_text(content)
    result = run_cli("tune", str(path))
    assert_one_line_error(result, "otel-breaker tune:", fragment)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["/nonexistent/calls.jsonl"], "cannot read /nonexistent/calls.jsonl: No such file or directory"),
        ([BURSTS, "--thresholds", "0,2"], "--thresholds: expected whole numbers >= 1"),
        ([BURSTS, "--cooldowns", "soon"], "--cooldowns: expected seconds >= 0 separated by commas"),
        ([BURSTS, "--wrong-weight", "-1"], "--wrong-weight: expected a number >= 0"),
        ([BURSTS, "--tool", "nope"], "no calls of nope in"),
        ([], "the following arguments are required: FILE"),
    ],
)
def test_bad_arguments_are_one_line_errors(args, fragment):
    assert_one_line_error(run_cli("tune", *args), fragment)


def test_an_invalid_current_configuration_is_reported(tmp_path):
    from cli_helpers import clean_env

    result = run_cli("tune", BURSTS, env=clean_env(OTEL_BREAKER_FAILURE_THRESHOLD="zero"))
    assert_one_line_error(result, "OTEL_BREAKER_FAILURE_THRESHOLD='zero'")


def test_binary_file_is_one_line_error(tmp_path):
    path = tmp_path / "calls.bin"
    path.write_bytes(b"\xff\xfe\x00garbage")
    assert_one_line_error(run_cli("tune", str(path)), "not a text file")


def test_a_healthy_tool_is_one_line_not_a_table_of_zeros():
    result = run_cli("tune", BURSTS, "--tool", "steady_lookup")
    steady = result.stdout.split("steady_lookup")[1]
    assert "none of the 35 candidates ever opens: nothing avoided, nothing wrongly rejected" in steady
    assert not [line for line in steady.splitlines() if line.strip().startswith(("2 ", "3 ", "5 "))]


def test_tune_on_the_demos_recording_does_not_recommend_opening_on_one_failure(tmp_path):
    """A recording of one long outage makes threshold 1 look best in a replay; it is not tried
    unless asked for, because a single transient error would cut the tool off."""
    record = tmp_path / "demo.jsonl"
    assert run_cli("demo", "--record", str(record), "--no-progress").returncode == 0
    data = json.loads(run_cli("tune", str(record), "--json").stdout)
    recommended = data["tools"]["web_search"]["recommended"]
    assert recommended is not None and recommended["failure_threshold"] >= 2
    assert data["tools"]["fetch_page"]["recommended"] is None
    asked = json.loads(run_cli("tune", str(record), "--json", "--thresholds", "1,2,3").stdout)
    assert asked["tools"]["web_search"]["recommended"]["failure_threshold"] == 1  # when asked for, it is tried


# -- judged outcomes: the mix, the top rules, the all-mistakes flag --------------------------------

START = 1_750_000_000.0


def _call(tool: str, seconds: float, outcome: str, reason: str | None = None, rule: str | None = None) -> dict:
    """A recorded tool call with its judged outcome; ignored and failed calls have an error status."""
    record = {"tool": tool, "ts": START + seconds, "ok": outcome == "success", "outcome": outcome}
    if reason is not None:
        record["reason"] = reason
    if rule is not None:
        record["rule"] = rule
    return record


def _judged_records() -> list[dict]:
    """Three tools whose right answer depends on reading the outcome attributes.

    ``search_docs``: 31 calls 30 s apart (15 minutes), every one a mistake (24 HTTP 404s, 7
    not-found texts). ``run_sql``: 60 calls 2 s apart; 12 mistakes in a row, 3 denials and 2
    isolated failures among 43 successes: no candidate may open. ``fetch_page``: 10 failures,
    then 10 mistakes while the breaker is open, then 30 successes after the cooldown.
    """
    docs = [
        _call(
            "search_docs",
            30.0 * i,
            "ignored",
            "retry_request" if i == 3 else "mistake",  # a framework's "try other input" is the model's too
            "http.404" if i % 5 else "text.not_found",
        )
        for i in range(31)
    ]
    sql = []
    for i in range(60):
        if 10 <= i < 22:
            sql.append(_call("run_sql", 1 + 2.0 * i, "ignored", "mistake", "sqlstate.42P01"))
        elif i in (30, 31, 32):
            sql.append(_call("run_sql", 1 + 2.0 * i, "ignored", "control", "text.denied"))
        elif i in (40, 50):
            sql.append(_call("run_sql", 1 + 2.0 * i, "failure", rule="unrecognised"))
        else:
            sql.append(_call("run_sql", 1 + 2.0 * i, "success"))
    fetch = [_call("fetch_page", 2.0 * i, "failure", rule="http.503") for i in range(10)]
    fetch += [_call("fetch_page", 20 + 2.0 * i, "ignored", "mistake", "http.404") for i in range(10)]
    fetch += [_call("fetch_page", 60 + 2.0 * i, "success") for i in range(30)]
    return sorted(docs + sql + fetch, key=lambda r: r["ts"])


def _write_trace(tmp_path, records: list[dict], name: str = "judged.json") -> str:
    path = tmp_path / name
    path.write_text("\n".join(_otlp_lines(records)) + "\n")
    return str(path)


SEARCH_DOCS_FLAG = (
    "all 31 calls were the model's mistakes over 15 minutes: check the tool's description or whether an "
    "error is misjudged; to count it: OTEL_BREAKER_FAILURE_ERRORS='search_docs=^http\\.404\\b'"
)


def test_tune_reports_each_tools_outcome_mix_top_rules_and_the_all_mistakes_flag(tmp_path):
    result = run_cli("tune", _write_trace(tmp_path, _judged_records()))
    assert result.returncode == 0, result.stderr
    blocks = {block.splitlines()[0].split()[0]: block.splitlines() for block in result.stdout.split("\n\n")[1:-1]}

    docs = blocks["search_docs"]
    assert docs[0] == "search_docs  (31 calls, 0 failed)"
    assert docs[1] == "  outcomes: 0 successes, 0 failures, 31 mistakes, 0 control"
    assert docs[2] == "  top rules: http.404 (mistake) x24, text.not_found (mistake) x7"
    assert docs[3] == f"  flagged: {SEARCH_DOCS_FLAG}"
    assert docs[-1].startswith("  recommended: keep the current settings")

    sql = blocks["run_sql"]
    assert sql[0] == "run_sql  (60 calls, 2 failed)"
    assert sql[1] == "  outcomes: 43 successes, 2 failures, 12 mistakes, 3 control"
    assert sql[2] == "  top rules: sqlstate.42P01 (mistake) x12, text.denied (control) x3, unrecognised (failure) x2"
    assert not any(line.startswith("  flagged:") for line in sql)
    # 12 mistakes in a row with an error status: neutral, so no candidate ever opens
    assert "  none of the 35 candidates ever opens: nothing avoided, nothing wrongly rejected" in sql

    assert blocks["fetch_page"][1] == "  outcomes: 30 successes, 10 failures, 10 mistakes, 0 control"
    assert not any(line.startswith("  flagged:") for line in blocks["fetch_page"])


def test_tune_json_carries_the_same_mix_rules_and_flag(tmp_path):
    trace = _write_trace(tmp_path, _judged_records())
    data = json.loads(run_cli("tune", trace, "--json").stdout)
    docs, sql = data["tools"]["search_docs"], data["tools"]["run_sql"]
    assert docs["outcomes"] == {"success": 0, "failure": 0, "mistake": 31, "control": 0, "other_neutral": 0}
    assert docs["top_rules"] == [
        {"rule": "http.404", "kind": "mistake", "calls": 24},
        {"rule": "text.not_found", "kind": "mistake", "calls": 7},
    ]
    assert docs["all_mistakes"] == {
        "calls": 31,
        "minutes": 15.0,
        "otel_breaker_failure_errors": "search_docs=^http\\.404\\b",
        "message": SEARCH_DOCS_FLAG,
    }
    assert (docs["calls"], docs["failed"], docs["recommended"]) == (31, 0, None)
    assert sql["outcomes"] == {"success": 43, "failure": 2, "mistake": 12, "control": 3, "other_neutral": 0}
    assert [r["rule"] for r in sql["top_rules"]] == ["sqlstate.42P01", "text.denied", "unrecognised"]
    assert sql["all_mistakes"] is None
    assert sql["failed"] == 2
    assert all(c["openings"] == 0 for c in sql["candidates"])
    assert sql["recommended"] is None


def test_a_rejected_mistake_is_neither_a_failure_avoided_nor_a_healthy_call_lost(tmp_path):
    trace = _write_trace(tmp_path, _judged_records())
    data = json.loads(run_cli("tune", trace, "--json", "--tool", "fetch_page", "--thresholds", "3").stdout)
    by_cooldown = {c["recovery_timeout"]: c for c in data["tools"]["fetch_page"]["candidates"]}
    # opens on the third failure (t=4 s); the 7 failures after it are avoided, the 10 mistakes
    # (t=20..38 s) are rejected without counting, and the first probe (t=60 s) succeeds
    assert by_cooldown[40.0]["failed_calls_avoided"] == 7
    assert by_cooldown[40.0]["healthy_calls_wrongly_rejected"] == 0
    assert by_cooldown[40.0]["openings"] == 1


def test_spans_without_judged_outcomes_are_read_from_their_status(tmp_path):
    """The same calls recorded before outcomes were judged: every error status is a failure, so
    the mistakes now count, and the mix has no mistakes or rules to show."""
    records = [{key: r[key] for key in ("tool", "ts", "ok")} for r in _judged_records()]
    data = json.loads(run_cli("tune", _write_trace(tmp_path, records), "--json").stdout)
    sql = data["tools"]["run_sql"]
    assert sql["outcomes"] == {"success": 43, "failure": 17, "mistake": 0, "control": 0, "other_neutral": 0}
    assert sql["top_rules"] == []
    assert sql["recommended"] is not None
    assert data["tools"]["search_docs"]["all_mistakes"] is None
    assert data["tools"]["fetch_page"]["candidates"][0]["failed_calls_avoided"] > 7


@pytest.mark.parametrize(
    ("calls", "spacing", "control_at", "flagged"),
    [
        (20, 32.0, None, True),  # 20 calls over 608 s: both bounds met
        (19, 40.0, None, False),  # over 12 minutes, but 19 calls
        (20, 31.0, None, False),  # 20 calls, but over 589 s
        (40, 30.0, 39, False),  # one call was not a mistake
    ],
)
def test_the_all_mistakes_flag_needs_every_call_at_least_20_calls_and_10_minutes(
    tmp_path, calls, spacing, control_at, flagged
):
    records = [
        _call("lookup", spacing * i, "ignored", "control" if i == control_at else "mistake", "errno.ENOENT")
        for i in range(calls)
    ]
    data = json.loads(run_cli("tune", _write_trace(tmp_path, records), "--json").stdout)
    flag = data["tools"]["lookup"]["all_mistakes"]
    assert (flag is not None) is flagged
    if flagged:
        assert flag["otel_breaker_failure_errors"] == "lookup=^errno\\.ENOENT\\b"


def test_rules_and_tool_names_from_a_recording_reach_the_terminal_sanitised(tmp_path):
    records = [
        _call("evil\x1b[2J\nname", 30.0 * i, "ignored", "mistake", "http.404\x1b[31m\r\nforged line") for i in range(25)
    ]
    result = run_cli("tune", _write_trace(tmp_path, records))
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and "\r" not in result.stdout
    assert not any(line.startswith(("forged", "name")) for line in result.stdout.splitlines())
    # a rule that is not a plain name is not quoted into the suggested pattern
    assert "OTEL_BREAKER_FAILURE_ERRORS='evil" in result.stdout and "=.'" in result.stdout


@pytest.mark.parametrize(("reason", "rule"), [("upstream", "transport"), ("configured", "override.neutral")])
def test_calls_neutral_for_another_reason_are_never_blamed_on_the_model(tmp_path, reason, rule):
    """A dead server its upstream breaker counted, or an error a user's rule made neutral:
    neutral in the replay, shown apart, and never flagged as the model's mistakes."""
    records = [_call("lookup", 30.0 * i, "ignored", reason, rule) for i in range(30)]
    trace = _write_trace(tmp_path, records)
    data = json.loads(run_cli("tune", trace, "--json").stdout)["tools"]["lookup"]
    assert data["outcomes"] == {"success": 0, "failure": 0, "mistake": 0, "control": 0, "other_neutral": 30}
    assert data["all_mistakes"] is None
    assert data["top_rules"] == [{"rule": rule, "kind": "other_neutral", "calls": 30}]
    text = run_cli("tune", trace).stdout
    assert "  outcomes: 0 successes, 0 failures, 0 mistakes, 0 control, 30 other neutral" in text
    assert "flagged:" not in text


@pytest.mark.parametrize(
    ("rule", "flag_ends_with"),
    [
        ("framework.mistake", "or whether an error is misjudged"),  # no pattern reaches a framework's signal
        ("override.neutral", None),  # the user's own pattern made them neutral: nothing to flag
        ("predicate", None),
    ],
)
def test_the_flag_suggests_a_pattern_only_where_one_would_count_the_error(tmp_path, rule, flag_ends_with):
    records = [_call("lookup", 30.0 * i, "ignored", "mistake", rule) for i in range(30)]
    flag = json.loads(run_cli("tune", _write_trace(tmp_path, records), "--json").stdout)["tools"]["lookup"]
    flag = flag["all_mistakes"]
    if flag_ends_with is None:
        assert flag is None
    else:
        assert flag["message"].endswith(flag_ends_with)
        assert flag["otel_breaker_failure_errors"] is None
