"""A ``fail_on`` gate that could not be checked says so: each finding's needs, and the words
a test's record and its failure give (:mod:`pytest_streamguard.verdict.findings.gates`)."""

from __future__ import annotations

from test_finding_patterns import MS, every_50_ms, make, probed

from pytest_streamguard.errors import FindingsUnchecked
from pytest_streamguard.report.records import TestRecord, unchecked_lines
from pytest_streamguard.stream.trace import FaultRecord
from pytest_streamguard.verdict.findings import Unchecked, findings_unchecked, unchecked_gates


def reasons(found: list[Unchecked]) -> dict[str, str]:
    return {u.finding: u.reason for u in found}


def test_every_gate_is_unchecked_without_a_stream() -> None:
    found = unchecked_gates(["buffered", "idle_cut"], [], None, gauges=None)
    assert reasons(found) == {
        "buffered": "the test read no stream",
        "idle_cut": "the test read no stream",
    }


def test_not_cancelled_needs_the_gauges_of_a_target_the_plugin_started() -> None:
    traces = [make("stream 1", 0, [10, 20, 30])]
    by_url = reasons(unchecked_gates(["not_cancelled"], traces, None, gauges=None))
    assert by_url["not_cancelled"].startswith("the plugin did not start the target")
    bare = reasons(unchecked_gates(["not_cancelled"], traces, None, gauges=False))
    assert bare["not_cancelled"] == (
        "the target exports no streamguard_target_engine_requests and "
        "streamguard_target_active_streams gauges at /metrics"
    )
    assert unchecked_gates(["not_cancelled"], traces, None, gauges=True) == []


def test_backpressure_needs_a_throttle_and_the_servers_send_stamps() -> None:
    plain = make("stream 1", 0, [10, 20, 30])
    (none,) = unchecked_gates(["backpressure"], [plain], None, gauges=None)
    assert none.reason.startswith("no bandwidth or slow_reader fault throttled a stream")
    throttled = make("stream 1", 0, [10, 20, 30])
    throttled.faults = [
        FaultRecord("bandwidth", {"kb_per_second": 2}, [], on_ns=0, off_ns=100 * MS)
    ]
    (unstamped,) = unchecked_gates(["backpressure"], [throttled], None, gauges=None)
    assert unstamped.reason.startswith("the target's events carry no send stamps (sent_ns)")
    for chunk in throttled.chunks:
        chunk.data = {"sent_ns": chunk.stamp_ns}
    assert unchecked_gates(["backpressure"], [throttled], None, gauges=None) == []


def test_group_findings_need_streams_read_together_and_queued_the_probe() -> None:
    one = [make("stream 1", 0, [10, 20, 30])]
    found = reasons(
        unchecked_gates(["blocked_loop", "cold_start", "buffered"], one, None, gauges=None)
    )
    assert found == {
        "blocked_loop": "it is read across at least 3 streams; the test read 1",
        "cold_start": "it is read across at least 3 streams; the test read 1",
    }
    four = [make(f"stream {k}", 0, [10, 20, 30]) for k in range(4)]
    (off,) = unchecked_gates(["queued"], four, None, gauges=None)
    assert off.reason == "the probe was off: it needs the answers of the target's own loop"
    (tcp,) = unchecked_gates(["queued"], four, probed(every_50_ms(100), kind="tcp"), gauges=None)
    assert tcp.reason.startswith("the probe was a TCP connect")
    assert (
        unchecked_gates(["queued", "blocked_loop"], four, probed(every_50_ms(100)), gauges=None)
        == []
    )


def test_the_record_the_summary_and_the_failure_say_not_checked() -> None:
    gate = Unchecked("not_cancelled", "the plugin did not start the target")
    record = TestRecord("test_x.py::test_gated", None, unchecked=[gate])
    assert TestRecord.from_dict(record.to_dict()).unchecked == [gate]
    assert record.to_dict()["unchecked"] == [
        {"finding": "not_cancelled", "reason": "the plugin did not start the target"}
    ]
    assert unchecked_lines([record], fail=False) == [
        "1 fail_on gate could not be checked (--streamguard-unchecked fail fails them):",
        "  test_x.py::test_gated: not checked: not_cancelled (the plugin did not start the target)",
    ]
    failure = findings_unchecked([gate])
    assert isinstance(failure, FindingsUnchecked)
    assert failure.unchecked == [gate]
    assert str(failure).split("\n")[:2] == [
        "streamguard could not check the finding(s) this test fails on (fail_on): not_cancelled",
        "  not checked: not_cancelled (the plugin did not start the target)",
    ]
