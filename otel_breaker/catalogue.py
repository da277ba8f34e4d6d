"""The supported frameworks, written once.

Each entry says what otel-breaker knows about a framework before importing
anything of it: its identifier (``OTEL_BREAKER_FRAMEWORKS``), the name people
know it by, the adapter that patches it, the range of versions its adapter is
tested with, the package extra that installs it, the modules whose import means
it is in use, the other names users write for it, and what its test session
installs besides the extra.

Every other place reads this table or is generated from it:

* the start-up hook (``_bootstrap.py``) and ``noxfile.py`` run this file by
  path, so it imports nothing at all, not even ``typing``: the hook runs in
  every Python process of the environment and must not load otel-breaker;
* the settings, the adapters' version check, ``otel-breaker doctor`` and the
  instrumentor's dependencies import it;
* the extras in ``pyproject.toml``, each framework's
  ``tests/frameworks/<id>/requirements.txt`` and the framework tables of
  ``README.md`` and ``docs/frameworks.md`` are written from it by
  ``python tools/catalogue_copies.py --write``; ``tests/test_catalogue.py``
  fails, naming the file, when one of them disagrees.

A framework's test session installs exactly its extra (so the range here is the
range its tests ran with) plus :data:`TEST_SESSION_REQUIREMENTS` and the
entry's own ``test_requirements``.
"""


class Framework:
    """One supported framework (a plain class: a ``NamedTuple`` or a dataclass would
    import ``typing`` or ``dataclasses`` in every process the start-up hook runs in)."""

    __slots__ = (
        "adapter",
        "aliases",
        "extra_requirements",
        "id",
        "imports",
        "requirement",
        "test_requirements",
        "title",
    )

    def __init__(
        self,
        id: str,
        title: str,
        adapter: str,
        requirement: str,
        imports: tuple[str, ...],
        aliases: tuple[str, ...] = (),
        extra_requirements: tuple[str, ...] = (),
        test_requirements: tuple[str, ...] = (),
    ) -> None:
        #: The identifier users name it by (``OTEL_BREAKER_FRAMEWORKS=...``).
        self.id = id
        #: The name people know it by (the docs' tables).
        self.title = title
        #: ``"module:Class"`` of its adapter, loaded only when needed.
        self.adapter = adapter
        #: PEP 508 requirement with the range the adapter is tested with: its test
        #: session installs this very line.
        self.requirement = requirement
        #: Modules whose import means the framework is in use (the lazy start loads
        #: the adapter then; the start-up hook watches the same list). A namespace
        #: package (``google``, ``llama_index``) fires no post-import hook: name the
        #: subpackage.
        self.imports = imports
        #: Other spellings users write (distribution names, the graph layer).
        self.aliases = aliases
        #: What the package extra installs besides :attr:`requirement`.
        self.extra_requirements = extra_requirements
        #: What the test session installs besides the extra and
        #: :data:`TEST_SESSION_REQUIREMENTS` (test helpers, optional companions).
        self.test_requirements = test_requirements

    @property
    def extra(self) -> str:
        """The package extra that installs it (``pip install otel-breaker[<extra>]``)."""
        return self.id.replace("_", "-")

    @property
    def extra_install(self) -> tuple[str, ...]:
        """What the extra installs: the requirement first."""
        return (self.requirement, *self.extra_requirements)

    def __repr__(self) -> str:
        return f"Framework({self.id!r}, requirement={self.requirement!r})"


_ADAPTERS = "otel_breaker.instrumentation."
#: The outcome scenarios fetch pages from a local server with httpx.
_HTTPX = "httpx>=0.27"

