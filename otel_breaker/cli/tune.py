"""``otel-breaker tune FILE``: pick thresholds from what your tools really did.

The pattern's thresholds "require empirical tuning per workload". This verb
replays recorded tool outcomes through candidate breaker configurations (a
grid of failure threshold x cooldown, on an injected clock) and reports, per
tool and candidate:

* failed calls avoided: rejected calls whose recorded outcome was a failure;
* healthy calls wrongly rejected: rejected calls whose recorded outcome was ok;
* tokens saved: failed calls avoided x the estimated tokens of one round-trip;
* time to recover: from the first healthy call after the breaker opened to the
  breaker closing again, averaged over openings (a breaker still not closed at
  the end of the recording counts until then).

Score (higher is better): ``avoided - wrong_weight x wrongly_rejected``;
ties go to the faster recovery, then the higher threshold, then the shorter
cooldown. A tool with no failure streak any candidate reacts to keeps its
current settings.

Only failures count. A span judged a mistake of the model or control flow
(``otel_breaker.outcome=ignored``) is neutral in the replay, as it is to a
breaker: a rejected neutral call is neither a failure avoided nor a healthy
call lost. Each tool's outcome mix, the rules that judged it most often, and a
flag for a tool whose calls were all mistakes for a long time are reported
with it (``_tune_outcomes``).

Input: OTLP JSON as written by the OpenTelemetry Collector's file exporter
(one JSON object per line with ``resourceSpans``; tool spans have
``gen_ai.operation.name=execute_tool`` and ``gen_ai.tool.name``; the outcome
is ``otel_breaker.outcome`` where present, else status code 2 is a failure;
spans a breaker rejected are skipped, since the tool did not run), or JSONL
of ``{"tool": ..., "ts": unix seconds, "ok": true|false}``.

The replay is counterfactual in one way: a rejected call is assumed to have
happened anyway, at the recorded time, with the recorded outcome.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from typing import Any

from otel_breaker.cli import UsageError
from otel_breaker.cli._common import number, number_list, one_line_errors
from otel_breaker.cli._tune_outcomes import (
    ALL_MISTAKES_MIN_CALLS,
    ALL_MISTAKES_MIN_SECONDS,
    FAILURE,
    SUCCESS,
    Outcome,
    ToolMix,
    kind_of_span,
    tool_mix,
)
from otel_breaker.sanitize import bounded

#: Failure thresholds tried unless ``--thresholds`` says otherwise. Not 1: a breaker that
#: opens on any single error cuts a tool off for one transient blip, and a recording of long
#: outages (the case a replay sees most) would always make it look best.
DEFAULT_THRESHOLDS = (2, 3, 4, 5, 8)
DEFAULT_COOLDOWNS = (10.0, 20.0, 30.0, 40.0, 60.0, 120.0, 300.0)
DEFAULT_WRONG_WEIGHT = 3.0


@dataclass
class Trace:
    outcomes: list[Outcome]
    format: str
    skipped_rejected: int = 0
    skipped_other: int = 0


# -- reading ----------------------------------------------------------------------------------


def read_trace(path: str) -> Trace:
    """Parse ``path`` (OTLP JSON lines or outcome JSONL); UsageError names the bad line."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not a text file (expected OTLP JSON or JSONL)") from None
    lines = text.splitlines()
    if not any(line.strip() for line in lines):
        raise UsageError(f"{path}: empty file (expected OTLP JSON or JSONL)")
    documents: list[tuple[int, Any]] = []
    try:
        for number, line in enumerate(lines, 1):
            if line.strip():
                documents.append((number, _json_line(path, number, line)))
    except UsageError as line_error:
        # A pretty-printed OTLP JSON document spans several lines.
        try:
            whole = json.loads(text)
        except json.JSONDecodeError:
            whole = None
        if not (isinstance(whole, dict) and "resourceSpans" in whole):
            raise line_error from None
        documents = [(1, whole)]
    trace = Trace([], "")
    formats = set()
    for number, document in documents:
        if not isinstance(document, dict):
            raise UsageError(f"{path}:{number}: expected a JSON object, got {type(document).__name__}")
        if "resourceSpans" in document:
            formats.add("OTLP JSON")
            _read_otlp(path, number, document, trace)
        elif "tool" in document or "ok" in document:
            formats.add("JSONL")
            trace.outcomes.append(_read_record(path, number, document))
        else:
            raise UsageError(f"{path}:{number}: neither an OTLP export (resourceSpans) nor a {{tool, ts, ok}} record")
    trace.format = " + ".join(sorted(formats))
    if not trace.outcomes:
        raise UsageError(f"{path}: no tool calls found (tool spans need gen_ai.operation.name=execute_tool)")
    trace.outcomes.sort(key=lambda o: o.ts)
    return trace


