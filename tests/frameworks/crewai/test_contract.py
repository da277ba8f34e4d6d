"""The shared framework contract and hidden open tools, on a CrewAI crew's native function-calling loop."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("crewai")
sys.path.insert(0, str(Path(__file__).parent))

from contract import FrameworkContract
from driver import CrewAIDriver
from menu_contract import HiddenToolsContract


class TestContract(FrameworkContract):
    driver = CrewAIDriver()


class TestHiddenTools(HiddenToolsContract):
    driver = CrewAIDriver()