CATALOGUE: tuple[Framework, ...] = (
    Framework(
        id="langchain",
        title="LangChain / LangGraph",
        adapter=_ADAPTERS + "langchain:LangChainAdapter",
        requirement="langchain-core>=1.8,<2",
        imports=("langchain_core", "langgraph", "langchain_mcp_adapters"),
        aliases=("langgraph", "langchain-core"),
        extra_requirements=("langgraph>=1.2,<2",),
        # MCP tools in LangChain; 0.3 needs mcp 1.x (mcp 2 renamed the FastMCP module it imports).
        test_requirements=("langchain-mcp-adapters>=0.3.2,<0.4", _HTTPX),
    ),
    Framework(
        id="openai_agents",
        title="OpenAI Agents SDK",
        adapter=_ADAPTERS + "openai_agents:OpenAIAgentsAdapter",
        requirement="openai-agents>=0.24,<0.25",
        imports=("agents",),
        aliases=("openai-agents", "openai_agents_sdk"),
        test_requirements=(_HTTPX,),
    ),
    Framework(
        id="pydantic_ai",
        title="PydanticAI",
        adapter=_ADAPTERS + "pydantic_ai:PydanticAIAdapter",
        requirement="pydantic-ai-slim>=2.68,<3",
        imports=("pydantic_ai",),
        aliases=("pydantic-ai", "pydanticai"),
        # Its MCP toolsets (the range above still applies); Redis for the shared-store scenarios.
        test_requirements=("pydantic-ai-slim[mcp]", "redis>=5", _HTTPX),
    ),
    Framework(
        id="llama_index",
        title="LlamaIndex",
        adapter=_ADAPTERS + "llama_index:LlamaIndexAdapter",
        requirement="llama-index-core>=0.14,<0.15",
        imports=("llama_index.core",),
        aliases=("llama-index", "llamaindex"),
    ),
    Framework(
        id="smolagents",
        title="smolagents",
        adapter=_ADAPTERS + "smolagents:SmolagentsAdapter",
        requirement="smolagents>=1.20,<2",
        imports=("smolagents",),
    ),
    Framework(
        id="crewai",
        title="CrewAI",
        adapter=_ADAPTERS + "crewai:CrewAIAdapter",
        requirement="crewai>=1.15,<2",
        imports=("crewai",),
    ),
    Framework(
        id="autogen",
        title="AutoGen",
        adapter=_ADAPTERS + "autogen:AutoGenAdapter",
        requirement="autogen-core>=0.4,<0.8",
        imports=("autogen_core", "autogen_agentchat"),
        aliases=("autogen-core", "autogen_core"),
        extra_requirements=("autogen-agentchat>=0.4,<0.8",),
        test_requirements=("autogen-ext>=0.4,<0.8",),  # its replaying test model client
    ),
    Framework(
        id="praisonai",
        title="PraisonAI agents",
        adapter=_ADAPTERS + "praisonai:PraisonAIAdapter",
        requirement="praisonaiagents>=1.7,<2",
        imports=("praisonaiagents",),
        aliases=("praisonaiagents", "praison"),
    ),
    Framework(
        id="mcp",
        title="MCP client (`mcp` sessions)",
        adapter=_ADAPTERS + "mcp:MCPAdapter",
        requirement="mcp>=2.3,<3",
        imports=("mcp",),
        # Every event loop; a real MCP server from the package index.
        test_requirements=("trio>=0.25", "uvloop>=0.19; sys_platform != 'win32'", "mcp-server-git>=2026.10.19"),
    ),
    Framework(
        id="agno",
        title="Agno",
        adapter=_ADAPTERS + "agno:AgnoAdapter",
        requirement="agno>=3.1,<3.2",
        imports=("agno",),
        test_requirements=("openai>=1.60",),  # its model classes import the OpenAI client
    ),
    Framework(
        id="dspy",
        title="DSPy",
        adapter=_ADAPTERS + "dspy:DSPyAdapter",
        requirement="dspy>=3.4,<3.5",
        imports=("dspy",),
        aliases=("dspy-ai",),
    ),
    Framework(
        id="haystack",
        title="Haystack",
        adapter=_ADAPTERS + "haystack:HaystackAdapter",
        requirement="haystack-ai>=3.4,<3.5",
        imports=("haystack",),
        aliases=("haystack-ai", "haystack_ai"),
    ),
    Framework(
        id="fastmcp",
        title="FastMCP client",
        adapter=_ADAPTERS + "fastmcp:FastMCPAdapter",
        requirement="fastmcp>=4.1,<4.2",
        imports=("fastmcp",),
    ),
    Framework(
        id="google_adk",
        title="Google ADK",
        adapter=_ADAPTERS + "google_adk:GoogleADKAdapter",
        requirement="google-adk>=2.13,<3",
        imports=("google.adk",),
        aliases=("google-adk", "adk"),
        # Its MCP toolset (the dead-server scenarios).
        test_requirements=("google-adk[mcp]",),
    ),
    Framework(
        id="google_genai",
        title="Google GenAI (automatic function calling)",
        adapter=_ADAPTERS + "google_genai:GoogleGenAIAdapter",
        requirement="google-genai>=3.6,<4",
        imports=("google.genai",),
        aliases=("google-genai",),
    ),
    Framework(
        id="strands",
        title="Strands Agents",
        adapter=_ADAPTERS + "strands:StrandsAdapter",
        requirement="strands-agents>=1.62,<2",
        imports=("strands",),
        aliases=("strands-agents", "strands_agents"),
    ),
    Framework(
        id="agent_framework",
        title="Microsoft Agent Framework",
        adapter=_ADAPTERS + "agent_framework:AgentFrameworkAdapter",
        requirement="agent-framework-core>=1.23,<2",
        imports=("agent_framework",),
        aliases=("agent-framework-core", "microsoft-agent-framework"),
    ),
    Framework(
        id="semantic_kernel",
        title="Semantic Kernel",
        adapter=_ADAPTERS + "semantic_kernel:SemanticKernelAdapter",
        requirement="semantic-kernel>=1.45,<2",
        imports=("semantic_kernel",),
        aliases=("semantic-kernel", "semantickernel"),
    ),
    Framework(
        id="claude_agent_sdk",
        title="Claude Agent SDK",
        adapter=_ADAPTERS + "claude_agent_sdk:ClaudeAgentSDKAdapter",
        requirement="claude-agent-sdk>=0.2.190,<0.3",
        imports=("claude_agent_sdk",),
        aliases=("claude-agent-sdk", "claude"),
        extra_requirements=("mcp>=2.3,<3",),  # the proxy that fronts its external stdio MCP servers
    ),
)

