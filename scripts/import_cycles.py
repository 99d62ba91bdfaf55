"""List the import circles of our packages; exit 1 if there is one (run by `make lint`).

import-linter's `layers` contracts forbid arrows between layers, not circles inside one layer
(two modules of the same floor importing each other). This finds every circle with grimp,
import-linter's own graph library, imports under ``TYPE_CHECKING`` included: a circle hidden
from the interpreter is still one concern split in the wrong place.

    PYTHONPATH=agent:operator:localcluster .venv/bin/python scripts/import_cycles.py
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping

import grimp

PACKAGES = ("elasticjob_agent", "elasticjob_operator", "elasticjob_localcluster")


def strongly_connected(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (no recursion limit): the components of more than one
    module, or of one module importing itself, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(edges.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, pending = work[-1]
            if pending:
                nxt = pending.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(edges.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in edges.get(node, ()):
                    found.append(sorted(component))
    return sorted(found)


def main() -> int:
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    circles = strongly_connected(edges)
    for circle in circles:
        print(f"import circle of {len(circle)} modules:")
        for module in circle:
            inside = sorted(edges[module] & set(circle))
            print(f"  {module} -> {', '.join(inside)}")
    print(f"{len(circles)} import circle(s) in {', '.join(PACKAGES)}")
    return 1 if circles else 0


if __name__ == "__main__":
    sys.exit(main())
