"""The streams where the reader and the judging client disagree, in the terminal summary and the
HTML report: only those no documented rule explains, each with what both concluded and the
command that reproduces it; nothing when every judged stream agreed."""

from __future__ import annotations

from pytest_streamguard import Conclusion, Output, StreamTrace, TestRecord
from pytest_streamguard.judge.ruling import rule
from pytest_streamguard.report.disagreements import disagreement_lines, disagreements
from pytest_streamguard.report.html import render_html
from pytest_streamguard.report.records import json_document
from pytest_streamguard.stream.trace import Chunk


def _trace(name: str, completed: bool, kind: str | None, text: str) -> StreamTrace:
    trace = StreamTrace(name=name, method="POST", url="http://h/v1", format="openai", request_ns=0)
    trace.completed, trace.error_kind = completed, kind
    trace.error = None if kind is None else f"{kind} <here>"
    trace.chunks = [Chunk(0, 5, 5, len(text), text)] if text else []
    return trace


def _judged(trace: StreamTrace, text: str, error: str | None = None) -> StreamTrace:
    rule(trace, Conclusion("openai", error=error, outputs=[Output("text", text, 7)]))
    return trace


def _records() -> list[TestRecord]:
    traces = [
        _judged(_trace("stream 1 (POST /v1)", True, None, "hi"), "hi"),  # agrees
        _judged(_trace("stream 2 (POST /v1)", False, "truncated", "hi"), "hi"),  # a rule
        _judged(_trace("stream 3 (POST /v1)", True, None, "hi"), "hi", "APIError: <boom>"),
        _trace("stream 4 (POST /v1)", True, None, "hi"),  # not judged
    ]
    return [TestRecord(nodeid="t.py::test_a", deadline=None, traces=traces)]


def test_only_a_difference_no_rule_explains_is_listed() -> None:
    (found,) = disagreements(_records())
    assert (found.nodeid, found.stream, found.client) == (
        "t.py::test_a",
        "stream 3 (POST /v1)",
        "openai",
    )
    assert found.client_concluded == "APIError: <boom> (text 2 chars)"
    assert found.reader_concluded == "completed (text 2 chars)"
    assert found.reproduce == "pytest 't.py::test_a' --streamguard --streamguard-client openai"


def test_the_summary_lists_them_as_plugin_bugs() -> None:
    assert disagreement_lines(_records()) == [
        "plugin bug: the reader and the judging client disagree on 1 stream (the client's "
        "verdict stands; please report these to pytest-streamguard):",
        "  t.py::test_a stream 3 (POST /v1): the openai client concluded APIError: <boom> "
        "(text 2 chars); the reader completed (text 2 chars); they differ on completed; "
        "reproduce: pytest 't.py::test_a' --streamguard --streamguard-client openai",
    ]
    agreeing = [TestRecord(nodeid="t.py::b", deadline=None, traces=_records()[0].traces[:2])]
    assert disagreement_lines(agreeing) == []


def test_the_html_report_lists_them_escaped() -> None:
    page = render_html(json_document(_records(), {}))
    assert '<section id="disagreements">' in page
    assert "disagree on 1 stream" in page
    assert "<td>openai: APIError: &lt;boom&gt; (text 2 chars)</td>" in page
    assert "<code>pytest &#x27;t.py::test_a&#x27; --streamguard --streamguard-client openai" in page
    agreeing = [TestRecord(nodeid="t.py::b", deadline=None, traces=_records()[0].traces[:2])]
    assert 'id="disagreements"' not in render_html(json_document(agreeing, {}))


def test_a_saved_transcript_is_named_in_both() -> None:
    records = _records()
    judged = records[0].traces[2].judged
    assert judged is not None
    judged["transcript"] = "tx/t.py-test_a/stream-3.json"
    assert disagreement_lines(records)[1].endswith("; bytes: tx/t.py-test_a/stream-3.json")
    page = render_html(json_document(records, {}))
    assert "<br>bytes: <code>tx/t.py-test_a/stream-3.json</code>" in page
