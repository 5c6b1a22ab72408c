"""The JSON report's compact form (report/compact.py): what a passing stream keeps, what a
failed one keeps, that findings and the HTML come back from it, that the probe's samples ride
on the record, that a version-1 report is still read, the file's layout, and the size of a
passing 30-stream load of 40 chunks."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pytest_streamguard.report.cli import merge_documents, read_document
from pytest_streamguard.report.compact import compact_trace, dumps, expanded, texts_stored
from pytest_streamguard.report.html import render_html
from pytest_streamguard.report.records import (
    JSON_FORMAT,
    JSON_VERSION,
    TestRecord,
    json_document,
    load_json,
    write_json,
)
from pytest_streamguard.stream.trace import Chunk, StreamTrace
from pytest_streamguard.verdict.deadlines import Deadline
from pytest_streamguard.verdict.findings import findings_of
from pytest_streamguard.verdict.probe import Probed

MS = 1_000_000
KB = 1_000
# perf_counter_ns counts from boot: a machine up a year stamps with 17 digits.
YEAR_UP_NS = 365 * 24 * 3600 * 10**9


def _trace(
    name: str,
    *,
    chunks: int = 6,
    interval_ms: float = 100.0,
    start_ns: int = 10**12,
    word: str = "tok",
    completed: bool = True,
) -> StreamTrace:
    """A stream of the bundled target's frames (payloads with ``sent_ns``), a read each."""
    stamps = [start_ns + 40 * MS + int(i * interval_ms * MS) for i in range(chunks)]
    end = stamps[-1] + 2 * MS
    return StreamTrace(
        name=name,
        method="POST",
        url="http://127.0.0.1:1/generate",
        format="sse",
        request_ns=start_ns,
        status_code=200,
        response_ns=start_ns + 5 * MS,
        end_ns=end,
        chunks=[
            Chunk(
                index=i,
                stamp_ns=s,
                first_byte_ns=s,
                nbytes=58,
                text=f" {word}{i}",
                data={"index": i, "text": f" {word}{i}", "sent_ns": s - 300_000},
            )
            for i, s in enumerate(stamps)
        ],
        reads=[(s, 58) for s in stamps] + [(end, 14)],
        read_delay_ns=[50_000 + i for i in range(chunks)],
        completed=completed,
        error=None if completed else f"cut <after {chunks} tokens>",
        error_kind=None if completed else "cut",
        queued_ns=start_ns - 200_000,
        local="127.0.0.1:40000",
        stamps="kernel",
    )


def _record(nodeid: str, traces: list[StreamTrace], verdict: str = "pass") -> TestRecord:
    return TestRecord(
        nodeid=nodeid, deadline=Deadline(ttft=0.5, chunk=0.2), traces=traces, verdict=verdict
    )


def _round_trip(records: list[TestRecord], *, texts: bool) -> list[TestRecord]:
    document = json.loads(dumps(json_document(records, {}, texts=texts)))
    return [TestRecord.from_dict(test) for test in document["tests"]]


def _mixed() -> StreamTrace:
    """A stream whose chunks carry reasoning and tool parts, one split across two reads."""
    trace = _trace("mixed")
    trace.chunks[1].parts = {"reasoning": "think"}
    trace.chunks[2].parts = {"tool": '{"a": 1}', "text": "x"}
    trace.chunks[3].first_byte_ns = trace.chunks[3].stamp_ns - 7 * MS
    trace.chunks[4].data = {"text": " no stamp"}
    return trace


def test_a_passing_stream_keeps_stamps_sizes_kinds_and_send_stamps_not_texts() -> None:
    trace = _mixed()
    row = compact_trace(trace.to_dict(), texts=False)
    assert row["chunk_fields"] == [
        "index",
        "stamp_ns",
        "first_byte_ns",
        "nbytes",
        "sent_ns",
        "kind",
    ]
    assert row["chunks"][2][-1] == "tool+text"
    assert not texts_stored(row)
    (back,) = _round_trip([_record("t.py::test", [trace])], texts=False)[0].traces
    for before, after in zip(trace.chunks, back.chunks, strict=True):
        assert (after.index, after.stamp_ns, after.first_byte_ns, after.nbytes, after.kind) == (
            before.index,
            before.stamp_ns,
            before.first_byte_ns,
            before.nbytes,
            before.kind,
        )
        assert after.text == ""
        sent = before.data.get("sent_ns")
        assert after.data == (None if sent is None else {"sent_ns": sent})
    # Everything but the chunks comes back as it was written.
    assert {k: v for k, v in back.to_dict().items() if k != "chunks"} == {
        k: v for k, v in trace.to_dict().items() if k != "chunks"
    }


