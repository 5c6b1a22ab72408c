"""The HTML report's size, layout and newer fields, from JSON documents built here.

A report shaped like the resilience suite's (``make demo``: 19 tests, about 5,000 chunks, one
test of 30 streams, three of 800 chunks) must stay under 1 MB with a timeline per test; a
much larger one stays bounded because close marks are drawn as one. Fields that other parts of
the plugin add to the JSON (a fault's ``fired``, a trace's ``format_auto`` and ``node``, the
``empty`` outcome) are shown, and a document without them still renders. In headless
Chromium the page does not overflow sideways at common widths and long test names stay short.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chromium_cdp import Page, chromium_page

from pytest_streamguard.report.html import render_html, write_html
from pytest_streamguard.report.plots import BIN_UNITS, WIDTH
from pytest_streamguard.report.records import JSON_FORMAT, JSON_VERSION, TestRecord
from pytest_streamguard.stream.trace import Chunk, FaultRecord, StreamTrace
from pytest_streamguard.verdict.deadlines import Deadline
from pytest_streamguard.verdict.probe import Probed

MB = 1_000_000
LOAD_TIMEOUT = 60.0
MS = 1_000_000
LONG_NAME = (
    "tests/resilience/test_connection_cut.py::TestCutWhileGenerating::"
    "test_cut_from_the_first_bytes_is_reported_and_generation_stops_on_the_server_too"
    "[reset-after-zero-ms-with-a-long-parameter-id]"
)


def _trace(
    name: str,
    chunks: int,
    interval_ms: float,
    *,
    start_ns: int = 10**12,
    ttft_ms: float = 40.0,
    error_kind: str | None = None,
    heartbeats: int = 0,
) -> StreamTrace:
    """A stream as the client records it: a read per chunk, then the end event."""
    first = start_ns + int(ttft_ms * MS)
    stamps = [first + int(i * interval_ms * MS) for i in range(chunks)]
    end = (stamps[-1] if stamps else first) + 2 * MS
    beats = [first + int((i + 0.5) * interval_ms * MS) for i in range(heartbeats)]
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
            Chunk(index=i, stamp_ns=s, first_byte_ns=s, nbytes=59, text=f" token{i}")
            for i, s in enumerate(stamps)
        ],
        reads=[(s, 59) for s in sorted(stamps + beats)] + [(end, 14)],
        heartbeats=heartbeats,
        heartbeat_ns=beats,
        completed=error_kind is None,
        error=None if error_kind is None else f"{error_kind} <after {chunks} tokens>",
        error_kind=error_kind,
    )


def _test(nodeid: str, traces: list[StreamTrace], verdict: str = "pass") -> dict[str, Any]:
    record = TestRecord(
        nodeid=nodeid,
        deadline=Deadline(ttft=0.5, chunk=0.2),
        traces=traces,
        violations=[] if verdict == "pass" else [f"{traces[0].name}: broke the deadline"],
        verdict=verdict,
    )
    return record.to_dict()


def _document(tests: list[dict[str, Any]]) -> dict[str, Any]:
    return {"format": JSON_FORMAT, "version": JSON_VERSION, "tests": tests}


def _streams(test: str, n: int, chunks: int, interval_ms: float) -> list[StreamTrace]:
    return [
        _trace(f"stream {i + 1} (POST /generate)", chunks, interval_ms, start_ns=10**12 + i * MS)
        for i in range(n)
    ]


def demo_like() -> dict[str, Any]:
    """19 tests with the resilience suite's streams, chunk counts and pace."""
    shapes = [  # (streams, chunks per stream, ms between chunks)
        (8, 48, 10),
        (8, 48, 10),
        (1, 800, 5),
        (1, 800, 5),
        (1, 800, 5),
        (1, 16, 3),
        (1, 16, 3),
        (30, 32, 3),
        (1, 33, 3),
        (1, 3, 8),
        (1, 28, 3),
        (1, 5, 3),
        (1, 6, 3),
        (2, 48, 6),
        (1, 48, 6),
        (2, 120, 10),
        (1, 234, 15),
    ]
    tests = [
        _test(f"tests/resilience/test_demo_{i}.py::test_shape_{i}", _streams(str(i), *shape))
        for i, shape in enumerate(shapes)
    ]
    # A cut that fired, one that never did (the stream was shorter than its byte count), an
    # empty stream, a stream whose format was recognised, one read on a Ray node.
    fired = _trace("stream 1 (POST /generate)", 12, 3, error_kind="cut")
    unfired = _trace("stream 2 (POST /generate)", 12, 3, start_ns=10**12 + 90 * MS)
    for trace, did in ((fired, True), (unfired, False)):
        trace.faults = [
            FaultRecord(
                kind="cut",
                params={"after_bytes": 300 if did else 99_999},
                toxics=["streamguard_limit_data_1"],
                on_ns=10**12 - 5 * MS,
                off_ns=trace.end_ns,
            )
        ]
    faults_test = _test(LONG_NAME, [fired, unfired], verdict="caught")
    for raw, did in zip(faults_test["traces"], (True, False), strict=True):
        raw["faults"][0]["fired"] = did
    empty = _trace("stream 1 (POST /v1/chat/completions)", 0, 3, error_kind="empty")
    heartbeat = _trace("stream 2 (POST /generate)", 12, 100, heartbeats=5)
    fields_test = _test(
        "tests/resilience/test_formats.py::test_auto_and_nodes", [empty, heartbeat], "FAIL"
    )
    fields_test["traces"][0].update(format="openai", format_auto=True, node="3f9a1c0b")
    fields_test["traces"][1].update(node=None)
    return _document([*tests, faults_test, fields_test])


