"""The streamguard column of pytest-html's results table.

pytest-html (4.x) builds its table from fixed columns (result, test, duration, links) and shows
no ``user_properties``, so the figures the plugin gives the JUnit XML (``streamguard_ttft_s``,
``streamguard_max_gap_s``, ``streamguard_verdict``, ``streamguard_profile``) never appeared
there. These hooks add a column with them, one ``name: value`` line each; they are optional
hooks, so a run without pytest-html ignores them.
"""

from __future__ import annotations

import html

import pytest

__all__ = ["pytest_html_results_table_header", "pytest_html_results_table_row"]

_PREFIX = "streamguard_"


@pytest.hookimpl(optionalhook=True)
def pytest_html_results_table_header(cells: list[str]) -> None:
    """Add the streamguard column's header after the test's id."""
    cells.insert(2, '<th class="col-streamguard">streamguard</th>')


@pytest.hookimpl(optionalhook=True)
def pytest_html_results_table_row(report: pytest.TestReport, cells: list[str]) -> None:
    """Fill the streamguard column with the test's figures (empty for a phase without them)."""
    shown = [
        f"{html.escape(name)}: {html.escape(str(value))}"
        for name, value in report.user_properties
        if name.startswith(_PREFIX)
    ]
    cells.insert(2, f'<td class="col-streamguard">{"<br>".join(shown)}</td>')