def _json_line(path: str, number: int, line: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}:{number}: not valid JSON ({exc.msg} at column {exc.colno})") from None


def _read_record(path: str, number: int, record: dict) -> Outcome:
    from otel_breaker.config import validate_tool_name

    missing = [key for key in ("tool", "ts", "ok") if key not in record]
    if missing:
        raise UsageError(f"{path}:{number}: missing {', '.join(repr(k) for k in missing)}")
    tool, ts, ok = record["tool"], record["ts"], record["ok"]
    try:
        validate_tool_name(tool)
    except ValueError as exc:
        raise UsageError(f"{path}:{number}: {exc}") from None
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
        raise UsageError(f"{path}:{number}: 'ts' must be a number of seconds, got {ts!r}")
    if not isinstance(ok, bool):
        raise UsageError(f"{path}:{number}: 'ok' must be true or false, got {ok!r}")
    return Outcome(tool, float(ts), SUCCESS if ok else FAILURE)


def _attribute(value: dict) -> Any:
    for key in ("stringValue", "boolValue", "intValue", "doubleValue"):
        if key in value:
            return value[key]
    return None


def _read_otlp(path: str, number: int, document: dict, trace: Trace) -> None:
    try:
        for resource_spans in document.get("resourceSpans") or ():
            for scope_spans in resource_spans.get("scopeSpans") or ():
                for span in scope_spans.get("spans") or ():
                    attributes = {a["key"]: _attribute(a.get("value") or {}) for a in span.get("attributes") or ()}
                    tool = attributes.get("gen_ai.tool.name")
                    if attributes.get("gen_ai.operation.name") != "execute_tool" or not isinstance(tool, str):
                        continue
                    if attributes.get("otel_breaker.rejected") in (True, "true"):
                        trace.skipped_rejected += 1
                        continue
                    start = span.get("startTimeUnixNano")
                    if start is None:
                        trace.skipped_other += 1
                        continue
                    code = (span.get("status") or {}).get("code", 0)
                    kind, rule = kind_of_span(attributes, code in (2, "2", "STATUS_CODE_ERROR"))
                    trace.outcomes.append(Outcome(bounded(tool), int(start) / 1e9, kind, rule))
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{path}:{number}: malformed OTLP span data ({type(exc).__name__}: {exc})") from None


# -- replay ------------------------------------------------------------------------------------