def test_texts_are_kept_for_failed_streams_failed_tests_and_on_request() -> None:
    passing = _record("t.py::test_pass", [_mixed(), _trace("cut", completed=False)])
    failed = _record("t.py::test_fail", [_mixed()], verdict="FAIL")
    records = [passing, failed]
    document = json_document(records, {}, texts=False)
    kept = [[texts_stored(t) for t in test["traces"]] for test in document["tests"]]
    assert kept == [[False, True], [True]]
    back = _round_trip(records, texts=False)
    assert back[0].traces[1] == passing.traces[1]
    assert back[1].traces == failed.traces
    # streamguard_json_text: every stream exactly as it was read.
    assert [r.traces for r in _round_trip(records, texts=True)] == [r.traces for r in records]
    for verdict in ("error", "caught"):
        test = json_document([_record("t.py::t", [_mixed()], verdict)], {}, texts=False)
        assert texts_stored(test["tests"][0]["traces"][0]), verdict


def test_findings_come_back_from_the_send_stamps() -> None:
    # Every chunk in one read at the end: buffered, unless the server sent them as fast
    # (their send stamps within BUFFERED_SENT_SPAN_S), which only sent_ns can tell.
    slow, fast = _trace("slow", chunks=8, interval_ms=0), _trace("fast", chunks=8, interval_ms=0)
    for trace in (slow, fast):
        end = trace.request_ns + 900 * MS
        for chunk in trace.chunks:
            chunk.stamp_ns = chunk.first_byte_ns = end
        trace.reads = [(end, 58 * 8)]
        trace.end_ns = end + MS
    for i, chunk in enumerate(slow.chunks):
        chunk.data = {"sent_ns": slow.request_ns + 50 * MS + i * 100 * MS}
    for i, chunk in enumerate(fast.chunks):
        chunk.data = {"sent_ns": fast.request_ns + 850 * MS + i * MS}
    record = _record("t.py::test", [slow, fast])
    (back,) = _round_trip([record], texts=False)
    assert [f.to_dict() for f in back.findings] == [f.to_dict() for f in record.findings]
    assert [f.streams for f in record.findings if f.name == "buffered"] == [("slow",)]
    # Without the send stamps the fast stream would be called buffered too.
    for chunk in fast.chunks:
        chunk.data = None
    assert [f.streams for f in findings_of([fast]) if f.name == "buffered"] == [("fast",)]


def test_the_probes_samples_ride_on_a_compact_record_and_its_earlier_attempts(
    tmp_path: Path,
) -> None:
    start = 10**12
    # Answered in 1 ms every 50 ms, one held 0.3 s and one without an answer.
    samples: list[tuple[int, int | None]] = [(start + k * 50 * MS, MS) for k in range(6)]
    samples[2] = (samples[2][0], 300 * MS)
    samples[4] = (samples[4][0], None)
    earlier = _record("t.py::test", [_trace("a", completed=False)], verdict="FAIL")
    earlier.probe = Probed("http", "/readyz", 0.05, samples[:3])
    record = _record("t.py::test", [_trace("a"), _trace("b", word="b")])
    record.probe = Probed("http", "/readyz", 0.05, samples)
    record.attempt, record.earlier_attempts = 2, [earlier]
    path = tmp_path / "sg.json"
    write_json(path, [record], {})
    _, (back,) = load_json(path)
    # The passing streams' texts were left out, the probe's samples were not.
    assert not texts_stored(json.loads(path.read_text())["tests"][0]["traces"][0])
    assert back.probe == record.probe
    assert back.earlier_attempts[0].probe == earlier.probe
    assert [f.to_dict() for f in back.findings] == [f.to_dict() for f in record.findings]
    # One sample per line, as a chunk's row.
    lines = [line.strip().rstrip(",") for line in path.read_text().splitlines()]
    assert f"[{start + 100 * MS},{300 * MS}]" in lines
    assert f"[{start + 200 * MS},null]" in lines
    # A record without the probe (off, or an older report) reads as None.
    (plain,) = _round_trip([_record("t.py::plain", [_trace("c")])], texts=False)
    assert plain.probe is None


