"""The shared framework contract on AutoGen's real ``AssistantAgent`` loop."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("autogen_agentchat")
sys.path.insert(0, str(Path(__file__).parent))

from contract import FrameworkContract
from driver import AutoGenDriver
from loop_contract import LoopContract


class TestContract(FrameworkContract, LoopContract):
    driver = AutoGenDriver()
    stop_not_reaching = "the run does not end: AutoGen's agent runtime does not pass a BaseException on"
