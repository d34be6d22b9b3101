"""The import graph of ``src/episodestream``, read with ``ast``: layers, purity, no cycles.

Every module is parsed (never imported); every ``import`` and ``from ... import`` anywhere in
it counts, at module level, inside functions and under ``if TYPE_CHECKING:`` alike, with
relative imports resolved against the importing module. ``from package import name`` counts as
an edge to ``package.name`` where that is a module, else to ``package``.

Three rules, each failing with the offending edges named as ``importer -> imported`` (file and
line):

- layers import only downward (``LAYER_RANKS``, the table of docs/ARCHITECTURE.md);
- ``mp4`` and ``sampling`` import nothing that does I/O or starts threads (``IMPURE_MODULES``);
- no two modules import each other, directly or through others.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = "episodestream"
SOURCE_ROOT = Path(__file__).resolve().parents[2] / "src"
PACKAGE_ROOT = SOURCE_ROOT / PACKAGE

# A layer may import its own modules and any layer of a lower rank; several layers may share a
# rank when none imports another (``check``, ``integrations``, ``plan``); ``cli`` is on top.
# The benchmark, server and synthetic writer are another distribution (tools/), which
# tests/integration/test_packages.py holds to the core's public names. The root modules
# (errors, the checking, closing and frozen-value helpers, and ``helpers``, their public
# face) lie below every layer.
LAYER_RANKS: dict[str, int] = {
    "errors": 0,
    "_checks": 0,
    "_closing": 0,
    "_frozen": 0,
    "helpers": 0,
    "mp4": 1,
    "storage": 2,
    "lerobot": 3,
    "manifest": 4,
    "cache": 5,
    "decode": 6,
    "sampling": 7,
    "datasets": 8,
    "check": 9,
    "integrations": 9,
    "plan": 9,
    "cli": 10,
}
# The package root re-exports the public names of every layer.
ROOT_MODULE = PACKAGE
# Ranks whose members may import each other: the root modules (the checking helpers raise
# the errors); every other rank imports strictly downward.
SHARED_RANKS = frozenset({0})

PURE_LAYERS = ("mp4", "sampling")
# Standard modules (and their submodules) that open sockets, start threads or processes.
IMPURE_MODULES = (
    "threading",
    "_thread",
    "socket",
    "ssl",
    "select",
    "selectors",
    "asyncio",
    "concurrent",
    "multiprocessing",
    "subprocess",
    "urllib",
    "http",
    "requests",
    "fsspec",
)


@dataclass(frozen=True, slots=True)
class Edge:
    importer: str
    imported: str
    path: Path
    line: int

    def __str__(self) -> str:
        where = self.path.relative_to(SOURCE_ROOT.parent)
        return f"{self.importer} -> {self.imported} ({where}:{self.line})"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SOURCE_ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE_ROOT.rglob("*.py"))}


def _resolve_relative(importer: str, is_package: bool, level: int, target: str | None) -> str:
    base = importer.split(".")
    if not is_package:
        base.pop()
    for _ in range(level - 1):
        base.pop()
    return ".".join([*base, *([target] if target else [])])


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[Edge]:
    """Every module ``name`` imports (standard, third-party and our own), with its line."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    edges: list[Edge] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            edges.extend(Edge(name, alias.name, path, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                target = _resolve_relative(name, is_package, node.level, node.module)
            else:
                target = node.module or ""
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                imported = submodule if submodule in modules else target
                edges.append(Edge(name, imported, path, node.lineno))
    return edges


def import_graph() -> tuple[dict[str, Path], list[Edge]]:
    modules = source_modules()
    edges = [edge for name, path in modules.items() for edge in imports_of(name, path, modules)]
    return modules, edges


def layer_of(module: str) -> str | None:
    """The layer (top-level part under the package) of one of our modules, else None."""
    parts = module.split(".")
    if parts[0] != PACKAGE:
        return None
    if len(parts) == 1:
        return ROOT_MODULE
    return parts[1]


def layer_violation(edge: Edge) -> str | None:
    """Why ``edge`` breaks the layering, or None where it is allowed."""
    source, target = layer_of(edge.importer), layer_of(edge.imported)
    if target is None or source == target:
        return None
    if source == ROOT_MODULE:
        return None  # the package root re-exports every layer
    if target == ROOT_MODULE:
        return "imports the package root, which imports every layer"
    if source not in LAYER_RANKS:
        return f"layer {source!r} is not in LAYER_RANKS: add it to the table"
    if target not in LAYER_RANKS:
        return f"layer {target!r} is not in LAYER_RANKS: add it to the table"
    source_rank, target_rank = LAYER_RANKS[source], LAYER_RANKS[target]
    if target_rank < source_rank:
        return None
    if source_rank == target_rank and source_rank in SHARED_RANKS:
        return None
    return (
        f"{source!r} (rank {source_rank}) imports {target!r} (rank {target_rank}): "
        "upward or sideways"
    )


def layering_violations(edges: list[Edge]) -> list[str]:
    found = []
    for edge in edges:
        why = layer_violation(edge)
        if why is not None:
            found.append(f"{edge}: {why}")
    return found


