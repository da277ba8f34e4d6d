"""The shared framework contract, on Google ADK's real agent loop."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("google.adk")
sys.path.insert(0, str(Path(__file__).parent))

from contract import FrameworkContract
from driver import ADKDriver
from loop_contract import LoopContract


class TestContract(FrameworkContract, LoopContract):
    driver = ADKDriver()
    sees_invalid_arguments = False  # refused before the patched tool path