def test_a_version_1_report_is_still_read(tmp_path: Path) -> None:
    records = [_record("t.py::test", [_mixed(), _trace("cut", completed=False)])]
    path = tmp_path / "v1.json"
    # As version 1 wrote it: every chunk an object with its text and payload.
    v1 = {"format": JSON_FORMAT, "version": 1, "tests": [r.to_dict() for r in records]}
    path.write_text(json.dumps(v1, indent=1) + "\n", encoding="utf-8")
    _, back = load_json(path)
    assert [r.to_dict() for r in back] == [r.to_dict() for r in records]
    assert read_document(path)["version"] == 1
    assert JSON_VERSION == 2


def _chunk_titles(page: str) -> list[str]:
    return re.findall(r"<title>(chunk \d+[^<]*)</title>", page)


def test_the_html_is_the_one_of_every_text_but_for_passing_chunks_hover_texts() -> None:
    records = [
        _record("t.py::test_pass", [_trace("p1", word="pass"), _trace("p2", word="pass")]),
        _record("t.py::test_fail", [_trace("f1", word="fail")], verdict="FAIL"),
    ]
    meta = {"created_unix": 0}
    full = render_html(json_document(records, meta))
    # Version 1's document (every chunk an object) draws the same page.
    v1 = {**json_document(records, meta), "version": 1, "tests": [r.to_dict() for r in records]}
    assert render_html(v1) == full
    compact = render_html(json.loads(dumps(json_document(records, meta, texts=False))))
    assert compact != full
    # The one difference: a passing stream's chunk is hovered without its text.
    assert compact == re.sub(r" B: &#x27; pass\d+&#x27;</title>", " B</title>", full)
    titles = _chunk_titles(compact)
    assert len(titles) == 18
    assert "chunk 2 at 240.0 ms, +100.0 ms, 58 B" in titles
    assert "chunk 2 at 240.0 ms, +100.0 ms, 58 B: &#x27; fail2&#x27;" in titles


def test_a_merge_of_compact_reports_is_compact(tmp_path: Path) -> None:
    full = json_document([_record("a.py::test", [_trace("a")])], {}, texts=True)
    compact = json_document([_record("b.py::test", [_trace("b", completed=False)])], {})
    merged = merge_documents([("a.json", full), ("b.json", compact)])
    assert [texts_stored(t["traces"][0]) for t in merged["tests"]] == [False, True]
    assert (
        TestRecord.from_dict(merged["tests"][1]).traces[0].text == " tok0 tok1 tok2 tok3 tok4 tok5"
    )


def test_the_file_has_a_line_per_object_key_and_per_row() -> None:
    document: dict[str, Any] = {
        "pooled": {"tests": 1, "gap_p50_s": 0.5},
        "empty": {},
        "tests": [{"chunk_fields": ["index", "stamp_ns"], "chunks": [[0, 10], [1, 20]]}],
        "seen": [1, 2.5, None, "x"],
    }
    text = dumps(document)
    assert json.loads(text) == document
    assert text.splitlines() == [
        "{",
        ' "pooled": {',
        '  "tests": 1,',
        '  "gap_p50_s": 0.5',
        " },",
        ' "empty": {},',
        ' "tests": [',
        "  {",
        '   "chunk_fields": ["index","stamp_ns"],',
        '   "chunks": [',
        "[0,10],",
        "[1,20]",
        "   ]",
        "  }",
        " ],",
        ' "seen": [1,2.5,null,"x"]',
        "}",
    ]
    assert expanded({"chunks": []}) == {"chunks": []}


def _load_like(start_ns: int) -> list[StreamTrace]:
    """30 concurrent streams of 40 chunks of the bundled target, each chunk in its own read."""
    return [
        _trace(
            f"stream {i + 1} (POST /generate)",
            chunks=40,
            interval_ms=6.3,
            start_ns=start_ns + i * 137_911,
            word="dadu",
        )
        for i in range(30)
    ]


def test_a_passing_load_of_30_streams_of_40_chunks_is_at_most_150_kb(tmp_path: Path) -> None:
    # tests/report/test_compact_json.py measures a real run; here the stamps are those of a
    # machine up a year (17 digits), the longest the file gets for the same load.
    records = [_record("t.py::test_load", _load_like(YEAR_UP_NS))]
    compact, full = tmp_path / "compact.json", tmp_path / "full.json"
    write_json(compact, records, {})
    write_json(full, records, {}, texts=True)
    assert compact.stat().st_size <= 150 * KB
    assert full.stat().st_size > compact.stat().st_size + 30 * 40 * len(' " dadu0",{"index":0}')
    _, back = load_json(compact)
    assert [t.gaps for t in back[0].traces] == [t.gaps for t in records[0].traces]
