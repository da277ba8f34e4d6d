"""The shared framework contract on praisonaiagents' real async loop."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("praisonaiagents")
sys.path.insert(0, str(Path(__file__).parent))

from contract import FrameworkContract
from driver import PraisonAIDriver
from loop_contract import LoopContract
from run_contract import RunContract


class TestContract(FrameworkContract, LoopContract, RunContract):
    driver = PraisonAIDriver()
    guards_unknown_tools = True
    invalid_arguments = {"y": 1}  # noqa: RUF012 - the async path binds names, it checks no types
    loop_calls = 7  # praisonaiagents halts a run after 8 tool calls without progress
    stops_repeated_failures = "PraisonAI's own circuit breaker ends repeated tool failures"