@dataclass
class Result:
    threshold: int
    cooldown: float
    calls: int = 0
    avoided: int = 0
    wrongly_rejected: int = 0
    openings: int = 0
    recovery: float | None = None
    tokens_saved: int = 0
    score: float = 0.0
    current: bool = False


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def replay(outcomes: list[Outcome], base: Any, threshold: int, cooldown: float, tokens_per_call: int) -> Result:
    """Run one tool's recorded outcomes through a breaker with this threshold and cooldown.

    A neutral outcome (a mistake, control flow) is recorded as ignored, as the breaker would
    record it; rejected, it is neither a failure avoided nor a healthy call lost."""
    from otel_breaker import classify
    from otel_breaker.breaker import REJECTED, CircuitBreaker, State

    clock = _Clock()
    config = base.with_changes(failure_threshold=threshold, recovery_timeout=cooldown, mode="enforce", timeout=None)
    breaker = CircuitBreaker(outcomes[0].tool, config, clock=clock)
    result = Result(threshold, cooldown, calls=len(outcomes))
    recoveries: list[float] = []
    healthy_since: float | None = None
    was_closed = True
    recorded = {SUCCESS: classify.SUCCESS, FAILURE: classify.FAILURE}
    for outcome in outcomes:
        clock.now = outcome.ts
        permit = breaker.try_acquire()
        if permit == REJECTED:
            if outcome.ok:
                result.wrongly_rejected += 1
            elif outcome.failed:
                result.avoided += 1
        else:
            breaker.on_outcome(permit, recorded.get(outcome.kind, classify.IGNORED))
        closed = breaker.state is State.CLOSED
        if not closed and outcome.ok and healthy_since is None:
            healthy_since = outcome.ts
        if not closed and was_closed:
            result.openings += 1
        if closed and not was_closed:
            recoveries.append(outcome.ts - healthy_since if healthy_since is not None else 0.0)
            healthy_since = None
        if not closed and outcome.failed and healthy_since is not None and permit != REJECTED:
            healthy_since = None  # the tool failed again: it had not recovered
        was_closed = closed
    if not was_closed and healthy_since is not None:
        recoveries.append(outcomes[-1].ts - healthy_since)
    if recoveries:
        result.recovery = sum(recoveries) / len(recoveries)
    result.tokens_saved = result.avoided * tokens_per_call
    return result


def _rank_key(result: Result) -> tuple:
    recovery = result.recovery if result.recovery is not None else 0.0
    return (-result.score, recovery, -result.threshold, result.cooldown)


def tune_tool(
    outcomes: list[Outcome],
    base: Any,
    thresholds: tuple[int, ...],
    cooldowns: tuple[float, ...],
    wrong_weight: float,
    tokens_per_call: int,
) -> list[Result]:
    """Every candidate for one tool, best first."""
    grid = {(t, c) for t in thresholds for c in cooldowns}
    current = (base.failure_threshold, float(base.recovery_timeout))
    grid.add(current)
    results = []
    for threshold, cooldown in grid:
        result = replay(outcomes, base, threshold, cooldown, tokens_per_call)
        result.score = result.avoided - wrong_weight * result.wrongly_rejected
        result.current = (threshold, cooldown) == current
        results.append(result)
    results.sort(key=_rank_key)
    return results


# -- output -------------------------------------------------------------------------------------


def _number(value: float) -> str:
    return f"{value:g}"


def _recovery(result: Result) -> str:
    if result.openings == 0:
        return "-"
    return f"{result.recovery:.0f}s" if result.recovery is not None else "never"


@dataclass
class ToolReport:
    """What ``tune`` says of one tool: its candidates (best first), the recommendation, its outcomes."""

    results: list[Result]
    best: Result | None
    mix: ToolMix


def render_mix(mix: ToolMix) -> list[str]:
    """The tool's outcome mix, its top rules and the all-mistakes flag, one line each."""
    lines = [f"  outcomes: {mix.summary()}"]
    if mix.top_rules:
        lines.append(f"  top rules: {mix.rules_summary()}")
    if mix.all_mistakes is not None:
        lines.append(f"  flagged: {mix.all_mistakes.message()}")
    return lines


