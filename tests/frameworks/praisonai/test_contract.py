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


class TestContract(FrameworkContract, LoopContract):
    driver = PraisonAIDriver()
    sees_invalid_arguments = False  # refused before the patched tool path
    stops_repeated_failures = "PraisonAI's own circuit breaker ends repeated tool failures"