#: Identifier -> entry, in the catalogue's order.
BY_ID: dict[str, Framework] = {framework.id: framework for framework in CATALOGUE}
#: The identifiers, in the catalogue's order.
FRAMEWORK_IDS: tuple[str, ...] = tuple(BY_ID)
#: Alias -> identifier.
ALIASES: dict[str, str] = {alias: framework.id for framework in CATALOGUE for alias in framework.aliases}
#: Every module whose import means a supported framework is in use (what the start-up hook watches).
WATCHED_MODULES: frozenset[str] = frozenset(module for framework in CATALOGUE for module in framework.imports)

#: What every framework's test session installs besides its extra: the zero-code
#: launcher the zero-code tests run the framework under.
TEST_SESSION_REQUIREMENTS: tuple[str, ...] = ("opentelemetry-distro>=0.48b0",)

#: Test sessions that are not one framework's: name -> (the framework whose extra
#: they install, what they add). The MCP proxy runs on the ``mcp`` extra.
OTHER_TEST_SESSIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "mcp_proxy": ("mcp", ("redis>=5", "mcp-server-git>=2026.10.19")),
}


def session_requirements(session: str) -> tuple[str, ...]:
    """What the test session ``session`` (a framework's identifier, or one of
    :data:`OTHER_TEST_SESSIONS`) installs besides otel-breaker and the test runner:
    ``tests/frameworks/<session>/requirements.txt`` holds exactly these lines."""
    if session in OTHER_TEST_SESSIONS:
        framework_id, added = OTHER_TEST_SESSIONS[session]
        return (*BY_ID[framework_id].extra_install, *added)
    framework = BY_ID[session]
    return (*framework.extra_install, *TEST_SESSION_REQUIREMENTS, *framework.test_requirements)


#: Every test session with its own environment, frameworks first (``noxfile.py``'s ``framework`` sessions).
TEST_SESSIONS: tuple[str, ...] = (*FRAMEWORK_IDS, *OTHER_TEST_SESSIONS)
