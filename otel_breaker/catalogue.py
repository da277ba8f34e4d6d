"""The supported frameworks, written once.

Each entry says what otel-breaker knows about a framework before importing
anything of it: its identifier (``OTEL_BREAKER_FRAMEWORKS``), the adapter that
patches it, the requirement its adapter was tested with (the version check,
``otel-breaker doctor`` and the instrumentor's dependencies read it), the
package extra that installs it, the modules whose import means it is in use,
and the other names users write for it.

Everything else derives from this table or is checked against it by one test
(``tests/test_catalogue.py``): the start-up hook's list of watched modules (kept
as a literal there, because that hook imports nothing of otel-breaker), and the
extras in ``pyproject.toml``. Stdlib only, and no imports of otel-breaker: the
settings, the adapters and the command line all read it.
"""

from __future__ import annotations

from typing import NamedTuple


class Framework(NamedTuple):
    """One supported framework."""

    #: The identifier users name it by (``OTEL_BREAKER_FRAMEWORKS=...``).
    id: str
    #: ``"module:Class"`` of its adapter, loaded only when needed.
    adapter: str
    #: PEP 508 requirement with the range the adapter was tested with.
    requirement: str
    #: Top-level modules whose import means the framework is in use (the lazy
    #: start loads the adapter then; the start-up hook watches the same list).
    imports: tuple[str, ...]
    #: Other spellings users write (distribution names, the graph layer).
    aliases: tuple[str, ...] = ()
    #: What the package extra installs besides :attr:`requirement`.
    extra_requirements: tuple[str, ...] = ()

    @property
    def extra(self) -> str:
        """The package extra that installs it (``pip install otel-breaker[<extra>]``)."""
        return self.id.replace("_", "-")


_ADAPTERS = "otel_breaker.instrumentation."

CATALOGUE: tuple[Framework, ...] = (
    Framework(
        "langchain",
        _ADAPTERS + "langchain:LangChainAdapter",
        "langchain-core>=1.0,<2",
        ("langchain_core", "langgraph", "langchain_mcp_adapters"),
        ("langgraph", "langchain-core"),
        ("langgraph>=1.0,<2",),
    ),
    Framework(
        "openai_agents",
        _ADAPTERS + "openai_agents:OpenAIAgentsAdapter",
        "openai-agents>=0.24,<0.25",
        ("agents",),
        ("openai-agents", "openai_agents_sdk"),
    ),
    Framework(
        "pydantic_ai",
        _ADAPTERS + "pydantic_ai:PydanticAIAdapter",
        "pydantic-ai-slim>=2.68,<3",
        ("pydantic_ai",),
        ("pydantic-ai", "pydanticai"),
    ),
    Framework(
        "llama_index",
        _ADAPTERS + "llama_index:LlamaIndexAdapter",
        "llama-index-core>=0.14,<0.15",
        # "llama_index" is a namespace package: no post-import hook fires for it.
        ("llama_index.core",),
        ("llama-index", "llamaindex"),
    ),
    Framework("smolagents", _ADAPTERS + "smolagents:SmolagentsAdapter", "smolagents>=1.20,<2", ("smolagents",)),
    Framework("crewai", _ADAPTERS + "crewai:CrewAIAdapter", "crewai>=1.15,<2", ("crewai",)),
    Framework(
        "autogen",
        _ADAPTERS + "autogen:AutoGenAdapter",
        "autogen-core>=0.4,<0.8",
        ("autogen_core", "autogen_agentchat"),
        ("autogen-core", "autogen_core"),
        ("autogen-agentchat>=0.4,<0.8",),
    ),
    Framework(
        "praisonai",
        _ADAPTERS + "praisonai:PraisonAIAdapter",
        "praisonaiagents>=1.7,<2",
        ("praisonaiagents",),
        ("praisonaiagents", "praison"),
    ),
    Framework("mcp", _ADAPTERS + "mcp:MCPAdapter", "mcp>=2.3,<3", ("mcp",)),
    Framework("agno", _ADAPTERS + "agno:AgnoAdapter", "agno>=3.1,<3.2", ("agno",)),
    Framework("dspy", _ADAPTERS + "dspy:DSPyAdapter", "dspy>=3.4,<3.5", ("dspy",), ("dspy-ai",)),
    Framework(
        "haystack",
        _ADAPTERS + "haystack:HaystackAdapter",
        "haystack-ai>=3.4,<3.5",
        ("haystack",),
        ("haystack-ai", "haystack_ai"),
    ),
    Framework("fastmcp", _ADAPTERS + "fastmcp:FastMCPAdapter", "fastmcp>=4.1,<4.2", ("fastmcp",)),
    Framework(
        "google_adk",
        _ADAPTERS + "google_adk:GoogleADKAdapter",
        "google-adk>=2.13,<3",
        ("google.adk",),
        ("google-adk", "adk"),
    ),
    Framework(
        "google_genai",
        _ADAPTERS + "google_genai:GoogleGenAIAdapter",
        "google-genai>=3.6,<4",
        ("google.genai",),
        ("google-genai",),
    ),
    Framework(
        "strands",
        _ADAPTERS + "strands:StrandsAdapter",
        "strands-agents>=1.62,<2",
        ("strands",),
        ("strands-agents", "strands_agents"),
    ),
    Framework(
        "agent_framework",
        _ADAPTERS + "agent_framework:AgentFrameworkAdapter",
        "agent-framework-core>=1.23,<2",
        ("agent_framework",),
        ("agent-framework-core", "microsoft-agent-framework"),
    ),
    Framework(
        "semantic_kernel",
        _ADAPTERS + "semantic_kernel:SemanticKernelAdapter",
        "semantic-kernel>=1.45,<2",
        ("semantic_kernel",),
        ("semantic-kernel", "semantickernel"),
    ),
    Framework(
        "claude_agent_sdk",
        _ADAPTERS + "claude_agent_sdk:ClaudeAgentSDKAdapter",
        "claude-agent-sdk>=0.2.190,<0.3",
        ("claude_agent_sdk",),
        ("claude-agent-sdk", "claude"),
        ("mcp>=2.3,<3",),  # the proxy that fronts its external stdio MCP servers
    ),
)

#: Identifier -> entry, in the catalogue's order.
BY_ID: dict[str, Framework] = {framework.id: framework for framework in CATALOGUE}
#: The identifiers, in the catalogue's order.
FRAMEWORK_IDS: tuple[str, ...] = tuple(BY_ID)
#: Alias -> identifier.
ALIASES: dict[str, str] = {alias: framework.id for framework in CATALOGUE for alias in framework.aliases}
