"""An import-linter contract type for the repository's lint (not shipped in the package).

``acyclic``: no import cycle anywhere in the package, whichever way the modules
are nested. import-linter's own ``acyclic_siblings`` finds cycles between
siblings; a cycle that runs through a package's ``__init__`` and one of its own
modules (``pkg`` imports ``pkg.a`` lazily, ``pkg.a`` imports ``pkg``) has no two
siblings in it, so this contract looks at the whole graph instead. grimp's
graph holds every import statement, so lazy (function-level) and
type-checking imports count too. The one upward import the package declares (the
state machine reaching the call path, ``breaker.py``) is named in each contract's
``ignore_imports`` in ``pyproject.toml``.
"""

from __future__ import annotations

import grimp
from importlinter.application import contract_utils, output
from importlinter.application.contract_utils import AlertLevel
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


class AcyclicContract(Contract):
    """No module reaches itself through the imports of the root package."""

    type_name = "acyclic"

    ignore_imports = fields.SetField(subfield=fields.ImportExpressionField(), required=False)
    unmatched_ignore_imports_alerting = fields.EnumField(AlertLevel, default=AlertLevel.ERROR)

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        removal = contract_utils.remove_ignored_imports_and_report(
            graph=graph,
            ignore_imports=self.ignore_imports,  # type: ignore[arg-type]
            unmatched_alerting=self.unmatched_ignore_imports_alerting,  # type: ignore[arg-type]
        )
        cycles = [_a_cycle(graph, component) for component in _components(graph)]
        return ContractCheck(
            kept=not cycles,
            warnings=list(removal.warnings),
            ignored_import_count=removal.ignored_import_count,
            metadata={"cycles": cycles},
        )

    def render_broken_contract(self, check: ContractCheck) -> None:
        for cycle in check.metadata["cycles"]:
            output.print_error("Import cycle: " + " -> ".join(cycle))
            output.new_line()


def _components(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[module] = min(low[module], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _a_cycle(graph: grimp.ImportGraph, component: list[str]) -> list[str]:
    """One cycle through the first module of ``component``, as the chain of modules."""
    first = component[0]
    members = set(component)
    for imported in sorted(graph.find_modules_directly_imported_by(first) & members):
        chain = graph.find_shortest_chain(importer=imported, imported=first)
        if chain:
            return [first, *chain]
    return component
