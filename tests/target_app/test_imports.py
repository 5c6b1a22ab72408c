"""The target's modules form no import cycle (function-level imports included)."""

from __future__ import annotations

import ast
from pathlib import Path

import target_app

PACKAGE = Path(target_app.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    target = node.module or ""
                candidates = [target, *(f"{target}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                candidates = [alias.name for alias in node.names]
            else:
                continue
            edges[name] |= {c for c in candidates if c in modules and c != name}
    return edges


def test_no_module_of_the_target_imports_one_that_imports_it_back() -> None:
    edges = _imports()
    assert "target_app.state" in edges["target_app.responses"]
    cycles: list[list[str]] = []
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        for imported in sorted(edges[module]):
            if imported in path:
                cycles.append([*path[path.index(imported) :], imported])
            elif imported not in done:
                visit(imported, [*path, imported])
        done.add(module)

    for module in sorted(edges):
        if module not in done:
            visit(module, [module])
    assert not cycles, cycles
