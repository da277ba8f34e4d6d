"""CrewAI (1.15): every tool call of a crew, on both of its tool paths.

CrewAI runs a tool two ways, and each has its own facts, so the adapter is a package
with one module per job:

* :mod:`.adapter`: what is patched, how a call is described, what counts as a failure
  and what a rejection looks like on each path;
* :mod:`.actions`: the ReAct text path, where one action of the model is retried up to
  six times and must still be judged as one call;
* :mod:`.arguments`: CrewAI's check of the model's arguments, whose errors are the
  model's mistake rather than the tool's.

The catalogue names ``otel_breaker.instrumentation.crewai:CrewAIAdapter``.
"""

from __future__ import annotations

from otel_breaker.instrumentation.crewai.adapter import CrewAIAdapter

__all__ = ["CrewAIAdapter"]