def test_demo_like_report_is_under_1_mb_with_a_timeline_per_test(tmp_path: Path) -> None:
    document = demo_like()
    chunks = sum(len(t["chunks"]) for test in document["tests"] for t in test["traces"])
    assert len(document["tests"]) == 19
    assert chunks > 4_800
    path = tmp_path / "report.html"
    write_html(path, document)
    size = path.stat().st_size
    assert size < 1 * MB, f"{size} bytes"
    page = path.read_text(encoding="utf-8")
    assert page.count('<svg class="timeline"') == 19
    for index in range(1, 20):
        assert f'<div class="plot" id="timeline-{index}">' in page
    # The load tests (30, 8 and 8 streams) get a gap histogram too.
    assert page.count('<svg class="histogram"') == 3
    assert "<script src" not in page
    assert "http" not in page


def _chunk_marks_per_row(page: str) -> list[int]:
    """How many chunk marks each row of the first timeline has (rows differ in cy)."""
    chunk_layer = re.search(r'<g class="chunks"[^>]*>(.*?)</g>', page)
    assert chunk_layer is not None
    rows: dict[str, int] = {}
    for cy in re.findall(r'<circle cx="[^"]+" cy="([^"]+)"', chunk_layer.group(1)):
        rows[cy] = rows.get(cy, 0) + 1
    return list(rows.values())


def test_size_follows_the_page_width_not_the_chunk_count() -> None:
    # 30 streams of 5,000 chunks 1 ms apart: far more chunks than pixels.
    big = _document([_test("tests/test_big.py::test_big", _streams("big", 30, 5_000, 1))])
    page = render_html(big)
    per_row = _chunk_marks_per_row(page)
    assert len(per_row) == 30
    assert max(per_row) <= WIDTH / BIN_UNITS
    assert len(page) < 2 * MB, len(page)
    # Each mark says how many chunks it stands for; together they are all of them.
    counts = [int(n) for n in re.findall(r'data-n="(\d+)"', page)]
    singles = sum(per_row) - len(counts)
    assert sum(counts) + singles == 30 * 5_000


def _section(page: str, nodeid_fragment: str) -> str:
    match = re.search(
        rf'<section class="test"[^>]*data-nodeid="[^"]*{re.escape(nodeid_fragment)}.*?</section>',
        page,
    )
    assert match is not None, nodeid_fragment
    return match.group(0)


def test_never_fired_faults_are_marked() -> None:
    page = render_html(demo_like())
    section = _section(page, "test_cut_from_the_first_bytes")
    assert "<th>took effect</th>" in section
    assert (
        '<td>cut(after_bytes=300)</td><td><span class="badge fired">fired</span></td>'
        "<td>proxy</td>" in section
    )
    assert (
        '<td>cut(after_bytes=99999)</td><td><span class="badge unfired">never fired</span>'
        in section
    )
    # On the timeline: the unfired fault's bar is drawn apart, with a title saying so.
    assert '<g class="faults-unfired"' in section
    assert "fault cut(after_bytes=99999): never fired, on" in section
    assert 'data-kind="faults-unfired"' in section  # and it has a legend entry
    # The summary row marks it too.
    summary = page.split('<section class="test"', 1)[0]
    assert 'cut(after_bytes=99999) <span class="badge unfired">never fired</span>' in summary
    assert 'cut(after_bytes=300) <span class="badge unfired">' not in summary


def test_format_node_and_empty_outcome_are_shown() -> None:
    page = render_html(demo_like())
    section = _section(page, "test_auto_and_nodes")
    assert "<th>format</th><th>node</th>" in section
    assert "<td>openai (auto)</td><td>3f9a1c0b</td>" in section
    assert "<td>sse</td><td>local</td>" in section
    assert "stopped: empty: empty &lt;after 0 tokens&gt;" in section
    assert "stopped at 42.0 ms: empty: empty &lt;after 0 tokens&gt;" in section  # the red cross
    # No node column where no stream was read on a node.
    assert "<th>node</th>" not in _section(page, "test_shape_0")
    local = demo_like()
    local["tests"][-1]["traces"][0]["node"] = None
    assert "<th>node</th>" not in render_html(local)


def test_a_report_without_the_newer_fields_renders() -> None:
    document = demo_like()
    for test in document["tests"]:
        for trace in test["traces"]:
            for key in ("format_auto", "node"):
                trace.pop(key, None)
            for fault in trace["faults"]:
                fault.pop("fired", None)
    page = render_html(document)
    assert "took effect" not in page
    assert "never fired" not in page
    assert "(auto)" not in page
    assert "<th>node</th>" not in page
    assert page.count('<svg class="timeline"') == 19


