"""No import cycle in cronstable: not between two modules, nor between the packages of any
level (``cronstable.config`` and ``cronstable.fingerprint`` importing each other is a
cycle even when no two of their modules do).

The graph is grimp's (the library import-linter runs on): every import of every
module of the package, those inside functions (lazy) and under ``TYPE_CHECKING``
included, since each is an arrow of the design. At each package, every module below
it is counted as the child of that package it lies in; a package's own
``__init__`` is a node of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import grimp
import pytest

PACKAGE = "cronstable"

ALLOWED_CYCLES: frozenset[frozenset[str]] = frozenset()
"""Cycles between packages still allowed: none (the composition root ended the last one,
runtime <-> reporting); no module cycle is allowed either."""


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(PACKAGE, cache_dir=None)


def _cycles(nodes: Iterable[str], edges: Mapping[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(edges.get(successor, ())))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
    return found


def _child(package: str, module: str) -> str | None:
    """The child of ``package`` that ``module`` lies in (``package`` for its __init__)."""
    if module == package:
        return package
    if not module.startswith(package + "."):
        return None
    return f"{package}.{module[len(package) + 1 :].split('.')[0]}"


def _describe(cycle: frozenset[str], arrows: Mapping[tuple[str, str], list[str]]) -> str:
    lines = [" <-> ".join(sorted(cycle))]
    for (a, b), examples in sorted(arrows.items()):
        if a in cycle and b in cycle:
            lines.append(f"    {a} -> {b}: {', '.join(examples[:3])}")
    return "\n".join(lines)


def _package_cycles(graph: grimp.ImportGraph) -> dict[frozenset[str], str]:
    modules = set(graph.modules)
    packages = {m for m in modules if any(o.startswith(m + ".") for o in modules)}
    found: dict[frozenset[str], str] = {}
    for package in sorted(packages):
        edges: dict[str, set[str]] = {}
        arrows: dict[tuple[str, str], list[str]] = {}
        for module in modules:
            a = _child(package, module)
            if a is None:
                continue
            for imported in graph.find_modules_directly_imported_by(module):
                b = _child(package, imported)
                if b is None or b == a:
                    continue
                edges.setdefault(a, set()).add(b)
                arrows.setdefault((a, b), []).append(f"{module} imports {imported}")
        nodes = set(edges) | {b for targets in edges.values() for b in targets}
        for cycle in _cycles(nodes, edges):
            found[cycle] = _describe(cycle, arrows)
    return found


def test_the_cycle_finder_finds_cycles_and_only_them() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert sorted(map(sorted, _cycles("abcdef", edges))) == [["a", "b", "c"], ["d", "e"]]
    assert _cycles("abc", {"a": {"b"}, "b": {"c"}}) == []


def test_no_two_modules_import_each_other_in_a_circle(graph: grimp.ImportGraph) -> None:
    edges = {
        module: {m for m in graph.find_modules_directly_imported_by(module) if m in graph.modules}
        for module in graph.modules
    }
    cycles = _cycles(graph.modules, edges)
    assert not cycles, "module import cycles:\n" + "\n".join(
        " <-> ".join(sorted(c)) for c in cycles
    )


def test_no_packages_import_each_other_in_a_circle(graph: grimp.ImportGraph) -> None:
    found = _package_cycles(graph)
    unexpected = [text for cycle, text in found.items() if cycle not in ALLOWED_CYCLES]
    assert not unexpected, "package import cycles:\n" + "\n".join(unexpected)


def test_every_allowed_cycle_is_still_there(graph: grimp.ImportGraph) -> None:
    """An entry of ALLOWED_CYCLES whose cycle is gone must leave the list (it would hide
    the cycle's return)."""
    gone = ALLOWED_CYCLES - set(_package_cycles(graph))
    assert not gone, (
        f"no longer cycles, remove them from ALLOWED_CYCLES: {sorted(map(sorted, gone))}"
    )


def test_a_snapshot_is_a_leaf_the_loader_reads(graph: grimp.ImportGraph) -> None:
    """Sources build snapshots and config/ loads them: the snapshot imports neither."""
    assert graph.find_modules_directly_imported_by("cronstable.snapshot") == set()
    assert "cronstable.snapshot" in graph.find_modules_directly_imported_by("cronstable.config")
