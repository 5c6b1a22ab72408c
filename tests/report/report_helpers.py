"""Shared by the report tests: the inner test file of the real run, and what the run left."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STREAM_APP = Path(__file__).resolve().parents[2] / "examples" / "stream_app.py"
RUN_TIMEOUT = 180
# A parametrize id with markup and an ampersand: the report must show it, not render it.
MARKUP_ID = "<b>bold</b>&amp"

# Test order is report order. The passing tests' deadlines are far above what they take (0.2 s
# to the first token, 0.05 s gaps), so they pass on a busy machine and under xdist; the stall
# (0.45 s against 0.2 s) and the cut fail whatever the load.
INNER_TESTS = f"""
import asyncio

import pytest


@pytest.mark.token_deadline(ttft=0.5, chunk=0.2)
def test_stall_breaks_chunk_deadline(streamguard):
    streamguard.faults.stall(after_chunks=3, seconds=0.45)
    streamguard.stream(json={{"max_new_tokens": 10, "interval_s": 0.03}})


@pytest.mark.token_deadline(ttft=2.0, chunk=1.0)
@pytest.mark.parametrize("label", ["x"], ids=[{MARKUP_ID!r}])
def test_passes_with_heartbeats(streamguard, label):
    trace = streamguard.stream(
        json={{"max_new_tokens": 8, "interval_s": 0.03, "first_token_s": 0.2, "heartbeat_s": 0.05}}
    )
    assert trace.completed
    assert trace.heartbeats >= 2


@pytest.mark.token_deadline(ttft=0.5, chunk=0.2)
def test_cut_mid_stream(streamguard):
    streamguard.faults.cut(after_bytes=300)
    trace = streamguard.stream(json={{"max_new_tokens": 20, "interval_s": 0.02}})
    assert not trace.completed


@pytest.mark.asyncio
@pytest.mark.token_deadline(ttft=2.0, chunk=1.0)
async def test_load_under_latency(streamguard):
    streamguard.faults.latency(20, jitter=10)
    traces = await asyncio.gather(
        *(streamguard.astream(json={{"max_new_tokens": 12, "interval_s": 0.02}}) for _ in range(5))
    )
    assert all(t.completed for t in traces)
"""
INNER_INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"


@dataclass(frozen=True)
class ReportRun:
    """What the inner run left behind."""

    path: Path
    result: subprocess.CompletedProcess[str]
    json_path: Path
    html_path: Path

    @property
    def document(self) -> dict[str, Any]:
        """The JSON report."""
        raw: dict[str, Any] = json.loads(self.json_path.read_text(encoding="utf-8"))
        return raw

    @property
    def html(self) -> str:
        """The HTML report's text."""
        return self.html_path.read_text(encoding="utf-8")


def run_inner(path: Path, *args: str) -> ReportRun:
    """Run :data:`INNER_TESTS` in ``path`` with the plugin on, writing both reports."""
    (path / "pytest.ini").write_text(INNER_INI, encoding="utf-8")
    (path / "test_report_inner.py").write_text(INNER_TESTS, encoding="utf-8")
    # The app sits in the run's rootdir, so the report (and docs/report.png) shows it relative.
    shutil.copy(STREAM_APP, path / "stream_app.py")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--streamguard",
            "--streamguard-target-cmd",
            f"{sys.executable} stream_app.py --port {{port}}",
            "--streamguard-json",
            "out/streamguard.json",
            "--streamguard-html",
            "out/streamguard.html",
            *args,
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
