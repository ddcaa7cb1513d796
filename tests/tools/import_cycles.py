"""Fail when the project's import graph has a circle (`make lint`): every strongly connected component of
more than one module among agent and cgroupfs is printed. Lazy imports inside functions count too: a
circle through them still makes a module's meaning depend on one above it."""

from __future__ import annotations

import sys

import grimp


def cycles(*packages: str) -> list[list[str]]:
    graph = grimp.build_graph(*packages)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(root: str) -> None:  # Tarjan's algorithm, iterative (the graph is deep enough to matter)
        nonlocal counter
        work: list[tuple[str, list[str]]] = []
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        work.append((root, sorted(graph.find_modules_directly_imported_by(root))))
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.find_modules_directly_imported_by(nxt))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp.append(member)
                    if member == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def main() -> int:
    found = cycles("agent", "cgroupfs")
    for comp in found:
        print(f"import circle of {len(comp)} modules: {', '.join(comp)}", file=sys.stderr)
    if not found:
        graph = grimp.build_graph("agent", "cgroupfs")
        packages = sorted(m.split(".")[1] for m in graph.find_children("agent") if graph.find_children(m))
        print(f"import graph of {len(graph.modules)} modules: no circle (agent: {', '.join(packages)}; cgroupfs)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
