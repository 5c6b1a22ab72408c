"""Installed but off, the plugin imports nothing heavy (a correctness test; the timing is in
benchmarks/run.py's table)."""

from __future__ import annotations

import json

import pytest

HEAVY = (
    "httpx",
    "httpcore",
    "h11",
    "requests",
    "toxiproxy",
    "prometheus_client",
    "plotly",
    "starlette",
    "uvicorn",
    "pytest_streamguard.plugin.fixtures",
    "pytest_streamguard.plugin.session",
    "pytest_streamguard.plugin.runtime",
    "pytest_streamguard.guard",
    "pytest_streamguard.services.app",
    "pytest_streamguard.faults.toxiproxy_client",
)

DUMP_MODULES = """
import json, sys

def pytest_unconfigure(config):
    with open("modules.json", "w") as f:
        json.dump(sorted(sys.modules), f)
"""


def _modules(pytester: pytest.Pytester, *args: str, **outcomes: int) -> set[str]:
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
    result.assert_outcomes(**outcomes)
    return set(json.loads((pytester.path / "modules.json").read_text()))


def test_plugin_off_imports_no_heavy_module(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(DUMP_MODULES)
    pytester.makepyfile(
        "def test_plain():\n    assert True\n\ndef test_uses_plugin(streamguard):\n    pass\n"
    )
    # Off, the plugin's fixture exists and the test using it is skipped.
    off = _modules(pytester, passed=1, skipped=1)
    assert "pytest_streamguard.plugin" in off
    assert "pytest_streamguard.plugin.off" in off
    loaded = sorted(name for name in off if name.split(".")[0] in HEAVY or name in HEAVY)
    assert loaded == []
    # What the plugin adds over a run without it: only its own light modules.
    # Without the plugin that fixture is missing: an error.
    added = off - _modules(pytester, "-p", "no:streamguard", passed=1, errors=1)
    assert {name.split(".")[0] for name in added} == {"pytest_streamguard"}, sorted(added)
    assert sorted(added) == [
        "pytest_streamguard",
        "pytest_streamguard.common",
        "pytest_streamguard.common.defaults",
        "pytest_streamguard.common.display",
        "pytest_streamguard.common.names",
        "pytest_streamguard.plugin",
        "pytest_streamguard.plugin.off",
        "pytest_streamguard.plugin.settings",
        "pytest_streamguard.report",
        "pytest_streamguard.report.bounds",
        "pytest_streamguard.services",
        "pytest_streamguard.services.stack_spec",
    ]


def test_plugin_on_loads_its_runtime(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(DUMP_MODULES)
    pytester.makepyfile("def test_plain():\n    assert True\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--streamguard")
    result.assert_outcomes(passed=1)
    on = set(json.loads((pytester.path / "modules.json").read_text()))
    assert {
        "pytest_streamguard.plugin.runtime",
        "pytest_streamguard.plugin.fixtures",
        "toxiproxy",
    } <= on
