"""The shared framework contract, on the OpenAI Agents SDK's real Runner loop."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("agents")
sys.path.insert(0, str(Path(__file__).parent))

from contract import FrameworkContract
from driver import OpenAIAgentsDriver
from loop_contract import LoopContract
from run_contract import RunContract


class TestContract(FrameworkContract, LoopContract, RunContract):
    driver = OpenAIAgentsDriver()
    loop_calls = 8  # the SDK's own max_turns (10) ends a longer run
