"""The package's structure: every module keeps its private names to itself, and a
module presented as shared really is.

A name with a leading underscore may change with its module alone; another module
reading it (``from otel_breaker.x import _name``, ``thing._name``) ties the two
together silently. What a module offers others is public and documented there.
The only private attributes read across files are the frameworks' own, listed in
:data:`FOREIGN_PRIVATES`, each with a comment where it is read.

A helper module (``shared``, ``common``, ``helpers``, ``utils`` in its name, or a
first docstring line saying it is "shared by" or "used by every" other modules)
with one user belongs in that user.

Each test prints every offending place, one per line.
"""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Iterator
from typing import NamedTuple

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent
PACKAGE_DIR = REPOSITORY / "otel_breaker"
PACKAGE = "otel_breaker"

#: Namedtuple methods and attributes: public API despite the underscore.
NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_make"})

#: Words in a module's name that present it as a helper for several others.
HELPER_NAME_WORDS = ("shared", "common", "helpers", "utils")
#: Words in a module's first docstring line that present it as serving several others.
HELPER_DOC_WORDS = ("shared by", "used by every")


class ForeignPrivate(NamedTuple):
    """A private attribute of a framework's own object that an adapter reads on purpose."""

    framework: str
    reason: str


#: (module path under the package, attribute) -> whose attribute it is and why we read it.
#: Each read carries a comment saying the same where it is made.
FOREIGN_PRIVATES: dict[tuple[str, str], ForeignPrivate] = {
    ("instrumentation/agno.py", "_agent"): ForeignPrivate(
        "agno 3.1 (Function._agent)",
        "the agent a tool was given to, which keys its breaker; Function has no public owner",
    ),
    ("instrumentation/agno.py", "_team"): ForeignPrivate(
        "agno 3.1 (Function._team)",
        "the team a tool was given to, which keys its breaker; Function has no public owner",
    ),
    ("instrumentation/crewai/adapter.py", "_check_tool_repeated_usage"): ForeignPrivate(
        "crewai 1.x (ToolUsage._check_tool_repeated_usage)",
        "CrewAI's own test for a repeated action, which it refuses without running the tool",
    ),
    ("mcp_proxy/eras.py", "_stamp"): ForeignPrivate(
        "mcp 2.x (ClientSession._stamp, the 2026-07-28 era)",
        "the session's per-request envelope and headers for a request the proxy sends by its own route",
    ),
    ("instrumentation/dspy.py", "_validate_and_parse_args"): ForeignPrivate(
        "dspy 3.4 (Tool._validate_and_parse_args)",
        "the argument check Tool runs before its body: a refusal is the model's mistake, not the tool's failure",
    ),
    ("instrumentation/langchain.py", "_convert_input"): ForeignPrivate(
        "langchain-core 1.x (BaseChatModel._convert_input)",
        "the model's own reading of its input (text, prompt value, messages), to insert the status block",
    ),
}


class Module(NamedTuple):
    path: pathlib.Path
    name: str
    tree: ast.Module

    @property
    def where(self) -> str:
        return str(self.path.relative_to(REPOSITORY))

    @property
    def key(self) -> str:
        """The path under the package, as :data:`FOREIGN_PRIVATES` names it."""
        return self.path.relative_to(PACKAGE_DIR).as_posix()


