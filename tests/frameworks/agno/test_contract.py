"""The shared framework contract, on an Agno Agent's real loop."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("agno")
sys.path.insert(0, str(Path(__file__).parent))

from contract import FrameworkContract
from driver import AgnoDriver
from loop_contract import LoopContract
from run_contract import RunContract


class TestContract(FrameworkContract, LoopContract, RunContract):
    driver = AgnoDriver()
    guards_unknown_tools = True