@pytest.mark.parametrize(
    ("counts", "expected"),
    [((1, 1), "1 test read streams"), ((2, 0), "2 tests read streams")],
)
def test_counts_read_in_the_right_number(counts: tuple[int, int], expected: str) -> None:
    tests, _ = counts
    document = _document(
        [_test(f"tests/test_n.py::test_{i}", _streams("n", 1, 3, 5)) for i in range(tests)]
    )
    page = render_html(document)
    assert f"<p>{expected}: {tests} pass.</p>" in page
    assert "(s)" not in page


@pytest.fixture(scope="module")
def demo_page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Page, Path]]:
    """The demo-like report open in headless Chromium."""
    workdir = tmp_path_factory.mktemp("demo_like")
    path = workdir / "report.html"
    write_html(path, demo_like())
    with chromium_page(workdir, width=1400, height=1000) as page:
        page.send("Page.navigate", url=path.as_uri())
        page.wait_event("Page.loadEventFired", LOAD_TIMEOUT)
        yield page, workdir


@pytest.mark.parametrize("width", [1400, 1280, 1024])
def test_nothing_is_cut_off_and_names_stay_short(demo_page: tuple[Page, Path], width: int) -> None:
    page, workdir = demo_page
    page.send(
        "Emulation.setDeviceMetricsOverride",
        width=width,
        height=1000,
        deviceScaleFactor=1,
        mobile=False,
    )
    # The page never scrolls sideways; at 1280 px and up no table needs to either.
    overflow = page.evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0
    if width >= 1280:
        wide = page.evaluate(
            "Array.from(document.querySelectorAll('.scroll'))"
            ".filter((d) => d.scrollWidth > d.clientWidth + 1).length"
        )
        assert wide == 0
    # A summary row's name takes at most 2 lines and its path 1; a section's heading 1.
    lines = page.evaluate(
        "(() => { const lines = (e) => Math.round(e.getBoundingClientRect().height"
        "  / parseFloat(getComputedStyle(e).lineHeight));"
        "  return {"
        "   names: Array.from(document.querySelectorAll('#summary-table .fn')).map(lines),"
        "   paths: Array.from(document.querySelectorAll('#summary-table .path')).map(lines),"
        "   headings: Array.from(document.querySelectorAll('section h2 .fn')).map(lines) }; })()"
    )
    assert max(lines["names"]) <= 2
    assert max(lines["paths"]) == 1
    assert max(lines["headings"]) == 1
    # The long name is cut with an ellipsis; hovering shows it whole.
    title = page.evaluate(
        "document.querySelector('#summary-table tbody tr:nth-child(18) td.test span')"
        ".getAttribute('title')"
    )
    assert title == LONG_NAME
    assert page.problems() == []
    page.screenshot(workdir / f"demo-like-{width}.png")


def test_the_probe_is_drawn_under_the_timeline_with_its_waits_merged() -> None:
    traces = _streams("probed", 4, 20, 20)
    record = TestRecord.from_dict(_test("test_probed", traces))
    start = 10**12
    # Answered in 1 ms every 50 ms, except three probes held 0.2 s each and one without an
    # answer until the next probe: one stretch of 0.7 s, drawn as one mark.
    samples: list[tuple[int, int | None]] = [(start + k * 50 * MS, MS) for k in range(4)]
    samples += [(start + (200 + 200 * k) * MS, 200 * MS) for k in range(3)]
    samples += [(start + 800 * MS, None), (start + 900 * MS, MS)]
    record.probe = Probed("http", "/readyz", 0.05, samples)
    plain = _test("test_plain", _streams("plain", 4, 20, 20))
    page = render_html(_document([record.to_dict(), plain]))
    section = _section(page, "test_probed")
    assert section.count('<svg class="probe"') == 1
    waited = re.findall(r'<g class="probe-waited".*?</g>', section)
    assert len(waited) == 1
    titles = re.findall(r"<title>([^<]*)</title>", waited[0])
    assert titles == ["the ready path /readyz waited 700.0 ms, from 200.0 ms to 900.0 ms"]
    assert "the ready path /readyz: 9 probes every 50.0 ms" in section
    # A test without the probe's samples (off, or an older report) has no probe plot.
    assert '<svg class="probe"' not in _section(page, "test_plain")


def test_what_a_hop_said_is_marked_on_the_timeline() -> None:
    document = demo_like()
    trace = document["tests"][0]["traces"][0]
    trace["said"] = [
        {
            "hop": "model",
            "stamp_ns": trace["request_ns"] + 20 * MS,
            "text": "_queue.Empty",
            "frame": "model/server.py:41 in tokens",
            "error": True,
        }
    ]
    section = _section(render_html(document), "test_shape_0")
    assert "a hop&#x27;s own words" in section  # the legend
    assert (
        "<title>model said: _queue.Empty (at model/server.py:41 in tokens)  &lt;-- model&#x27;s "
        "error at 20.0 ms</title>" in section
    )
    assert "own words" not in _section(render_html(demo_like()), "test_shape_0")
