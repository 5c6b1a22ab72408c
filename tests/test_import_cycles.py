"""No two modules of the project import each other, directly or round a longer circle, and the
plugin's families import only down their layers (:data:`LAYERS`).

Every module of the three programs (``pytest_streamguard``, ``target_app``, ``benchmarks``)
is parsed with :mod:`ast`, never imported, so an import under ``if TYPE_CHECKING:`` or inside
a function counts like any other: hiding a circle there does not dissolve it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pytest_streamguard", "target_app")
# benchmarks/ is a folder of scripts run as ``python benchmarks/run.py``: its files import each
# other as top-level modules (``import proxy_overhead``).
SCRIPT_DIRS = ("benchmarks",)


def project_modules(
    root: Path = ROOT, packages: tuple[str, ...] = PACKAGES, scripts: tuple[str, ...] = SCRIPT_DIRS
) -> dict[str, Path]:
    """Every module under ``root`` by dotted name (a package by its own name)."""
    modules: dict[str, Path] = {}
    for top in (*packages, *scripts):
        for path in sorted((root / top).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _absolute(module: str, path: Path, level: int, name: str | None) -> str:
    """The absolute dotted name of ``from <level dots><name> import ...`` in ``module``."""
    package = module.split(".") if _is_package(path) else module.split(".")[:-1]
    if level > 1:
        package = package[: len(package) - (level - 1)]
    return ".".join([*package, *([name] if name else [])])


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules that ``module`` imports anywhere in its source."""
    top = module.split(".")[0]
    # A folder of scripts has no __init__.py: its files import their siblings by bare name.
    scripts = top not in modules
    found: set[str] = set()

    def add(name: str) -> None:
        # ``import a.b.c`` names a.b.c; a name inside a module (``from a.b import func``) names
        # the module that holds it.
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name
                if scripts and f"{top}.{name}" in modules:
                    name = f"{top}.{name}"
                add(name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _absolute(module, path, node.level, node.module)
            elif scripts and f"{top}.{node.module}" in modules:
                base = f"{top}.{node.module}"
            else:
                base = node.module or ""
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                add(submodule if submodule in modules else base)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports."""
    modules = project_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def describe(graph: dict[str, set[str]]) -> list[str]:
    """One line per pair that imports each other, and per longer circle no pair explains."""
    lines: list[str] = []
    for component in circles(graph):
        members = set(component)
        pairs = [
            (a, b)
            for a in component
            for b in component
            if a < b and b in graph[a] and a in graph[b]
        ]
        lines.extend(f"{a} <-> {b}" for a, b in pairs)
        # Drop the pairs' back edges; whatever still circles is a longer cycle of its own.
        rest = {
            a: {b for b in graph[a] & members if (min(a, b), max(a, b)) not in pairs}
            for a in component
        }
        lines.extend(" -> ".join(c) + " (circle)" for c in circles(rest))
    return lines


def test_the_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    files = {
        "pkg/__init__.py": "from pkg.a import thing\n",
        "pkg/a.py": "import pkg.sub.b\nthing = 1\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/b.py": (
            "from typing import TYPE_CHECKING\n"
            "from .. import a\n"
            "from . import c\n"
            "if TYPE_CHECKING:\n    from pkg.sub.c import X\n"
        ),
        "pkg/sub/c.py": "def f():\n    from ..a import thing\n    import json\n",
        "bench/run.py": "import helper\nfrom helper import g\n",
        "bench/helper.py": "import os\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    modules = project_modules(tmp_path, ("pkg",), ("bench",))
    graph = {n: imports_of(n, p, modules) for n, p in modules.items()}
    assert graph == {
        "pkg": {"pkg.a"},
        "pkg.a": {"pkg.sub.b"},
        "pkg.sub": set(),
        "pkg.sub.b": {"pkg.a", "pkg.sub.c"},
        "pkg.sub.c": {"pkg.a"},
        "bench.run": {"bench.helper"},
        "bench.helper": set(),
    }


def test_describe_names_pairs_and_longer_circles() -> None:
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert describe(graph) == ["a <-> b", "c -> d -> e (circle)"]


def fail_listing(title: str, found: list[str]) -> None:
    """Fail with ``title`` and one indented line per finding, when there is any."""
    if found:
        pytest.fail(title + ":\n" + "\n".join(f"  {line}" for line in found), pytrace=False)


def test_no_two_modules_import_each_other() -> None:
    fail_listing(
        "modules that import each other (move the shared piece where it belongs)",
        describe(import_graph()),
    )


#: The plugin's families from the bottom up: a family imports only families on a lower row
#: (two on one row import neither each other). The bottom row is the shared helpers any family
#: may import; the pytest glue is on top. The embedded Toxiproxy server is a program of its own:
#: it may use the stream formats (to count events) and the errors, and nothing imports it.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"errors", "common"}),
    frozenset({"formats", "verdict"}),
    frozenset({"stream"}),
    frozenset({"judge"}),
    frozenset({"load", "services"}),
    frozenset({"faults"}),
    frozenset({"headroom"}),
    frozenset({"guard"}),
    frozenset({"report"}),
    frozenset({"plugin"}),
)
PROGRAM_APART = "toxiproxy_server"
PROGRAM_APART_USES = frozenset({"formats", "errors", "common"})
PACKAGE = "pytest_streamguard"


def family(module: str) -> str | None:
    """The family of a plugin module (``pytest_streamguard.stream.client`` -> ``stream``); None
    for the package's own ``__init__`` (the public surface, which may import any family)."""
    parts = module.split(".")
    return parts[1] if parts[0] == PACKAGE and len(parts) > 1 else None


def wrong_way(graph: dict[str, set[str]]) -> list[str]:
    """Each import between two families that does not run down the layers."""
    row = {name: index for index, names in enumerate(LAYERS) for name in names}
    found = []
    for module, imported in sorted(graph.items()):
        here = family(module)
        if here is None:
            continue
        for other in sorted(imported):
            there = family(other)
            if there is None or there == here:
                continue
            if here == PROGRAM_APART:
                allowed = there in PROGRAM_APART_USES
            else:
                allowed = there in row and here in row and row[there] < row[here]
            if not allowed:
                found.append(f"{module} -> {other}")
    return found


def test_every_family_has_a_layer() -> None:
    families = {family(m) for m in project_modules() if family(m) is not None}
    placed = set().union(*LAYERS) | {PROGRAM_APART}
    assert families == placed


def test_wrong_way_names_an_import_up_and_one_across_a_row() -> None:
    graph = {
        f"{PACKAGE}.stream.client": {f"{PACKAGE}.plugin.settings"},
        f"{PACKAGE}.verdict.findings": {f"{PACKAGE}.formats.base", f"{PACKAGE}.common.names"},
        f"{PACKAGE}.toxiproxy_server.events": {f"{PACKAGE}.formats", f"{PACKAGE}.stream.trace"},
        f"{PACKAGE}.plugin.session": {f"{PACKAGE}.guard", f"{PACKAGE}.plugin.markers"},
    }
    assert wrong_way(graph) == [
        f"{PACKAGE}.stream.client -> {PACKAGE}.plugin.settings",
        f"{PACKAGE}.toxiproxy_server.events -> {PACKAGE}.stream.trace",
        f"{PACKAGE}.verdict.findings -> {PACKAGE}.formats.base",
    ]


def test_families_import_only_downward() -> None:
    # Function-level and TYPE_CHECKING imports are in the graph too (see the module docstring).
    fail_listing(
        "imports that run up or across the layers (move the shared piece down)",
        wrong_way(import_graph()),
    )
