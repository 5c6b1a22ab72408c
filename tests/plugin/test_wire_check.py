"""The request stamp against a packet capture (issue 28): 10 direct streams of a load and one
``stream()`` under tcpdump.

``benchmarks/wire.py --check`` captures loopback traffic while the load reads 10 streams, then
while the single-stream client reads one, and fails unless every trace's request stamp is after
its connection's SYN (a stamp taken before the connect, when the stream's coroutine starts,
fails here) and within 20 ms of the request's last byte on the wire, each stream matched to its
connection by the client's local port (a client that does not name its connection fails). It
needs tcpdump and root (``make system-deps`` installs tcpdump); without them it fails and says so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from pytest_streamguard.plugin.session import client_delay_lines, stamp_source_lines
from pytest_streamguard.report.records import TestRecord
from pytest_streamguard.stream.trace import StreamTrace

ROOT = Path(__file__).resolve().parents[2]


def test_request_stamp_is_after_connect_and_on_the_wire() -> None:
    assert shutil.which("tcpdump") or Path("/usr/bin/tcpdump").exists(), (
        "tcpdump not found: install it (apt-get install tcpdump; make system-deps does)"
    )
    assert os.geteuid() == 0, "the wire check captures on lo with tcpdump, which needs root"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "wire.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _record(read_delays_ms: list[float]) -> TestRecord:
    trace = StreamTrace(name="s", method="POST", url="http://x", format="raw", request_ns=0)
    trace.read_delay_ns = [int(d * 1e6) for d in read_delays_ms]
    return TestRecord(nodeid="t.py::t", deadline=None, traces=[trace])


def test_summary_warns_when_the_clients_read_delay_passes_1_ms_p99() -> None:
    assert client_delay_lines([_record([0.1] * 200)]) == []
    assert client_delay_lines([_record([])]) == []
    (line,) = client_delay_lines([_record([0.1] * 90 + [2.5] * 10)])
    assert "2.5 ms at p99, over 1 ms" in line


def test_summary_says_which_streams_are_not_stamped_by_the_kernel() -> None:
    def record(*sources: str | None) -> TestRecord:
        traces = []
        for source in sources:
            trace = StreamTrace(name="s", method="POST", url="http://x", format="raw", request_ns=0)
            trace.stamps = source
            traces.append(trace)
        return TestRecord(nodeid="t.py::t", deadline=None, traces=traces)

    assert stamp_source_lines([record("kernel", "kernel", None)]) == []
    lines = stamp_source_lines([record("kernel", "client", "client"), record("loop")])
    assert lines == [
        "note: 2 streams stamped when the client took the bytes (https, read by httpx's own "
        "transport), not at the kernel's receive stamp: their figures include the client's own "
        "delay",
        "note: 1 stream stamped when the event loop read the bytes (no kernel receive stamp on "
        "this platform), not at the kernel's receive stamp: their figures include the client's "
        "own delay",
    ]
