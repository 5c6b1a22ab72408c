"""What the servers said, in a test's record: a passing test keeps no line, but keeps the
``server_error`` its lines showed, through the JSON report and back (as under pytest-xdist,
where the controller reads the workers' records)."""

from __future__ import annotations

from pytest_streamguard import StreamTrace, TestRecord
from pytest_streamguard.verdict.findings.said import Said


def _trace(said: list[Said]) -> StreamTrace:
    trace = StreamTrace(
        name="stream 1",
        method="POST",
        url="http://h/v1",
        format="openai",
        request_ns=0,
        end_ns=10,
        completed=False,
        error_kind="cut",
        said=said,
    )
    return trace


def test_a_frozen_server_error_survives_without_its_lines() -> None:
    empty = Said("model", 5, "_queue.Empty", "engines/incident.py:77 in body", error=True)
    record = TestRecord(nodeid="t.py::test_a", deadline=None, traces=[_trace([empty])])
    (found,) = [f for f in record.findings if f.name == "server_error"]
    assert found.hop == "model"
    assert "_queue.Empty" in found.evidence
    # What recording does for a passing test: the finding is kept, the lines are not.
    record.server_findings.append(found)
    record.traces[0].said = []
    assert [f.name for f in record.findings].count("server_error") == 1
    back = TestRecord.from_dict(record.to_dict())
    assert [f.describe() for f in back.findings if f.name == "server_error"] == [found.describe()]


def test_a_failed_tests_server_error_is_read_again_from_its_lines_once() -> None:
    empty = Said("model", 5, "_queue.Empty", "engines/incident.py:77 in body", error=True)
    record = TestRecord(nodeid="t.py::test_a", deadline=None, traces=[_trace([empty])])
    back = TestRecord.from_dict(record.to_dict())
    assert back.traces[0].said == [empty]
    assert [f.name for f in back.findings].count("server_error") == 1
