"""The measured savings of issue 17 (``examples/menu_savings.py``): a scripted model
that uses whatever tools it is offered, a dead primary tool, a healthy backup.

The figures come from a scripted model; what is asserted is their order, which
follows from what each case lets the model avoid: the breaker stops the retries
of a failing tool, the status block stops the first call too, and hiding the
tool also drops its definition and the block from every request.

Tokens of "breaker only" are not asserted below "no breaker": with this script the
breaker saves the retries but its rejection text, longer than the tool's own
error, stays in the conversation and is sent again with every later request."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "menu_savings.py"


@pytest.fixture(scope="module")
def costs():
    spec = importlib.util.spec_from_file_location("menu_savings", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return {case: module.measure(case, turns=6) for case in module.CASES}


def test_model_turns_hidden_le_status_le_breaker_only_lt_none(costs):
    turns = {case: cost.model_turns for case, cost in costs.items()}
    assert (
        turns["breaker + hidden tools"]
        <= turns["breaker + status block"]
        <= turns["breaker only"]
        < turns["no breaker"]
    ), turns


def test_tokens_hidden_le_status_lt_none(costs):
    tokens = {case: cost.tokens for case, cost in costs.items()}
    assert tokens["breaker + hidden tools"] <= tokens["breaker + status block"] < tokens["no breaker"], tokens


def test_the_dead_tool_runs_only_until_its_breaker_opens(costs):
    runs = {case: cost.primary_runs for case, cost in costs.items()}
    assert runs["no breaker"] == 2 * 6  # a call and its retry, every turn
    assert runs["breaker only"] == runs["breaker + status block"] == runs["breaker + hidden tools"] == 3
