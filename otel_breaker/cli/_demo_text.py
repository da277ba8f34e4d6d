"""What ``otel-breaker demo`` prints: the side-by-side table, the timeline, the menu cases, or JSON."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from typing import Any

from otel_breaker.simulation import upstream_scene
from otel_breaker.simulation.agent import Ledger
from otel_breaker.simulation.cases import CaseResult
from otel_breaker.simulation.loop_case import TURN_LIMIT, LoopResult, savings
from otel_breaker.simulation.runs import Moment
from otel_breaker.simulation.stubborn_case import StubbornResult
from otel_breaker.simulation.upstream_scene import SceneResult
from otel_breaker.simulation.world import BACKUP, MAX_ATTEMPTS, PRIMARY, TOOL_TIMEOUT, outage

TIMELINE_LINES = 12


def duration(seconds: float) -> str:
    seconds = round(seconds)
    minutes, secs = divmod(seconds, 60)
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def clock_time(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes:02d}:{secs:02d}"


ROWS: list[tuple[str, Callable[[Ledger], str]]] = [
    ("tool calls attempted", lambda x: f"{x.attempted:,}"),
    ("  failed", lambda x: f"{x.failed:,}"),
    ("  rejected by a breaker (not run)", lambda x: f"{x.rejected:,}"),
    ("est. tokens spent on tool round-trips", lambda x: f"{x.tokens_spent:,}"),
    ("  of which on failed calls", lambda x: f"{x.tokens_failed:,}"),
    (
        "est. tokens saved (difference in tokens spent)",
        lambda x: "-" if x.saved_measured is None else f"{x.saved_measured:,}",
    ),
    # The saving in two parts that add up to it: what the metric counts live, and the rest.
    (
        "  rejected calls (otel_breaker.tokens.saved) (*)",
        lambda x: "-" if x.saved_measured is None else f"{x.tokens_saved:,}",
    ),
    ("  the rest: retries not made (*)", lambda x: "-" if x.saved_measured is None else f"{_rest(x):,}"),
    ("time waiting on a dead tool", lambda x: duration(x.dead_wait)),
    ("switched to the backup tool", lambda x: f"{x.fallbacks_used:,}"),
    ("session length (simulated)", lambda x: duration(x.session_seconds)),
]


def _rest(ledger: Ledger) -> int:
    """The part of the measured saving the live metric does not see (negative when it counts more)."""
    return (ledger.saved_measured or 0) - ledger.tokens_saved


def _saving_note(with_: Ledger) -> str:
    """How the saving splits: the metric counts rejections as they happen, the rest is measured."""
    if not with_.rejected:
        return "(*) otel_breaker.tokens.saved counts one failed round-trip per rejected call; none was rejected."
    per_call = with_.tokens_saved / with_.rejected
    relation = (
        "below the measured saving: each rejection also spared the agent its retries of the dead tool "
        "(it switched to the backup at once), which is the rest"
        if _rest(with_) > 0
        else "the measured saving"
        if _rest(with_) == 0
        else "above the measured saving: the agent still paid for the round-trip that was rejected"
    )
    text = (
        f"(*) otel_breaker.tokens.saved counts one failed round-trip (~{per_call:,.0f} tokens) per rejected call "
        f"({with_.rejected}), as it happens; here that is {relation}."
    )
    return textwrap.fill(text, width=100, subsequent_indent="    ")


def openings(transitions: dict, from_state: str = "closed") -> dict[str, int]:
    """Per tool: openings (closed -> open: a healthy tool went down), as ``otel-breaker tune`` counts
    them; with ``from_state="half_open"``, re-openings (a probe failed)."""
    counts: dict[str, int] = {}
    for (tool, _agent, from_, to, _source, _origin), count in transitions.items():
        if to == "open" and from_ == from_state:
            counts[tool] = counts.get(tool, 0) + count
    return dict(sorted(counts.items()))


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"


def openings_summary(transitions: dict) -> str:
    """One line per the run: openings and re-openings apart, as tune and the alert count them."""
    opened = openings(transitions)
    reopened = openings(transitions, "half_open")
    parts = [
        f"'{tool}' opened {_times(count)}, re-opened {_times(reopened.get(tool, 0))} by failed probes"
        for tool, count in opened.items()
    ]
    return (
        f"  ({'; '.join(parts)}. `otel-breaker tune` counts the openings; the OtelBreakerFrequentOpenings "
        "alert counts every transition to open, both kinds, and fires at 3 in 15 minutes)"
    )


def render(
    steps: int,
    without: Ledger,
    with_: Ledger,
    timeline: list[Moment],
    transitions: dict,
    prompt: list[str],
    cases: list[CaseResult] | None = None,
    loop_cases: list[LoopResult] | None = None,
    stubborn_cases: list[StubbornResult] | None = None,
) -> str:
    first, last = outage(steps)
    lines = [
        f"otel-breaker demo: a research agent answers {steps} questions (search, then fetch). "
        f"'{PRIMARY}' is dead during questions {first}-{last}: every call hangs until its {TOOL_TIMEOUT:g}s timeout.",
        f"The agent retries a failing tool {MAX_ATTEMPTS} times, then switches to '{BACKUP}'; "
        f"breakers: fast_api preset (3 failures, 30s cooldown), '{PRIMARY}' falls back to '{BACKUP}'.",
        "",
    ]
    label_width = max(len(label) for label, _ in ROWS)
    header = f"{'':<{label_width}}  {'without breakers':>16}  {'with breakers':>14}"
    lines += [header, "-" * len(header)]
    for label, cell in ROWS:
        lines.append(f"{label:<{label_width}}  {cell(without):>16}  {cell(with_):>14}")
    lines.append(_saving_note(with_))
    lines += ["", "Timeline of breaker state changes (simulated time):"]
    shown: list[Moment | None] = list(timeline)
    if len(timeline) > TIMELINE_LINES:
        shown = [*timeline[:6], None, *timeline[-(TIMELINE_LINES - 7) :]]
    for moment in shown:
        if moment is None:
            hidden = len(timeline) - TIMELINE_LINES + 1
            lines.append(f"  ...    ({hidden} more: cooldown elapsed, the probe failed, open again)")
            continue
        arrow = f"{moment.from_state.replace('_', '-')} -> {moment.to_state.replace('_', '-')}"
        lines.append(f"  {clock_time(moment.at)}  {moment.tool:<14} {arrow:<22} {moment.reason}")
    if not timeline:
        lines.append("  (none)")
    if openings(transitions):
        lines += textwrap.wrap(openings_summary(transitions), width=100, subsequent_indent="   ")
    if prompt:
        lines += [
            "",
            "What the model read when the breaker first rejected a call:",
            *(f"  {line}" for line in prompt[1].splitlines()),
            "Tool-status block for the system prompt (OTEL_BREAKER_STATUS_IN_PROMPT=true):",
            *(f"  {line}" for line in prompt[0].splitlines()),
        ]
    if cases:
        lines += ["", *render_cases(cases)]
    if loop_cases:
        lines += ["", *render_loop_cases(loop_cases)]
    if stubborn_cases:
        lines += ["", *render_stubborn_cases(stubborn_cases)]
    return "\n".join(lines)


def render_loop_cases(results: list[LoopResult]) -> list[str]:
    """The loop case: a model repeating an identical invalid call, guard off, reject and stop."""
    off = results[0]
    width = max(len(r.label) for r in results)
    titles = ("model turns", "est. tokens", "saved", "flat est.", "context est.")
    lines = [
        f"What the loop guard saves: a model repeats an identical invalid call (run limit {TURN_LIMIT} calls)",
        f"  {'':<{width}}" + "".join(f"  {t:>12}" for t in titles) + "  outcome",
    ]
    for r in results:
        saved = None if r is off else savings(off, r)
        cells = [f"{r.model_turns:,}", f"{r.model_tokens:,}"]
        cells += ["-"] * 3 if saved is None else [f"{saved[k]:,}" for k in ("measured", "flat", "context")]
        lines.append(f"  {r.label:<{width}}" + "".join(f"  {c:>12}" for c in cells) + f"  {r.outcome}")
    note = (
        "Each model turn re-sends the whole transcript, so repeats cost about N squared tokens. Saved: the "
        "difference measured here; flat est.: calls avoided x 1,500 tokens (the per-call estimate); context est.: "
        "the avoided turns priced at the prompt size the run had reached, growing by one repeat a turn."
    )
    lines.append(textwrap.fill(note, width=100, initial_indent="  ", subsequent_indent="  "))
    return lines


def render_stubborn_cases(results: list[StubbornResult]) -> list[str]:
    """The stubborn model: one run keeps calling a tool whose breaker is open; budget off, hide and stop."""
    off = results[0]
    width = max(len(r.label) for r in results)
    titles = ("model turns", "est. tokens", "saved", "calls")
    lines = [
        f"What the waste budget saves: a model keeps calling an open tool in one run (run limit {TURN_LIMIT} calls)",
        f"  {'':<{width}}" + "".join(f"  {t:>12}" for t in titles) + "  outcome",
    ]
    for r in results:
        saved = "-" if r is off else f"{off.model_tokens - r.model_tokens:,}"
        cells = [f"{r.model_turns:,}", f"{r.model_tokens:,}", saved, f"{r.tool_calls:,}"]
        lines.append(f"  {r.label:<{width}}" + "".join(f"  {c:>12}" for c in cells) + f"  {r.outcome}")
    note = (
        "Each rejection is text the model reads, and a stubborn model calls again every turn. With the budget "
        "(OTEL_BREAKER_RUN_REJECTIONS, default 3) the tool leaves this run's menu (hide) or the run ends (stop); "
        "other runs keep the tool and its breaker."
    )
    lines.append(textwrap.fill(note, width=100, initial_indent="  ", subsequent_indent="  "))
    return lines


def stubborn_cases_json(results: list[StubbornResult]) -> list[dict[str, Any]]:
    off = results[0] if results else None
    return [
        {
            "case": r.key,
            "label": r.label,
            "model_turns": r.model_turns,
            "est_tokens": r.model_tokens,
            "tool_calls": r.tool_calls,
            "rejected": r.rejected,
            "outcome": r.outcome,
            "tokens_saved": None if r is off or off is None else off.model_tokens - r.model_tokens,
        }
        for r in results
    ]


def loop_cases_json(results: list[LoopResult]) -> list[dict[str, Any]]:
    off = results[0] if results else None
    return [
        {
            "case": r.key,
            "label": r.label,
            "model_turns": r.model_turns,
            "est_tokens": r.model_tokens,
            "tool_calls": r.tool_calls,
            "tool_runs": r.ran,
            "rejected": r.rejected,
            "outcome": r.outcome,
            "tokens_saved": None if r is off or off is None else savings(off, r),
        }
        for r in results
    ]


CASE_COLUMNS: list[tuple[str, Callable[[CaseResult, CaseResult], str]]] = [
    ("model turns", lambda r, base: f"{r.model_turns:,}"),
    ("est. tokens", lambda r, base: f"{r.model_tokens:,}"),
    ("vs no breaker", lambda r, base: "-" if r is base else f"{r.model_tokens / base.model_tokens - 1:+.0%}"),
    ("calls rejected", lambda r, base: f"{r.ledger.rejected:,}"),
]


def render_cases(cases: list[CaseResult]) -> list[str]:
    """The four menu cases, compactly, with where their figures come from."""
    base = cases[0]
    width = max(len(r.case.label) for r in cases)
    lines = [
        "What hiding open tools saves: the same questions in four configurations",
        f"  {'':<{width}}" + "".join(f"  {title:>14}" for title, _ in CASE_COLUMNS),
    ]
    for result in cases:
        cells = "".join(f"  {cell(result, base):>14}" for _, cell in CASE_COLUMNS)
        lines.append(f"  {result.case.label:<{width}}{cells}")
    note = (
        "Figures from a scripted model (a fixed policy, described in docs/cli.md), not a language model: "
        "a turn per tool call and per answer. Status block: OTEL_BREAKER_STATUS_IN_PROMPT=true; hidden "
        "tools: OTEL_BREAKER_HIDE_OPEN_TOOLS=true (off by default: a changing tool list defeats prompt caching)."
    )
    lines.append(textwrap.fill(note, width=100, initial_indent="  ", subsequent_indent="  "))
    return lines


def cases_json(cases: list[CaseResult]) -> list[dict[str, Any]]:
    return [
        {
            "case": r.case.key,
            "label": r.case.label,
            "settings": dict(r.case.env),
            "model_turns": r.model_turns,
            "est_tokens": r.model_tokens,
            "tool_calls": r.ledger.attempted,
            "failed": r.ledger.failed,
            "rejected": r.ledger.rejected,
        }
        for r in cases
    ]


def as_json(
    steps: int,
    without: Ledger,
    with_: Ledger,
    timeline: list[Moment],
    transitions: dict,
    cases: list[CaseResult] | None = None,
    loop_cases: list[LoopResult] | None = None,
    stubborn_cases: list[StubbornResult] | None = None,
) -> dict:
    def ledger(x: Ledger) -> dict[str, Any]:
        return {
            "attempted": x.attempted,
            "failed": x.failed,
            "rejected": x.rejected,
            "tokens_spent": x.tokens_spent,
            "tokens_failed": x.tokens_failed,
            "tokens_saved": x.tokens_saved,
            "dead_wait_s": round(x.dead_wait, 3),
            "fallbacks_used": x.fallbacks_used,
            "degraded_reported": x.degraded_reported,
            "session_s": round(x.session_seconds, 3),
        }

    return {
        "steps": steps,
        "tokens_saved_measured": with_.saved_measured,
        "without_breakers": ledger(without),
        "with_breakers": ledger(with_),
        "timeline": [
            {"at_s": m.at, "tool": m.tool, "from": m.from_state, "to": m.to_state, "reason": m.reason} for m in timeline
        ],
        "openings": openings(transitions),
        "reopenings": openings(transitions, "half_open"),
        "menu_cases": cases_json(cases or []),
        "loop_cases": loop_cases_json(loop_cases or []),
        "stubborn_cases": stubborn_cases_json(stubborn_cases or []),
    }


#: The last lines of the demo: from here to the reader's own agent (the README's zero-code line).
NEXT_STEPS = (
    "",
    'Your own agent: install its framework\'s extra from this clone (pip install -e ".[langchain]", or',
    '[openai-agents], [pydantic-ai], [mcp], ...; once released: pip install "otel-breaker[langchain]"), then',
    "  OTEL_BREAKER_ENABLED=true python my_agent.py",
    "Every tool call then passes a breaker, no code changed; `otel-breaker doctor` checks the set-up.",
)


def render_scene(scene: SceneResult) -> str:
    """The second scene in a few lines: what reached the dead host, what the upstream breaker spared."""
    tools = " and ".join(f"'{tool}'" for tool in upstream_scene.TOOLS)
    return "\n".join(
        [
            "",
            f"An upstream goes down: {tools} run behind '{upstream_scene.UPSTREAM}' "
            f"(OTEL_BREAKER_UPSTREAMS), which refuses connections for {scene_down_calls()} of "
            f"{upstream_scene.CALLS} calls.",
            f"  calls that reached the dead host: {scene.reached_dead_host} (one breaker for both tools: "
            f"'upstream:{upstream_scene.UPSTREAM}'); rejected without a round trip: {scene.rejected}; "
            f"answered: {scene.ok}",
        ]
    )


def scene_down_calls() -> int:
    return upstream_scene.DOWN[1] - upstream_scene.DOWN[0]


def scene_json(scene: SceneResult) -> dict[str, Any]:
    return {
        "upstream": upstream_scene.UPSTREAM,
        "tools": list(upstream_scene.TOOLS),
        "calls": scene.calls,
        "host_down_calls": scene_down_calls(),
        "reached_dead_host": scene.reached_dead_host,
        "rejected": scene.rejected,
        "answered": scene.ok,
    }
