"""``OTEL_BREAKER_HIDE_OPEN_TOOLS`` in smolagents beyond the shared contract: the menu
seam is a property of ``ToolCallingAgent`` patched outside the adapter's tool targets,
so ``uninstrument()`` must put that property back too."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

pytest.importorskip("smolagents")


def test_uninstrument_restores_the_menu_property(instrument):
    from smolagents.agents import ToolCallingAgent as Agent

    before = Agent.__dict__["tools_and_managed_agents"]
    instrumentor = instrument("smolagents")
    assert Agent.__dict__["tools_and_managed_agents"] is not before
    instrumentor.uninstrument()
    assert Agent.__dict__["tools_and_managed_agents"] is before