def render_tool(tool: str, report: ToolReport, top: int | None) -> list[str]:
    """The tool's block of the text report, without the recommendation."""
    results = report.results
    calls = sum(report.mix.counts.values())
    lines = [f"{tool}  ({calls:,} calls, {report.mix.counts[FAILURE]:,} failed)", *render_mix(report.mix)]
    if not any(r.openings for r in results):  # every row would read the same: say it once
        lines.append(f"  none of the {len(results)} candidates ever opens: nothing avoided, nothing wrongly rejected")
        return lines
    header = (
        f"  {'threshold':>9}  {'cooldown':>8}  {'avoided':>7}  {'wrongly rejected':>16}  "
        f"{'tokens saved':>12}  {'time to recover':>15}  {'openings':>8}  {'score':>7}"
    )
    lines.append(header)
    shown = results if top is None else results[:top]
    for r in shown:
        lines.append(
            f"  {r.threshold:>9}  {_number(r.cooldown) + 's':>8}  {r.avoided:>7,}  {r.wrongly_rejected:>16,}  "
            f"{r.tokens_saved:>12,}  {_recovery(r):>15}  {r.openings:>8}  {_number(r.score):>7}"
            + ("  (current)" if r.current else "")
        )
    if len(shown) < len(results):
        lines.append(f"  ... {len(results) - len(shown)} more candidates (--top to show more)")
    return lines


def recommendation(results: list[Result]) -> Result | None:
    """The best candidate, or None when no candidate ever opens on a real failure."""
    best = results[0]
    if best.avoided == 0 and best.openings == 0:
        return None
    if best.score <= 0 and not any(r.avoided for r in results):
        return None
    return best


# -- the verb ------------------------------------------------------------------------------------


