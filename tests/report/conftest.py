"""The report tests' shared fixture: one real plugin run that writes the JSON and HTML reports.

The run is a separate ``python -m pytest`` process (what ``pytester.runpytest_subprocess``
does), made once per session so the browser and CLI tests share it: the plugin starts the
example app (``examples/stream_app.py``) by command and its embedded Toxiproxy server, and
the inner tests pass, break a deadline under a stall, get cut, and run a small load.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from report_helpers import INNER_INI, INNER_TESTS, RUN_TIMEOUT, STREAM_APP, ReportRun


@pytest.fixture(scope="session")
def report_run(tmp_path_factory: pytest.TempPathFactory) -> ReportRun:
    """One real ``pytest --streamguard --streamguard-json ... --streamguard-html ...`` run."""
    path = tmp_path_factory.mktemp("report_run")
    (path / "pytest.ini").write_text(INNER_INI, encoding="utf-8")
    (path / "test_report_inner.py").write_text(INNER_TESTS, encoding="utf-8")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--streamguard",
            "--streamguard-target-cmd",
            f"{sys.executable} {STREAM_APP} --port {{port}}",
            "--streamguard-json",
            "out/streamguard.json",
            "--streamguard-html",
            "out/streamguard.html",
        ],
        cwd=path,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    return ReportRun(
        path=path,
        result=result,
        json_path=path / "out" / "streamguard.json",
        html_path=path / "out" / "streamguard.html",
    )
