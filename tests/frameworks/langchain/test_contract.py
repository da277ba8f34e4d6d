"""The shared framework contract, on LangGraph's real ReAct loop (``ToolNode``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("langgraph")
sys.path.insert(0, str(Path(__file__).parent))

from contract import FrameworkContract
from driver import LangChainDriver
from loop_contract import LoopContract
from run_contract import RunContract


class TestContract(FrameworkContract, LoopContract, RunContract):
    driver = LangChainDriver()