_int_list = number_list(int, "whole numbers", low=1)
_float_list = number_list(float, "seconds", low=0, unit="s")
_weight = number(float, "a number", low=0)
_positive = number(int, "a whole number", low=1)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "tune",
        help="recommend thresholds and cooldowns by replaying recorded tool outcomes",
        description="Replay recorded tool outcomes through candidate breaker configurations and recommend a "
        "failure threshold and cooldown per tool. FILE: OTLP JSON from the Collector's file exporter, or JSONL "
        'of {"tool": ..., "ts": unix seconds, "ok": true|false}. Score = failed calls avoided - WEIGHT x healthy '
        "calls wrongly rejected; ties go to faster recovery, a higher threshold, a shorter cooldown. Only "
        "failures count: spans with otel_breaker.outcome=ignored (the model's mistakes, control flow) are "
        "neutral. Each tool's outcome mix (successes, failures, mistakes, control) and its most frequent "
        "otel_breaker.outcome.rule values are shown, and a tool whose calls were all mistakes (at least "
        f"{ALL_MISTAKES_MIN_CALLS} calls over at least {ALL_MISTAKES_MIN_SECONDS / 60:g} minutes) is flagged with "
        "an OTEL_BREAKER_FAILURE_ERRORS value that would count its errors.",
    )
    parser.add_argument("file", metavar="FILE", help="recorded tool outcomes (OTLP JSON or JSONL)")
    parser.add_argument(
        "--thresholds",
        type=_int_list,
        default=DEFAULT_THRESHOLDS,
        help=f"failure thresholds to try, comma separated (default {','.join(map(str, DEFAULT_THRESHOLDS))})",
    )
    parser.add_argument(
        "--cooldowns",
        type=_float_list,
        default=DEFAULT_COOLDOWNS,
        help=f"cooldowns in seconds to try (default {','.join(_number(c) for c in DEFAULT_COOLDOWNS)})",
    )
    parser.add_argument(
        "--wrong-weight",
        type=_weight,
        default=DEFAULT_WRONG_WEIGHT,
        metavar="WEIGHT",
        help=f"how many avoided failures one wrongly rejected healthy call costs (default {DEFAULT_WRONG_WEIGHT:g})",
    )
    parser.add_argument(
        "--tokens-per-call",
        type=_positive,
        metavar="N",
        help="estimated tokens of one failed round-trip (default OTEL_BREAKER_TOKENS_PER_CALL, 1500)",
    )
    parser.add_argument("--tool", action="append", metavar="NAME", help="only this tool (repeatable)")
    parser.add_argument("--top", type=_positive, metavar="N", help="show only the N best candidates per tool")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    one_line_errors(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from otel_breaker.config import ConfigError, load_settings

    try:
        settings = load_settings(strict=True)
    except ConfigError as exc:
        raise UsageError(f"the current configuration is invalid: {'; '.join(exc.problems)}") from None
    tokens_per_call = args.tokens_per_call or settings.tokens_per_call
    trace = read_trace(args.file)
    by_tool: dict[str, list[Outcome]] = {}
    for outcome in trace.outcomes:
        by_tool.setdefault(outcome.tool, []).append(outcome)
    if args.tool:
        unknown = [t for t in args.tool if t not in by_tool]
        if unknown:
            raise UsageError(f"no calls of {', '.join(unknown)} in {args.file} (tools: {', '.join(sorted(by_tool))})")
        by_tool = {t: by_tool[t] for t in args.tool}

    report: dict[str, ToolReport] = {}
    for tool in sorted(by_tool):
        base = settings.config_for(tool)
        results = tune_tool(by_tool[tool], base, args.thresholds, args.cooldowns, args.wrong_weight, tokens_per_call)
        report[tool] = ToolReport(results, recommendation(results), tool_mix(tool, by_tool[tool]))

    paste = ";".join(
        f"{tool}=failure_threshold={entry.best.threshold},recovery_timeout={_number(entry.best.cooldown)}"
        for tool, entry in report.items()
        if entry.best is not None
    )
    if args.json:
        print(json.dumps(_as_json(trace, report, paste, args), indent=2))
        return 0

    total = sum(len(v) for v in by_tool.values())
    lines = [
        f"Replayed {total:,} tool calls of {len(by_tool)} tools from {args.file} ({trace.format})"
        + (f"; skipped {trace.skipped_rejected} spans a breaker rejected" if trace.skipped_rejected else ""),
        f"score = failed calls avoided - {args.wrong_weight:g} x healthy calls wrongly rejected "
        f"(ties: faster recovery, higher threshold, shorter cooldown); tokens at {tokens_per_call:,} per call",
    ]
    for tool, entry in report.items():
        best = entry.best
        lines.append("")
        lines.extend(render_tool(tool, entry, args.top))
        if best is None:
            lines.append("  recommended: keep the current settings (no failure streak any candidate reacts to)")
        else:
            lines.append(
                f"  recommended: failure_threshold={best.threshold}, recovery_timeout={_number(best.cooldown)}s "
                f"(avoids {best.avoided:,} failed calls, wrongly rejects {best.wrongly_rejected:,})"
            )
    lines.append("")
    if paste:
        lines += ["Paste into the environment:", f"OTEL_BREAKER_TOOLS='{paste}'"]
    else:
        lines.append("No change recommended.")
    print("\n".join(lines))
    return 0


def _as_json(trace: Trace, report: dict[str, ToolReport], paste: str, args: argparse.Namespace) -> dict:
    def candidate(r: Result) -> dict[str, Any]:
        return {
            "failure_threshold": r.threshold,
            "recovery_timeout": r.cooldown,
            "failed_calls_avoided": r.avoided,
            "healthy_calls_wrongly_rejected": r.wrongly_rejected,
            "tokens_saved": r.tokens_saved,
            "time_to_recover_s": r.recovery,
            "openings": r.openings,
            "score": r.score,
            "current": r.current,
        }

    return {
        "file": args.file,
        "format": trace.format,
        "skipped_rejected_spans": trace.skipped_rejected,
        "wrong_weight": args.wrong_weight,
        "tools": {
            tool: {
                "calls": sum(entry.mix.counts.values()),
                "failed": entry.mix.counts[FAILURE],
                **entry.mix.as_json(),
                "candidates": [candidate(r) for r in entry.results],
                "recommended": None if entry.best is None else candidate(entry.best),
            }
            for tool, entry in report.items()
        },
        "otel_breaker_tools": paste,
    }