def package_modules() -> list[Module]:
    modules = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = list(path.relative_to(REPOSITORY).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules.append(Module(path, ".".join(parts), ast.parse(path.read_text(encoding="utf-8"), str(path))))
    return modules


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def defined_names(tree: ast.Module) -> set[str]:
    """Every name a module defines or binds anywhere: functions, classes, assigned
    names and attributes, arguments, imports, ``__slots__`` entries. A private name
    among them is the module's own, whatever object it is read on."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__slots__" for target in node.targets
        ):
            for element in ast.walk(node.value):
                if isinstance(element, ast.Constant) and isinstance(element.value, str):
                    names.add(element.value)
    return names


def imported_from(module: Module, node: ast.ImportFrom) -> str:
    """The absolute module name of ``from ... import``, relative forms resolved."""
    if node.level == 0:
        return node.module or ""
    package = module.name.split(".")
    if module.path.name != "__init__.py":
        package.pop()
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def private_imports(module: Module) -> Iterator[str]:
    for node in ast.walk(module.tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        source = imported_from(module, node)
        if source != PACKAGE and not source.startswith(PACKAGE + "."):
            continue
        for alias in node.names:
            if is_private(alias.name):
                yield f"{module.where}:{node.lineno}: from {source} import {alias.name}"


def private_attribute_reads(module: Module, allowed_seen: set[tuple[str, str]]) -> Iterator[str]:
    own = defined_names(module.tree)
    for node in ast.walk(module.tree):
        if not (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)):
            continue
        attribute = node.attr
        if not is_private(attribute) or attribute in own or attribute in NAMEDTUPLE_API:
            continue
        if (module.key, attribute) in FOREIGN_PRIVATES:
            allowed_seen.add((module.key, attribute))
            continue
        reader = "self" if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls") else "<expr>"
        yield f"{module.where}:{node.lineno}: {reader}.{attribute} read, but not defined in this module"


def imported_modules(module: Module, known: set[str]) -> set[str]:
    """The package's modules that ``module`` imports, anywhere in it (lazy imports too)."""
    found: set[str] = set()
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = imported_from(module, node)
            found.add(source)
            found.update(f"{source}.{alias.name}" for alias in node.names)
    return (found & known) - {module.name}


def presents_itself_as_shared(module: Module) -> str | None:
    """What calls ``module`` a helper for others (its name, or its docstring's first line), or None."""
    short_name = module.name.rsplit(".", 1)[-1]
    for word in HELPER_NAME_WORDS:
        if word in short_name:
            return f"its name has {word!r}"
    docstring = ast.get_docstring(module.tree) or ""
    first_line = docstring.strip().splitlines()[0] if docstring.strip() else ""
    for words in HELPER_DOC_WORDS:
        if words in first_line.lower():
            return f"its docstring says {words!r}"
    return None


def report(offences: list[str], what: str) -> None:
    for offence in offences:
        print(offence)
    assert not offences, f"{len(offences)} {what}:\n" + "\n".join(offences)


def test_no_module_imports_another_modules_private_names() -> None:
    offences = [line for module in package_modules() for line in private_imports(module)]
    report(offences, "imports of another module's private names")


def test_no_module_reads_private_attributes_it_does_not_define() -> None:
    allowed_seen: set[tuple[str, str]] = set()
    offences = [line for module in package_modules() for line in private_attribute_reads(module, allowed_seen)]
    for path, attribute in sorted(FOREIGN_PRIVATES.keys() - allowed_seen):
        offences.append(f"otel_breaker/{path}: {attribute} is allowed in FOREIGN_PRIVATES but no longer read there")
    report(offences, "reads of private attributes defined elsewhere")


def test_every_shared_module_has_several_users() -> None:
    modules = package_modules()
    known = {module.name for module in modules}
    users: dict[str, set[str]] = {name: set() for name in known}
    for module in modules:
        for imported in imported_modules(module, known):
            users[imported].add(module.name)
    offences = []
    for module in modules:
        why = presents_itself_as_shared(module)
        if why is not None and len(users[module.name]) < 2:
            importers = ", ".join(sorted(users[module.name])) or "none"
            offences.append(
                f"{module.where}:1: presented as shared ({why}) but imported by "
                f"{len(users[module.name])} other module(s): {importers}"
            )
    report(offences, "shared modules with fewer than two users")


def test_every_foreign_private_names_its_framework_and_reason() -> None:
    """The allow-list says, for each entry, whose internals it reads and why."""
    vague = [
        f"{path} {attribute}"
        for (path, attribute), entry in FOREIGN_PRIVATES.items()
        if not entry.framework.strip() or not entry.reason.strip()
    ]
    report(vague, "allow-list entries without a framework or a reason")


#: The one module that drives the step sequence (``call_steps.steps``): every entrance
#: (``breaker.call``, decorators, ``@guard``, ``Guard.call``, fallback routing, adapters)
#: reaches it through ``CallPath``.
STEP_SEQUENCE_DRIVER = "otel_breaker.call_path"


def test_the_call_path_is_the_only_driver_of_the_step_sequence() -> None:
    offences = []
    for module in package_modules():
        if module.name in (STEP_SEQUENCE_DRIVER, "otel_breaker.call_steps"):
            continue
        for node in ast.walk(module.tree):
            if isinstance(node, ast.ImportFrom) and node.module == "otel_breaker.call_steps":
                for alias in node.names:
                    if alias.name in ("steps", "after_failure"):
                        offences.append(f"{module.where}:{node.lineno}: imports call_steps.{alias.name}")
            if (
                isinstance(node, ast.Attribute)
                and node.attr in ("steps", "after_failure")
                and isinstance(node.value, ast.Name)
                and node.value.id in ("call_steps", "_call_steps")
            ):
                offences.append(f"{module.where}:{node.lineno}: reads call_steps.{node.attr}")
    report(offences, "drivers of the step sequence other than the call path")
