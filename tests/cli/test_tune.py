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
