"""What a recording says of each tool's outcomes, for ``otel-breaker tune``.

A breaker counts failures only: the model's mistakes (a wrong path, a 404, an
SQL syntax error) and control flow (a denial, a cancellation) are neutral. A
replay that counted them would recommend a breaker that opens on a model's
typos, so each recorded call is read as one of four kinds, from the
``otel_breaker.outcome`` attributes a tool span carries; a span without them is
read from its status alone (an error is a failure), as older recordings were.

The same reading gives each tool's outcome mix, the rules that judged its calls
most often, and a flag for a tool whose every call, for a long time, was the
model's mistake: either the tool's description misleads the model, or an error
the tool answers is judged a mistake when, for this tool, it means the tool is
broken.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from otel_breaker.sanitize import bounded

SUCCESS = "success"
FAILURE = "failure"
MISTAKE = "mistake"
CONTROL = "control"
#: Neutral for another reason: a user's rule made it so, or the tool's upstream counted it.
OTHER_NEUTRAL = "other_neutral"
#: The kinds in the order they are reported.
KINDS = (SUCCESS, FAILURE, MISTAKE, CONTROL, OTHER_NEUTRAL)
#: ``otel_breaker.outcome.reason`` values that are the model's to act on: its own mistake, or a
#: framework's "retry with other input" request.
_MISTAKE_REASONS = frozenset({"mistake", "retry_request"})

#: Span attributes of a judged outcome (``success`` | ``failure`` | ``ignored``), the reason
#: of an ignored one (``mistake`` | ``control`` | ``retry_request``) and the rule that decided.
ATTR_OUTCOME = "otel_breaker.outcome"
ATTR_OUTCOME_REASON = "otel_breaker.outcome.reason"
ATTR_OUTCOME_RULE = "otel_breaker.outcome.rule"

#: A rule name is short; anything longer in a recording is cut before it reaches a terminal.
MAX_RULE_CHARS = 64
#: How many rules are reported per tool.
TOP_RULES = 3
#: A tool is flagged when every one of at least this many calls was a mistake ...
ALL_MISTAKES_MIN_CALLS = 20
#: ... over at least this many seconds of the recording: a model's bad afternoon, not a blip.
ALL_MISTAKES_MIN_SECONDS = 600.0

#: Characters of a rule name the flag's suggested pattern may quote as they are.
_PLAIN_RULE = re.compile(r"[A-Za-z0-9_.:+-]{0,63}[A-Za-z0-9_]")
#: Rules of the user's own judgement (a pattern, a Python predicate): never flagged, the user decided.
_USER_RULES = ("override.", "predicate")
#: Rules of a framework's own validation signal: a pattern does not reach them (``count_model_retry``
#: counts a retry request), so the flag suggests no pattern for them.
_FRAMEWORK_RULES = "framework."


@dataclass(frozen=True)
class Outcome:
    """One recorded call of a tool: when it started, how it was judged, and by which rule."""

    tool: str
    ts: float
    kind: str
    rule: str | None = None

    @property
    def ok(self) -> bool:
        """The call succeeded (a healthy call the breaker should let through)."""
        return self.kind == SUCCESS

    @property
    def failed(self) -> bool:
        """The call is a failure of the tool (what a breaker counts)."""
        return self.kind == FAILURE


def kind_of_span(attributes: Mapping[str, Any], error_status: bool) -> tuple[str, str | None]:
    """The kind and rule of one tool span.

    ``otel_breaker.outcome`` decides when present: an ``ignored`` one is a mistake when its
    reason is the model's to act on (a mistake, a framework's "retry with other input"
    request), control when its reason says so, and otherwise neutral for another reason (a
    user's rule, an upstream breaker that counted the error): never a mistake the all-mistakes
    flag would blame on the model. Without it the span's status decides, as in recordings
    made before outcomes were judged."""
    rule = attributes.get(ATTR_OUTCOME_RULE)
    rule = bounded(rule, MAX_RULE_CHARS) if isinstance(rule, str) and rule else None
    outcome = attributes.get(ATTR_OUTCOME)
    if outcome == SUCCESS:
        return SUCCESS, None
    if outcome == FAILURE:
        return FAILURE, rule
    if outcome == "ignored":
        reason = attributes.get(ATTR_OUTCOME_REASON)
        if reason in _MISTAKE_REASONS:
            return MISTAKE, rule
        return (CONTROL if reason == CONTROL else OTHER_NEUTRAL), rule
    return (FAILURE if error_status else SUCCESS), rule


@dataclass(frozen=True)
class RuleCount:
    """How many of a tool's calls one rule judged, and what it judged them."""

    rule: str
    kind: str
    count: int


@dataclass(frozen=True)
class AllMistakes:
    """A tool whose every call in the recording was the model's mistake, for long enough."""

    calls: int
    minutes: float
    suggestion: str | None
    """An ``OTEL_BREAKER_FAILURE_ERRORS`` value that would count the tool's top rule; None
    when the top rule is a framework's validation signal, which no pattern overrides."""

    def message(self) -> str:
        """The flag as the report prints it."""
        text = (
            f"all {self.calls:,} calls were the model's mistakes over {self.minutes:.0f} minutes: "
            "check the tool's description or whether an error is misjudged"
        )
        if self.suggestion is None:
            return text
        return f"{text}; to count it: OTEL_BREAKER_FAILURE_ERRORS='{self.suggestion}'"


@dataclass(frozen=True)
class ToolMix:
    """One tool's outcomes in the recording."""

    counts: dict[str, int]
    top_rules: list[RuleCount]
    all_mistakes: AllMistakes | None

    def summary(self) -> str:
        """``366 successes, 144 failures, 3 mistakes, 1 control`` (and ``, 2 other neutral``
        when a user's rule or an upstream made calls neutral)."""
        text = (
            f"{self.counts[SUCCESS]:,} successes, {self.counts[FAILURE]:,} failures, "
            f"{self.counts[MISTAKE]:,} mistakes, {self.counts[CONTROL]:,} control"
        )
        if self.counts[OTHER_NEUTRAL]:
            text += f", {self.counts[OTHER_NEUTRAL]:,} other neutral"
        return text

    def rules_summary(self) -> str:
        """``http.404 (mistake) x12, unrecognised (failure) x2``; empty when no rule was recorded."""
        return ", ".join(f"{r.rule} ({r.kind}) x{r.count:,}" for r in self.top_rules)

    def as_json(self) -> dict[str, Any]:
        """The same facts as the text report, for ``--json``."""
        flag = self.all_mistakes
        return {
            "outcomes": dict(self.counts),
            "top_rules": [{"rule": r.rule, "kind": r.kind, "calls": r.count} for r in self.top_rules],
            "all_mistakes": None
            if flag is None
            else {
                "calls": flag.calls,
                "minutes": round(flag.minutes, 1),
                "otel_breaker_failure_errors": flag.suggestion,
                "message": flag.message(),
            },
        }


def tool_mix(tool: str, outcomes: Sequence[Outcome]) -> ToolMix:
    """The outcome mix, top rules and all-mistakes flag of one tool's calls (in time order)."""
    counts = {kind: 0 for kind in KINDS}
    rules: Counter[tuple[str, str]] = Counter()
    for outcome in outcomes:
        counts[outcome.kind] += 1
        if outcome.rule is not None and outcome.kind != SUCCESS:
            rules[(outcome.rule, outcome.kind)] += 1
    ranked = sorted(rules.items(), key=_rule_rank)[:TOP_RULES]
    top = [RuleCount(rule, kind, count) for (rule, kind), count in ranked]
    return ToolMix(counts, top, _all_mistakes(tool, outcomes, counts, top))


def _rule_rank(item: tuple[tuple[str, str], int]) -> tuple[int, str, str]:
    """Most calls first; ties by rule name, so the report is the same on every run."""
    (rule, kind), count = item
    return (-count, rule, kind)


def _all_mistakes(
    tool: str, outcomes: Sequence[Outcome], counts: Mapping[str, int], top: Sequence[RuleCount]
) -> AllMistakes | None:
    """The flag, when every call was a mistake, there were enough of them, over long enough."""
    if not outcomes or counts[MISTAKE] != len(outcomes) or len(outcomes) < ALL_MISTAKES_MIN_CALLS:
        return None
    seconds = outcomes[-1].ts - outcomes[0].ts
    if seconds < ALL_MISTAKES_MIN_SECONDS:
        return None
    if top and top[0].rule.startswith(_USER_RULES):
        return None
    return AllMistakes(len(outcomes), seconds / 60.0, _suggestion(tool, top))


def _suggestion(tool: str, top: Sequence[RuleCount]) -> str | None:
    """``tool=^http\\.404\\b``: the tool's most frequent rule, anchored where the judged text
    starts (``"<rule> <ErrorType>: <message>"``); any error of the tool (``.``) when the
    recording names no plain rule. The list's separators and glob characters in a tool name
    become ``?``, so the value still parses and still matches the tool."""
    rule = top[0].rule if top else ""
    if rule.startswith(_FRAMEWORK_RULES):
        return None
    pattern = rf"^{re.escape(rule)}\b" if _PLAIN_RULE.fullmatch(rule) else "."
    glob = re.sub(r"[;=*?\[\]]", "?", tool)
    return f"{glob}={pattern}"
