"""The summary's notes on its figures' timing (:mod:`pytest_streamguard.report.timing`): the
client's own read delay, and the streams whose arrival stamps are not the kernel's."""

from __future__ import annotations

from pytest_streamguard.report.records import TestRecord
from pytest_streamguard.report.timing import client_delay_lines, stamp_source_lines
from pytest_streamguard.stream.trace import StreamTrace


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
