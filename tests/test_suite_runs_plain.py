"""Every test runs on one process as well as on xdist workers: ``make demo`` runs the
resilience suite without xdist, with ``--junitxml``, and ``make test`` (what CI runs) on xdist
workers, whose JUnit XML the controller writes.

pytest's ``record_property`` and ``record_xml_attribute`` fixtures warn under the default
``xunit2`` JUnit family whenever the JUnit XML is written in the test's own process, and
``filterwarnings = error`` makes that warning an error: the capacity test asked for
``record_property``, and ``make demo`` failed at its setup while CI's xdist run passed. A test
adds to the XML through ``request.node.user_properties``, as the plugin's figures do.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from plugin_helpers import IMPORTED_AT_COLLECTION

TESTS = Path(__file__).resolve().parent
WARN_UNDER_XUNIT2 = frozenset({"record_property", "record_xml_attribute"})


def asked_for(source: str) -> list[tuple[int, str]]:
    """The (line, fixture) of every function of ``source`` whose parameters name a fixture of
    :data:`WARN_UNDER_XUNIT2`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                if arg.arg in WARN_UNDER_XUNIT2:
                    found.append((node.lineno, arg.arg))
    return found


def test_asked_for_finds_a_test_that_takes_record_property() -> None:
    source = "def test_a(streamguard, record_property):\n    pass\n\n" + (
        "async def test_b(*, record_xml_attribute):\n    pass\n\ndef test_c(request):\n    pass\n"
    )
    assert asked_for(source) == [(1, "record_property"), (4, "record_xml_attribute")]


def test_no_test_asks_for_a_fixture_that_warns_under_xunit2() -> None:
    found = [
        f"{path.relative_to(TESTS)}:{line} asks for {name}"
        for path in sorted(TESTS.rglob("*.py"))
        for line, name in asked_for(path.read_text(encoding="utf-8"))
    ]
    assert found == [], found


def conftest_imports(source: str) -> list[int]:
    """The lines of ``source`` that import the module ``conftest``."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if (isinstance(node, ast.ImportFrom) and node.module == "conftest")
        or (isinstance(node, ast.Import) and any(a.name == "conftest" for a in node.names))
    ]


def test_no_test_module_imports_a_conftest() -> None:
    # Which conftest.py is the module `conftest` depends on the paths pytest was given (the last
    # one imported wins): `pytest tests/resilience tests/target_app` broke the files that took
    # a name from their own; shared names live in a helper module of a name of its own.
    assert conftest_imports("from conftest import X\nimport os, conftest\n") == [1, 2]
    found = {
        str(path.relative_to(TESTS)): lines
        for path in sorted(TESTS.rglob("*.py"))
        if (lines := conftest_imports(path.read_text(encoding="utf-8")))
    }
    assert found == {}


def test_collecting_the_suite_imports_no_heavy_library(request: pytest.FixtureRequest) -> None:
    # Each xdist worker collects every module: torch, transformers or an SDK imported at a
    # module's top cost each of them seconds of CPU (6.2 s a worker's collection, 1.8 s without).
    assert request.config.stash[IMPORTED_AT_COLLECTION] == []