def purity_violations(edges: list[Edge]) -> list[str]:
    found = []
    for edge in edges:
        if layer_of(edge.importer) not in PURE_LAYERS:
            continue
        top = edge.imported.split(".")[0]
        if top in IMPURE_MODULES:
            found.append(f"{edge}: pure layer {layer_of(edge.importer)!r} imports {top!r}")
    return found


def find_cycles(modules: dict[str, Path], edges: list[Edge]) -> list[list[Edge]]:
    """One cycle per strongly connected group of our modules (Tarjan), as its edges in order."""
    graph: dict[str, dict[str, Edge]] = {name: {} for name in modules}
    for edge in edges:
        if edge.imported in modules and edge.imported != edge.importer:
            # A package's __init__ importing its own modules is how a package exports; a module
            # importing its own package's __init__ is the edge that can close a cycle.
            graph[edge.importer].setdefault(edge.imported, edge)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    groups: list[list[str]] = []
    counter = 0

    def connect(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return [_cycle_in(graph, sorted(group)) for group in groups]


def _cycle_in(graph: dict[str, dict[str, Edge]], group: list[str]) -> list[Edge]:
    """A shortest path from the group's first module back to itself, inside the group."""
    members = set(group)
    start = group[0]
    came: dict[str, Edge] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt, edge in sorted(graph[node].items()):
                if nxt not in members or nxt in came:
                    continue
                came[nxt] = edge
                if nxt == start:
                    path = [edge]
                    while path[0].importer != start:
                        path.insert(0, came[path[0].importer])
                    return path
                following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle through {start} in {group}")  # Tarjan says there is one


def cycle_report(cycles: list[list[Edge]]) -> list[str]:
    return ["\n    ".join(["cycle:", *map(str, cycle)]) for cycle in cycles]


@pytest.fixture(scope="module")
def graph() -> tuple[dict[str, Path], list[Edge]]:
    return import_graph()


def test_every_layer_is_ranked(graph: tuple[dict[str, Path], list[Edge]]) -> None:
    modules, _ = graph
    layers = {layer_of(name) for name in modules} - {ROOT_MODULE}
    unranked = sorted(layer for layer in layers if layer not in LAYER_RANKS)
    assert not unranked, f"layers missing from LAYER_RANKS (docs/ARCHITECTURE.md): {unranked}"


def test_layers_import_only_downward(graph: tuple[dict[str, Path], list[Edge]]) -> None:
    _, edges = graph
    violations = layering_violations(edges)
    assert not violations, "imports against the layering:\n  " + "\n  ".join(violations)


def test_pure_layers_import_no_io_or_threads(graph: tuple[dict[str, Path], list[Edge]]) -> None:
    _, edges = graph
    violations = purity_violations(edges)
    assert not violations, "I/O or threads in a pure layer:\n  " + "\n  ".join(violations)


def test_no_import_cycles(graph: tuple[dict[str, Path], list[Edge]]) -> None:
    modules, edges = graph
    cycles = find_cycles(modules, edges)
    assert not cycles, "import cycles:\n  " + "\n  ".join(cycle_report(cycles))


# The rules themselves, on small graphs: each must name the edge it refuses.


def _edge(importer: str, imported: str) -> Edge:
    return Edge(importer, imported, PACKAGE_ROOT / "x.py", 1)


def test_an_upward_import_is_named() -> None:
    upward = _edge("episodestream.mp4._clip", "episodestream.storage._base")
    assert layer_violation(upward) is not None
    (message,) = layering_violations([upward])
    assert "episodestream.mp4._clip -> episodestream.storage._base" in message
    assert layer_violation(_edge("episodestream.cache._cache", "episodestream.storage")) is None
    assert (
        layer_violation(_edge("episodestream.check._check", "episodestream.integrations"))
        is not None
    )
    assert layer_violation(_edge("episodestream.cli._plan", "episodestream.plan")) is None
    assert layer_violation(_edge("episodestream.storage._base", "episodestream")) is not None


def test_an_impure_import_is_named() -> None:
    (message,) = purity_violations(
        [
            _edge("episodestream.sampling._pool", "concurrent.futures"),
            _edge("episodestream.cache._cache", "threading"),
        ]
    )
    assert "episodestream.sampling._pool -> concurrent.futures" in message


def test_a_cycle_is_named() -> None:
    modules = {name: PACKAGE_ROOT for name in ("a", "b", "c", "d")}
    edges = [_edge("a", "b"), _edge("b", "c"), _edge("c", "a"), _edge("c", "d")]
    (cycle,) = find_cycles(modules, edges)
    assert [(edge.importer, edge.imported) for edge in cycle] == [
        ("a", "b"),
        ("b", "c"),
        ("c", "a"),
    ]
    assert find_cycles(modules, edges[1:]) == []


def test_relative_and_nested_imports_are_read(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text(
        "from . import _sibling\nfrom .._up import thing\n"
        "def f():\n    import threading\n    from .deeper import x\n",
        encoding="utf-8",
    )
    modules = {"episodestream.layer._sibling": source}
    found = [edge.imported for edge in imports_of("episodestream.layer.mod", source, modules)]
    assert found == [
        "episodestream.layer._sibling",
        "episodestream._up",
        "threading",
        "episodestream.layer.deeper",
    ]
