"""The demo's engine: the scripted model's policy, and the four menu cases it measures."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from otel_breaker.breaker import CircuitBreakerConfig
from otel_breaker.config import get_settings, load_settings, set_settings
from otel_breaker.degrade import augment_instructions, tool_status_block
from otel_breaker.registry import default_registry
from otel_breaker.simulation.agent import SYSTEM_PROMPT, Question, ScriptedModel, Turn, turn_tokens
from otel_breaker.simulation.cases import CASES, compare_cases, run_case
from otel_breaker.simulation.runs import run_with_breakers, run_without_breakers
from otel_breaker.simulation.world import (
    BACKUP,
    DEFAULT_STEPS,
    FETCH,
    MAX_ATTEMPTS,
    PRIMARY,
    TOOL_DEFINITION_TOKENS,
    TOOLS,
    outage,
    round_trip_tokens,
)

README = Path(__file__).parent.parent / "README.md"


@pytest.fixture(scope="module")
def results():
    return {r.case.key: r for r in compare_cases(DEFAULT_STEPS)}


# -- the scripted model reads what the library writes --------------------------------------------


def test_the_model_reads_open_tools_from_the_real_status_block(registry_clock):
    registry = default_registry()
    registry.get(PRIMARY, CircuitBreakerConfig(recovery_timeout=30, fallbacks=(BACKUP,))).force_open(30)
    registry.get(BACKUP).force_open(30)
    block = tool_status_block()
    assert ScriptedModel.listed_open(f"{SYSTEM_PROMPT}\n\n{block}") == {PRIMARY, BACKUP}
    registry_clock.advance(31)  # past the cooldown: half-open, "one trial call may be made now"
    block = tool_status_block()
    assert "(half-open)" in block
    assert ScriptedModel.listed_open(f"{SYSTEM_PROMPT}\n\n{block}") == frozenset()
    assert ScriptedModel.listed_open(SYSTEM_PROMPT) == frozenset()


def test_the_model_uses_whatever_it_is_offered_and_avoids_what_the_block_lists_open():
    model = ScriptedModel()
    assert model.next_action(Turn(TOOLS, SYSTEM_PROMPT), Question()) == PRIMARY
    assert model.next_action(Turn((BACKUP, FETCH), SYSTEM_PROMPT), Question()) == BACKUP
    block = f"{SYSTEM_PROMPT}\n\nTool status (circuit breakers):\n- '{PRIMARY}' (open): may be retried in about 9s."
    assert model.next_action(Turn(TOOLS, block), Question()) == BACKUP
    assert model.next_action(Turn(TOOLS, SYSTEM_PROMPT), Question(given_up={PRIMARY, BACKUP})) is None
    assert model.next_action(Turn(TOOLS, SYSTEM_PROMPT), Question(found=True)) == FETCH
    assert model.next_action(Turn((PRIMARY, BACKUP), SYSTEM_PROMPT), Question(found=True)) is None


def test_a_turn_costs_the_status_block_and_saves_hidden_definitions(registry_clock):
    set_settings(load_settings({"OTEL_BREAKER_STATUS_IN_PROMPT": "true"}))
    default_registry().get(PRIMARY).force_open(30)
    prompt = augment_instructions(SYSTEM_PROMPT)
    base_in, base_out = round_trip_tokens(7)
    with_block = turn_tokens(7, Turn(TOOLS, prompt))
    assert with_block[1] == base_out
    assert with_block[0] - base_in == pytest.approx((len(prompt) - len(SYSTEM_PROMPT)) / 4, abs=1)
    assert turn_tokens(7, Turn((BACKUP, FETCH), SYSTEM_PROMPT)) == (base_in - TOOL_DEFINITION_TOKENS, base_out)
    assert turn_tokens(7, Turn(TOOLS, SYSTEM_PROMPT)) == (base_in, base_out)


# -- the four cases ---------------------------------------------------------------------------------


def test_without_a_breaker_the_turns_follow_from_the_script(results):
    first, last = outage(DEFAULT_STEPS)
    dead = last - first + 1
    healthy_turns = 3  # search, fetch, answer
    dead_turns = MAX_ATTEMPTS + 3  # every attempt at the dead tool, then the backup, fetch, answer
    expected = (DEFAULT_STEPS - dead) * healthy_turns + dead * dead_turns
    assert results["no_breaker"].model_turns == expected
    tokens = 0
    for step in range(DEFAULT_STEPS):
        turns = dead_turns if first <= step + 1 <= last else healthy_turns
        tokens += turns * sum(round_trip_tokens(step))
    assert results["no_breaker"].model_tokens == tokens


def test_the_first_two_cases_are_the_demos_two_runs(results):
    without = run_without_breakers(DEFAULT_STEPS, lambda step: None)
    with_ = run_with_breakers(DEFAULT_STEPS, lambda step: None, [], [])
    for ledger, case in ((without, "no_breaker"), (with_, "breaker")):
        measured = results[case].ledger
        assert (measured.attempted, measured.failed, measured.rejected) == (
            ledger.attempted,
            ledger.failed,
            ledger.rejected,
        )
        assert measured.model_turns == ledger.attempted + DEFAULT_STEPS  # each tool call, each answer


@pytest.mark.parametrize("steps", [12, DEFAULT_STEPS, 150])
def test_hiding_costs_least_and_no_breaker_most(steps):
    cost = {r.case.key: r for r in compare_cases(steps)}
    for measure in ("model_turns", "model_tokens"):
        hidden, status, breaker, none = (
            getattr(cost[k], measure) for k in ("hidden", "status", "breaker", "no_breaker")
        )
        assert hidden <= status <= breaker < none, (measure, hidden, status, breaker, none)


def test_a_rejected_call_is_a_turn_the_status_block_and_hiding_save(results):
    assert results["breaker"].ledger.rejected > 0
    assert results["status"].ledger.rejected == 0
    assert results["hidden"].ledger.rejected == 0
    # the status block itself costs tokens: same turns as hiding, more tokens
    assert results["status"].model_turns == results["hidden"].model_turns
    assert results["status"].model_tokens > results["hidden"].model_tokens


def test_the_hidden_case_never_offers_the_open_tool(results):
    menus = results["hidden"].ledger.menus
    while_open = [menu for menu, opened in menus if PRIMARY in opened]
    assert while_open, "the primary never opened: nothing was tested"
    assert all(PRIMARY not in menu for menu in while_open)
    assert all(BACKUP in menu and FETCH in menu for menu in while_open)
    # it comes back at half-open: the model probed it and it closed again
    assert results["hidden"].ledger.failed > MAX_ATTEMPTS
    assert menus[-1][0] == TOOLS


def test_without_the_switch_the_menu_never_changes(results):
    for key in ("no_breaker", "breaker", "status"):
        menus = results[key].ledger.menus
        assert menus and all(menu == TOOLS for menu, _opened in menus)
    assert any(PRIMARY in opened for _menu, opened in results["breaker"].ledger.menus)


def test_a_case_puts_back_the_settings_and_store_it_found():
    settings = get_settings()
    store = default_registry().store
    for case in CASES:
        run_case(case, 12)
        assert get_settings() is settings
        assert default_registry().store is store
        assert default_registry().breakers() == []


def test_the_readme_table_is_what_the_demo_computes(results):
    text = README.read_text(encoding="utf-8")
    section = text.split("## What hiding open tools saves", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and re.fullmatch(r"[\d,]+", cells[1]):
            rows[cells[0]] = cells[1:]
    base = results["no_breaker"].model_tokens
    assert len(rows) == len(CASES)
    for case in CASES:
        (label,) = [label for label in rows if label.split(" (")[0] == case.label]
        turns, tokens, change = rows[label]
        result = results[case.key]
        assert (turns, tokens) == (f"{result.model_turns:,}", f"{result.model_tokens:,}"), label
        expected = "-" if case.key == "no_breaker" else f"{result.model_tokens / base - 1:+.0%}"
        assert change == expected, label


# -- the loop case ---------------------------------------------------------------------------------


def test_the_loop_case_guard_off_reject_and_stop():
    from otel_breaker.simulation.loop_case import TURN_LIMIT, compare_loop_cases, savings
    from otel_breaker.tokens import repeated_turns_tokens

    off, reject, stop = compare_loop_cases()
    assert (off.model_turns, off.ran, off.rejected) == (TURN_LIMIT, TURN_LIMIT, 0)
    assert off.outcome.startswith("turn limit")
    # reject: three errors, the loop message on the 4th identical call, a corrected call, the answer
    assert (reject.model_turns, reject.ran, reject.rejected, reject.outcome) == (6, 4, 1, "answered")
    # stop: three errors, then ToolLoopError on the 4th identical call
    assert (stop.model_turns, stop.ran) == (4, 3) and "ToolLoopError" in stop.outcome
    # every turn re-sends a transcript that only grows
    assert all(b > a for a, b in zip(off.prompts, off.prompts[1:], strict=False))
    for guarded in (reject, stop):
        saved = savings(off, guarded)
        assert saved["measured"] == off.model_tokens - guarded.model_tokens > 0
        assert saved["flat"] < saved["measured"]  # a flat per-call estimate misses the context growth
    assert savings(off, stop)["context"] == savings(off, stop)["measured"]  # stop's turns are a prefix of off's
    assert repeated_turns_tokens(100, 10, 3, 5) == 3 * 105 + 10 * 3
    assert repeated_turns_tokens(-1, -1, -1) == 0


def test_the_readme_loop_table_is_what_the_code_computes():
    import pathlib

    from otel_breaker.simulation.loop_case import compare_loop_cases, savings

    readme = (pathlib.Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    off, reject, stop = compare_loop_cases()
    assert f"| off | {off.model_turns} | {off.model_tokens:,} | - | - | - |" in readme
    for label, result in (("`reject` (default)", reject), ("`stop`", stop)):
        saved = savings(off, result)
        row = (
            f"| {label} | {result.model_turns} | {result.model_tokens:,} | {saved['measured']:,} | "
            f"{saved['flat']:,} | {saved['context']:,} |"
        )
        assert row in readme, row


# -- the stubborn model ----------------------------------------------------------------------------


def test_the_stubborn_model_budget_off_hide_and_stop():
    from otel_breaker.simulation.loop_case import TURN_LIMIT
    from otel_breaker.simulation.stubborn_case import compare_stubborn_cases

    off, hide, stop = compare_stubborn_cases()
    # off: every call of the open tool is rejected, until the run's own limit; no answer
    assert (off.model_turns, off.tool_calls, off.rejected) == (TURN_LIMIT, TURN_LIMIT, TURN_LIMIT)
    assert off.outcome.startswith("turn limit")
    # hide: three rejections, the 4th call spends the budget, the tool leaves the menu, the model answers
    assert (hide.tool_calls, hide.model_turns, hide.outcome) == (4, 5, "answered without the tool")
    # stop: the 4th call ends the run
    assert (stop.tool_calls, stop.model_turns) == (4, 4) and "RunBudgetError" in stop.outcome
    assert off.model_tokens > hide.model_tokens > stop.model_tokens


def test_the_readme_stubborn_table_is_what_the_code_computes():
    import pathlib

    from otel_breaker.simulation.stubborn_case import compare_stubborn_cases

    readme = (pathlib.Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    off, hide, stop = compare_stubborn_cases()
    assert f"| off | {off.model_turns} | {off.model_tokens:,} | - | {off.tool_calls} |" in readme
    for label, result in (("`hide` (default)", hide), ("`stop`", stop)):
        row = (
            f"| {label} | {result.model_turns} | {result.model_tokens:,} | "
            f"{off.model_tokens - result.model_tokens:,} | {result.tool_calls} |"
        )
        assert row in readme, row
