"""No function of the package is over :data:`FUNCTION_LIMIT` lines and no class over
:data:`CLASS_LIMIT` (a longer one is split into named steps), and no two modules define a class
of one name.

Every module of ``pytest_streamguard`` is parsed with :mod:`ast`, never imported. A definition's
length runs from its ``def``/``class`` line to its last line (``end_lineno - lineno + 1``):
decorators above it are not counted, its docstring, comments and blank lines inside it are.
Nested functions and methods are measured too, and count within their enclosing definition.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "pytest_streamguard"
FUNCTION_LIMIT = 100
CLASS_LIMIT = 300


@dataclass(frozen=True)
class Definition:
    """A function or class of a module and how long it is."""

    kind: str  # "function" or "class"
    name: str  # qualified within its module: Class.method, outer.inner
    line: int
    length: int


def definitions(source: str) -> list[Definition]:
    """Every function (async ones, methods and nested ones included) and class of ``source``,
    in the order they start."""
    found: list[Definition] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                kind = "class" if isinstance(child, ast.ClassDef) else "function"
                assert child.end_lineno is not None
                found.append(
                    Definition(kind, name, child.lineno, child.end_lineno - child.lineno + 1)
                )
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return sorted(found, key=lambda d: d.line)


def over_limit(kind: str, limit: int, root: Path = ROOT) -> list[str]:
    """``path:line name (n lines)`` for each ``kind`` of the package longer than ``limit``."""
    offenders = []
    for path in sorted((root / PACKAGE).rglob("*.py")):
        shown = path.relative_to(root).as_posix()
        for definition in definitions(path.read_text()):
            if definition.kind == kind and definition.length > limit:
                offenders.append(
                    f"{shown}:{definition.line} {definition.name} ({definition.length} lines)"
                )
    return offenders


def test_definitions_are_measured_from_def_to_last_line() -> None:
    source = textwrap.dedent(
        '''\
        import functools


        @functools.cache
        def decorated() -> int:
            """Three lines; the decorator is not counted."""
            return 1


        class Box:
            x = 1

            async def method(self) -> None:
                def inner() -> None:
                    pass

                # a comment counts
                inner()
        '''
    )
    assert definitions(source) == [
        Definition("function", "decorated", 5, 3),
        Definition("class", "Box", 10, 9),
        Definition("function", "Box.method", 13, 6),
        Definition("function", "Box.method.inner", 14, 2),
    ]


def test_over_limit_names_each_long_definition(tmp_path: Path) -> None:
    package = tmp_path / PACKAGE / "sub"
    package.mkdir(parents=True)
    body = "\n".join(["    x = 0"] * 99)
    (package / "long.py").write_text(
        f"def fits():\n{body}\n\n\ndef too_long():\n{body}\n    return x\n"
    )
    assert over_limit("function", FUNCTION_LIMIT, tmp_path) == [
        f"{PACKAGE}/sub/long.py:103 too_long (101 lines)"
    ]
    assert over_limit("class", CLASS_LIMIT, tmp_path) == []


def test_no_function_is_over_the_limit() -> None:
    offenders = over_limit("function", FUNCTION_LIMIT)
    assert not offenders, f"functions over {FUNCTION_LIMIT} lines: split into named steps\n" + (
        "\n".join(offenders)
    )


def test_no_class_is_over_the_limit() -> None:
    offenders = over_limit("class", CLASS_LIMIT)
    assert not offenders, f"classes over {CLASS_LIMIT} lines: split them\n" + "\n".join(offenders)


def shared_class_names(root: Path = ROOT) -> list[str]:
    """``Name: path, path`` for each top-level class name that two modules of the package
    define: one name, one class, wherever a reader or a traceback meets it."""
    where: dict[str, list[str]] = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(path.relative_to(root).as_posix())
    return [
        f"{name}: {', '.join(paths)}" for name, paths in sorted(where.items()) if len(paths) > 1
    ]


def test_shared_class_names_finds_a_name_two_modules_define(tmp_path: Path) -> None:
    package = tmp_path / PACKAGE
    package.mkdir()
    (package / "a.py").write_text("class Settings:\n    pass\n\nclass Only:\n    pass\n")
    (package / "b.py").write_text("class Settings:\n    pass\n")
    assert shared_class_names(tmp_path) == [f"Settings: {PACKAGE}/a.py, {PACKAGE}/b.py"]


def test_no_two_classes_of_the_package_share_a_name() -> None:
    shared = shared_class_names()
    assert not shared, "classes of one name in two modules: rename one\n" + "\n".join(shared)
