"""The report tests' shared fixture: one real plugin run that writes the JSON and HTML reports.

The run is a separate ``python -m pytest`` process (what ``pytester.runpytest_subprocess``
does), made once per session so the browser and CLI tests share it: the plugin starts the
example app (``examples/stream_app.py``) by command and its embedded Toxiproxy server, and
the inner tests pass, break a deadline under a stall, get cut, and run a small load.
"""

from __future__ import annotations

import pytest
from report_helpers import ReportRun, run_inner


@pytest.fixture(scope="session")
def report_run(tmp_path_factory: pytest.TempPathFactory) -> ReportRun:
    """One real ``pytest --streamguard --streamguard-json ... --streamguard-html ...`` run."""
    return run_inner(tmp_path_factory.mktemp("report_run"))
