"""The shared framework contract on a CrewAI crew's native function-calling loop."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("crewai")
sys.path.insert(0, str(Path(__file__).parent))

from contract import FrameworkContract
from driver import CrewAIDriver
from loop_contract import LoopContract
from run_contract import RunContract


class TestContract(FrameworkContract, LoopContract, RunContract):
    driver = CrewAIDriver()
    guards_unknown_tools = True
    loop_calls = 4  # CrewAI ends a run at the 5th identical call with the same result
    stops_repeated_failures = "CrewAI ends a run after 5 identical calls with the same result"
