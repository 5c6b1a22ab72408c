"""Options of the project's own test suite (not of the plugin)."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--fuzz-scale``: how many times the CI default of requests the fuzz and storm tests send."""
    parser.addoption(
        "--fuzz-scale",
        type=float,
        default=1.0,
        help="Multiply the number of requests each fuzz and storm test sends "
        "(default 1: a few thousand in all, as CI runs them)",
    )


@pytest.fixture
def fuzz_scale(request: pytest.FixtureRequest) -> float:
    """How many times the CI default of requests a fuzz or storm test sends (--fuzz-scale)."""
    return float(request.config.getoption("--fuzz-scale"))


@pytest.fixture(autouse=True)
def _no_inherited_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inner pytest runs write their streamguard summary as to a log, one row per test.

    The plugin fits that summary to the terminal when it knows the width (a terminal, or
    ``COLUMNS``); pytest-xdist sets ``COLUMNS`` in its workers, so without this an inner run's
    layout would depend on whether the suite runs in parallel. A test about the width sets
    ``COLUMNS`` itself.
    """
    monkeypatch.delenv("COLUMNS", raising=False)
