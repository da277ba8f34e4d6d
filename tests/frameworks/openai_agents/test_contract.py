"""The shared framework contract, on the OpenAI Agents SDK's real Runner loop."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("agents")
sys.path.insert(0, str(Path(__file__).parent))

from contract import FrameworkContract
from driver import OpenAIAgentsDriver


class TestContract(FrameworkContract):
    driver = OpenAIAgentsDriver()
