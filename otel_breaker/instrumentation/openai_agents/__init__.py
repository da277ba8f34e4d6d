"""Breakers for the OpenAI Agents SDK (``openai-agents``; private names, so the range is pinned).

The SDK has much to say, so the adapter is a package with one module per job:

* :mod:`.adapter`: what is patched, how a call is described, the rejection, the status
  block and the menu;
* :mod:`.failures`: the SDK turns a tool's exception into text inside the guarded call,
  so its failure formatter is where the failure is seen and noted;
* :mod:`.mcp_tools`: which MCP server an MCP function tool calls.

The catalogue names ``otel_breaker.instrumentation.openai_agents:OpenAIAgentsAdapter``.
"""

from __future__ import annotations

from otel_breaker.instrumentation.openai_agents.adapter import OpenAIAgentsAdapter

__all__ = ["OpenAIAgentsAdapter"]
