"""The HTML report: one self-contained page built from the JSON report's document (what it
shows is docs/reports.md's "HTML").

The plots are inline SVG (:mod:`.plots`, :mod:`.headroom_view`) and the only script sorts the
summary table, so the file is small and opens with no network. Every piece of text that came
from a test (node ids, stream names, chunk text, error messages, fault arguments) is escaped.

Fields newer than the records (a fault's ``fired``, a trace's ``format_auto`` and ``node``) are
read from the document's dicts with defaults, so an older report renders too. A stream whose
chunk texts the JSON report left out (:mod:`.compact`) is drawn the same, its chunks' hover
texts without their text.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_streamguard.common.display import counted
from pytest_streamguard.report.compact import texts_stored
from pytest_streamguard.report.disagreements import disagreements, heading
from pytest_streamguard.report.headroom_view import headroom_html
from pytest_streamguard.report.plots import (
    _e,
    _s,
    fault_fired,
    gap_histogram_svg,
    gap_stats,
    probe_svg,
    timeline_svg,
)
from pytest_streamguard.report.records import TestRecord, matrix
from pytest_streamguard.stream.trace import FaultRecord, StreamTrace
from pytest_streamguard.verdict.stats import percentile

# A test with at least this many streams is a load test and gets a gap histogram.
HISTOGRAM_MIN_STREAMS = 4
# Sort rank of each verdict, so an ascending sort puts the tests to look at first.
_VERDICT_RANK = {"FAIL": 0, "error": 1, "caught": 2, "unchecked": 3, "pass": 4}

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto;
       max-width: 1280px; padding: 16px 24px; color: #222; box-sizing: border-box; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 0 0 2px; display: flex; gap: 8px; align-items: baseline; }
h3 { font-size: 14px; margin: 14px 0 4px; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; margin: 6px 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
/* Fixed columns that fit the page; below its min-width the table scrolls in its box. */
#summary-table { width: 100%; min-width: 1080px; table-layout: fixed; }
#summary-table td { overflow-wrap: break-word; }
td.small { font-size: 12px; }
#summary-table th { font-size: 13px; }
.path { display: block; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
td .fn { display: -webkit-box; -webkit-line-clamp: 2; -webkit-box-orient: vertical;
         overflow: hidden; overflow-wrap: anywhere; }
h2 .fn { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; min-width: 0; }
.path { color: #666; font-size: 12px; }
code, pre { font-family: ui-monospace, monospace; font-size: 13px; }
p.nodeid { margin: 0 0 6px; color: #555; overflow-wrap: anywhere; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.outcome { max-width: 420px; overflow-wrap: anywhere; }
table.sortable th { cursor: pointer; background: #f3f3f3; user-select: none; }
table.sortable th[aria-sort=ascending]::after { content: " \\25B2"; }
table.sortable th[aria-sort=descending]::after { content: " \\25BC"; }
.verdict { font-weight: 600; padding: 1px 6px; border-radius: 3px; color: #fff;
           white-space: nowrap; }
.verdict-pass { background: #2ca02c; }
.verdict-FAIL { background: #d62728; }
.verdict-error { background: #9467bd; }
.verdict-caught { background: #ff7f0e; }
.verdict-unchecked { background: #7f7f7f; }
.badge { font-size: 12px; padding: 0 5px; border-radius: 3px; white-space: nowrap; }
.unfired { border: 1px dashed #d62728; color: #a00; }
.fired { border: 1px solid #2ca02c; color: #1a6e1a; }
section.test { border-top: 2px solid #ccc; margin-top: 24px; padding-top: 12px; }
ul.violations li { color: #a00; font-family: ui-monospace, monospace; font-size: 13px;
                   white-space: pre-wrap; overflow-wrap: anywhere; }
dl.meta { display: grid; grid-template-columns: max-content auto; gap: 0 12px; margin: 8px 0; }
dl.meta dt { font-weight: 600; } dl.meta dd { margin: 0; overflow-wrap: anywhere; }
.muted { color: #666; }
li.missing { color: #a00; font-weight: 600; }
.plot { border: 1px solid #eee; margin: 8px 0; padding: 6px 8px; }
.plot svg.timeline, .plot svg.histogram, .plot svg.headroom { display: block; width: 100%;
  height: auto; font-family: system-ui, sans-serif; }
.plot-title { font-weight: 600; margin: 0 0 4px; }
.legend { display: flex; flex-wrap: wrap; gap: 2px 14px; font-size: 12px; color: #444; }
.legend .key { display: inline-flex; align-items: center; gap: 4px; }
"""

# Sorts the summary table by the clicked column: numbers by data-sort, missing values last.
_SORT_JS = """
for (const table of document.querySelectorAll("table.sortable")) {
  const headers = Array.from(table.tHead.rows[0].cells);
  headers.forEach((th, col) => th.addEventListener("click", () => {
    const dir = th.getAttribute("aria-sort") === "ascending" ? "descending" : "ascending";
    headers.forEach((h) => h.removeAttribute("aria-sort"));
    th.setAttribute("aria-sort", dir);
    const numeric = th.dataset.type === "number";
    const sign = dir === "ascending" ? 1 : -1;
    const key = (row) => {
      const cell = row.cells[col];
      const raw = cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent;
      return numeric ? (raw === "" ? NaN : Number(raw)) : raw.toLowerCase();
    };
    const body = table.tBodies[0];
    const rows = Array.from(body.rows);
    rows.sort((a, b) => {
      const x = key(a), y = key(b);
      if (numeric) {
        if (Number.isNaN(x) || Number.isNaN(y)) return Number.isNaN(x) - Number.isNaN(y);
        return sign * (x - y);
      }
      return sign * x.localeCompare(y);
    });
    body.append(...rows);
  }));
}
"""


def _ms(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds * 1e3:.1f}"


def _num_cell(seconds: float | None) -> str:
    """A right-aligned cell in ms, sortable by its exact value."""
    sort = "" if seconds is None else repr(seconds)
    return f'<td class="num" data-sort="{sort}">{_ms(seconds) or "-"}</td>'


def _verdict(verdict: str) -> str:
    return f'<span class="verdict verdict-{_e(verdict)}">{_e(verdict)}</span>'


def _test_anchor(index: int) -> str:
    return f"test-{index}"


def split_nodeid(nodeid: str) -> tuple[str, str]:
    """A node id as (test name with its parameters, the file and class it is in), so a page
    can show the name in full and shorten the path; a ``::`` inside the parameters stays."""
    base, bracket, params = nodeid.partition("[")
    path, _, name = base.rpartition("::")
    return name + bracket + params, path


def _name(nodeid: str, link: str | None = None) -> str:
    """The test name on one line and its path on a smaller one, each cut with an ellipsis if
    too long; the full node id is the hover title."""
    name, path = split_nodeid(nodeid)
    # A name that needs a second line breaks after an underscore, not inside a word.
    shown = f'<span class="fn">{_e(name).replace("_", "_<wbr>")}</span>'
    if link is not None:
        shown = f'<a href="#{link}">{shown}</a>'
    return f'<span title="{_e(nodeid)}">{shown}<span class="path">{_e(path)}</span></span>'


def _table(html_table: str) -> str:
    """A table that scrolls sideways on a narrow page rather than being cut off."""
    return f'<div class="scroll">{html_table}</div>'


@dataclass(frozen=True)
class _Test:
    """A test's record, with its traces' dicts from the document for the fields read with
    defaults (see the module docstring)."""

    record: TestRecord
    raw_traces: list[dict[str, Any]]

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> _Test:
        traces = raw.get("traces", [])
        return cls(TestRecord.from_dict(raw), [t if isinstance(t, dict) else {} for t in traces])

    def untexted(self) -> set[int]:
        """The indexes of the streams whose chunk texts the report left out."""
        return {i for i, raw in enumerate(self.raw_traces) if not texts_stored(raw)}

    def fired(self) -> dict[tuple[str, int | None], bool | None]:
        """Per fault (description, on stamp): did it fire (None: the report does not say)."""
        copies: dict[tuple[str, int | None], list[dict[str, object]]] = {}
        for trace, raw in zip(self.record.traces, self.raw_traces, strict=True):
            raw_faults = raw.get("faults", [])
            for fault, raw_fault in zip(trace.faults, raw_faults, strict=True):
                key = (fault.describe(), fault.on_ns)
                copies.setdefault(key, []).append(raw_fault)
        return {key: fault_fired(dicts) for key, dicts in copies.items()}


def _unique_faults(record: TestRecord) -> list[FaultRecord]:
    """Each fault once, although every stream it was active during carries a copy."""
    faults: dict[tuple[str, int | None], FaultRecord] = {}
    for trace in record.traces:
        for fault in trace.faults:
            faults.setdefault((fault.describe(), fault.on_ns), fault)
    return list(faults.values())


_UNFIRED = '<span class="badge unfired">never fired</span>'


def _fault_names(test: _Test) -> str:
    """The test's faults for the summary, each one that never fired marked so."""
    fired = test.fired()
    names: dict[str, bool] = {}
    for fault in _unique_faults(test.record):
        unfired = fired.get((fault.describe(), fault.on_ns)) is False
        names[fault.describe()] = names.get(fault.describe(), True) and unfired
    if not names:
        return "-"
    return ", ".join(f"{_e(n)} {_UNFIRED}" if unfired else _e(n) for n, unfired in names.items())


def _summary_table(tests: list[_Test]) -> str:
    # Column widths (%) of a fixed layout: the table always fits the page, long cells wrap.
    heads = [
        ("test", "text", 31),
        ("verdict", "number", 7),
        ("streams", "number", 6),
        ("chunks", "number", 6),
        ("worst TTFT", "number", 7),
        ("gap p50", "number", 6),
        ("gap p95", "number", 6),
        ("max gap", "number", 6),
        ("deadline", "text", 9),
        ("faults", "text", 16),
    ]
    cols = "".join(f'<col style="width: {width}%">' for _, _, width in heads)
    head = "".join(f'<th data-type="{kind}">{_e(name)}</th>' for name, kind, _ in heads)
    rows = []
    for index, test in enumerate(tests, start=1):
        record = test.record
        gaps = record.gaps()
        chunks = sum(len(t.chunks) for t in record.traces)
        deadline = record.deadline.describe() if record.deadline is not None else "none"
        rows.append(
            "<tr>"
            f'<td class="test" data-sort="{_e(record.nodeid)}">'
            f"{_name(record.nodeid, _test_anchor(index))}</td>"
            f'<td data-sort="{_VERDICT_RANK.get(record.verdict, 9)}">'
            f"{_verdict(record.verdict)}</td>"
            f'<td class="num">{len(record.traces)}</td>'
            f'<td class="num">{chunks}</td>'
            f"{_num_cell(record.worst_ttft())}"
            f"{_num_cell(percentile(gaps, 50))}"
            f"{_num_cell(percentile(gaps, 95))}"
            f"{_num_cell(max(gaps) if gaps else None)}"
            f'<td class="small">{_e(deadline)}</td>'
            f'<td class="small">{_fault_names(test)}</td>'
            "</tr>"
        )
    return _table(
        f'<table class="sortable" id="summary-table"><colgroup>{cols}</colgroup>'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _matrix_table(records: list[TestRecord]) -> str:
    """Test x profile -> verdict, worst TTFT and gap p95 (the ``streamguard_matrix`` tests)."""
    rows = matrix(records)
    if not rows:
        return ""
    profiles: list[str] = []
    for row in rows:
        profiles.extend(p for p in row["profiles"] if p not in profiles)
    anchors = {record.nodeid: _test_anchor(i) for i, record in enumerate(records, start=1)}
    head = "<th>test</th>" + "".join(f"<th>{_e(name)}</th>" for name in profiles)
    body = []
    for row in rows:
        cells = [f'<td class="test">{_name(row["test"])}</td>']
        for name in profiles:
            cell = row["profiles"].get(name)
            if cell is None:
                cells.append('<td class="muted">-</td>')
                continue
            ttft = _ms(cell["worst_ttft_s"]) or "-"
            gap = _ms(cell["gap_p95_s"]) or "-"
            cells.append(
                f'<td><a href="#{anchors.get(cell["nodeid"], "")}">'
                f"{_verdict(cell['verdict'])}</a> "
                f'<span class="num">{ttft} / {gap}</span></td>'
            )
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (
        '<h2 id="matrix">Fault matrix</h2>'
        + _table(
            '<table id="matrix-table">'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        )
        + '<p class="muted">Per profile: verdict, worst TTFT / gap p95 (ms).</p>'
    )


def _faults_table(test: _Test) -> str:
    record = test.record
    faults = _unique_faults(record)
    if not faults:
        return '<p class="muted">No faults.</p>'
    origin = min(t.request_ns for t in record.traces)
    fired = test.fired()
    known = any(fired.get((f.describe(), f.on_ns)) is not None for f in faults)

    def at(ns: int | None) -> str:
        return "-" if ns is None else f"{_s(ns, origin):.3f}"

    def fired_cell(fault: FaultRecord) -> str:
        if not known:
            return ""
        value = fired.get((fault.describe(), fault.on_ns))
        shown = {
            True: '<span class="badge fired">fired</span>',
            False: _UNFIRED,
            None: '<span class="muted">not recorded</span>',
        }[value]
        return f"<td>{shown}</td>"

    rows = "".join(
        f"<tr><td>{_e(f.describe())}</td>{fired_cell(f)}<td>{_e(f.applied_by)}</td>"
        f"<td>{_e(', '.join(f.toxics) or '-')}</td>"
        f'<td class="num">{at(f.on_ns)}</td><td class="num">{at(f.off_ns)}</td></tr>'
        for f in faults
    )
    fired_head = "<th>took effect</th>" if known else ""
    return _table(
        f'<table class="faults"><thead><tr><th>fault</th>{fired_head}<th>applied by</th>'
        "<th>toxics</th>"
        "<th>on (s)</th><th>off (s)</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    ) + (
        '<p class="muted">On/off in seconds since the test\'s first request was sent '
        "(negative: switched on before it).</p>"
    )


def _outcome(trace: StreamTrace) -> str:
    if trace.completed:
        return "completed"
    kind = f"{trace.error_kind}: " if trace.error_kind else ""
    return f"stopped: {kind}{trace.error or 'ended early'}"


def _format(trace: StreamTrace, raw: dict[str, Any]) -> str:
    """The format the stream was read as; ``(auto)`` when it was recognised from the stream."""
    return f"{trace.format} (auto)" if raw.get("format_auto") is True else trace.format


def _streams_table(test: _Test) -> str:
    # A node column only when a stream was read on a Ray node (a distributed load); a local
    # read's node is null.
    nodes = any(raw.get("node") is not None for raw in test.raw_traces)
    # The connection (client address:port, to match a capture or a server log) and the
    # client's own delays, when the client recorded them (loads).
    wired = any(t.local is not None for t in test.record.traces)
    rows = "".join(
        f"<tr><td>{row}</td><td>{_e(t.name)}</td><td>{_e(_format(t, raw))}</td>"
        + (f"<td>{_e(raw.get('node') or 'local')}</td>" if nodes else "")
        + (_wire_cells(t) if wired else "")
        + f"<td>{_e(t.status_code or '-')}</td>"
        f'<td class="outcome">{_e(_outcome(t))}</td><td class="num">{len(t.chunks)}</td>'
        f"{_num_cell(t.ttft)}{_num_cell(t.max_gap)}{_num_cell(t.total)}"
        f'<td class="num">{t.heartbeats}</td><td class="num">{t.nbytes}</td></tr>'
        for row, (t, raw) in enumerate(
            zip(test.record.traces, test.raw_traces, strict=True), start=1
        )
    )
    return _table(
        '<table class="streams"><thead><tr><th>#</th><th>stream</th><th>format</th>'
        + ("<th>node</th>" if nodes else "")
        + (
            "<th>connection</th><th>client write (ms)</th><th>client read p99 (ms)</th>"
            if wired
            else ""
        )
        + "<th>status</th><th>outcome</th><th>chunks</th><th>TTFT (ms)</th>"
        "<th>max gap (ms)</th><th>total (ms)</th><th>heartbeats</th><th>bytes</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


def _wire_cells(trace: StreamTrace) -> str:
    """A stream's connection (local address:port) and the client's own delays: request queued
    to written, and bytes arrived to read (p99)."""
    delay = trace.client_delay
    return (
        f"<td>{_e(trace.local or '-')}</td>{_num_cell(delay['write'])}"
        f"{_num_cell(delay['read_p99'])}"
    )


def _plots(index: int, test: _Test) -> str:
    record = test.record
    if not record.traces:
        # A test that only searched its headroom: the levels' streams are the search's, shown
        # under Headroom; an empty timeline would say nothing.
        return ""
    deadline = record.deadline
    chunk_note = (
        f"; chunk deadline {deadline.chunk * 1e3:.0f} ms after each chunk"
        if deadline is not None and deadline.chunk is not None
        else ""
    )
    probe = probe_svg(record)
    if probe:
        # Under the timeline, in its plot: the probe belongs to the same streams.
        probe = (
            '<p class="plot-title">The probe beside the streams, seconds since the first '
            "request (red: it waited; see docs/findings.md)</p>"
            f"{probe}"
        )
    plots = (
        f'<div class="plot" id="timeline-{index}">'
        f'<p class="plot-title">Chunk arrivals per stream{chunk_note} '
        '<span class="muted">(hover a mark for details)</span></p>'
        f"{timeline_svg(record, test.fired(), test.untexted())}{probe}</div>"
    )
    if len(record.traces) >= HISTOGRAM_MIN_STREAMS and record.gaps():
        plots += (
            f'<div class="plot" id="gaps-{index}">'
            f'<p class="plot-title">Gaps between chunks, all streams pooled ({gap_stats(record)})'
            f"</p>{gap_histogram_svg(record)}</div>"
        )
    return plots


def _headroom(index: int, test: _Test) -> str:
    """The test's headroom searches, each with its plots and levels (:mod:`.headroom_view`)."""
    found = test.record.headroom
    if not found:
        return ""
    parts = "".join(
        headroom_html(search, f"headroom-{index}-{k}") for k, search in enumerate(found, start=1)
    )
    return f"<h3>Headroom</h3>{parts}"


def _test_section(index: int, test: _Test) -> str:
    record = test.record
    anchor = _test_anchor(index)
    if record.deadline is None:
        deadline = "<p>Deadline: none (no token_deadline marker, so no stream was checked)"
    else:
        deadline = f"<p>Deadline: <code>{_e(record.deadline.describe())}</code> (seconds)"
    violations = ""
    if record.violations:
        items = "".join(f"<li>{_e(v)}</li>" for v in record.violations)
        violations = f'<ul class="violations">{items}</ul>'
    findings = ""
    if record.findings:
        items = "".join(f"<li><b>{_e(f.name)}</b>: {_e(f.evidence)}</li>" for f in record.findings)
        findings = f'<h3>Findings</h3><ul class="findings">{items}</ul>'
    if record.unchecked:
        items = "".join(
            f"<li><b>{_e(u.finding)}</b>: {_e(u.reason)}</li>" for u in record.unchecked
        )
        findings += f'<h3>Not checked (fail_on)</h3><ul class="unchecked">{items}</ul>'
    name, _ = split_nodeid(record.nodeid)
    worker = "" if record.worker is None else f"; ran on pytest-xdist worker {_e(record.worker)}"
    return (
        f'<section class="test" id="{anchor}" data-nodeid="{_e(record.nodeid)}" '
        f'data-verdict="{_e(record.verdict)}">'
        f'<h2>{_verdict(record.verdict)} <span class="fn" title="{_e(record.nodeid)}">'
        f"{_e(name)}</span></h2>"
        f'<p class="nodeid"><code>{_e(record.nodeid)}</code></p>'
        f"{deadline}{worker}</p>"
        f"{violations}{findings}<h3>Faults</h3>{_faults_table(test)}"
        f"<h3>Streams</h3>{_streams_table(test)}{_plots(index, test)}{_headroom(index, test)}"
        '<p><a href="#summary">back to the summary</a></p></section>'
    )


def _meta_list(meta: dict[str, Any]) -> str:
    items = []
    for key, value in meta.items():
        if key in ("format", "version") or isinstance(value, dict | list):
            continue
        if key == "created_unix" and isinstance(value, int | float):
            value = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(value))
            key = "created"
        items.append(f"<dt>{_e(key)}</dt><dd>{_e(value)}</dd>")
    return f'<dl class="meta">{"".join(items)}</dl>{_workers(meta)}'


def _tests(info: dict[str, Any]) -> str:
    tests = info.get("tests")
    return counted(tests, "test") if isinstance(tests, int) else f"{tests} tests"


def _workers(meta: dict[str, Any]) -> str:
    """Which pytest-xdist workers (or saved reports, for a merged report) the records were
    merged from, and which sent none."""
    kind = "saved report" if meta.get("merged_from") else "pytest-xdist worker"
    workers = meta.get("workers") or {}
    missing = meta.get("missing_workers") or []
    if not workers and not missing:
        return ""
    items = [
        f"<li>{_e(name)}: {_e(_tests(info))}; target "
        f"{_e(info.get('target_url', info.get('target')))}</li>"
        for name, info in sorted(workers.items())
    ]
    items.extend(
        f'<li class="missing">MISSING {_e(m.get("worker"))}: {_e(m.get("reason"))}; its tests\' '
        "streams are not in this report</li>"
        for m in missing
    )
    return (
        f'<p id="workers">Merged from {counted(len(workers), kind)}:</p><ul>{"".join(items)}</ul>'
    )


def _disagreements(records: list[TestRecord]) -> str:
    """The streams where the reader and the judging client disagree, as plugin bugs to report
    (nothing when there are none)."""
    found = disagreements(records)
    if not found:
        return ""
    rows = "".join(
        f"<tr><td>{_e(d.nodeid)}</td><td>{_e(d.stream)}</td><td>{_e(d.client)}: "
        f"{_e(d.client_concluded)}</td><td>{_e(d.reader_concluded)}</td>"
        f"<td><code>{_e(d.reproduce)}</code>"
        + (f"<br>bytes: <code>{_e(d.transcript)}</code>" if d.transcript else "")
        + "</td></tr>"
        for d in found
    )
    title = heading(len(found), sum(d.defect for d in found))
    return (
        f'<section id="disagreements"><h3>{_e(title)}</h3>'
        + _table(
            "<table><tr><th>test</th><th>stream</th><th>the client concluded</th>"
            f"<th>the reader concluded</th><th>reproduce</th></tr>{rows}</table>"
        )
        + "</section>"
    )


def render_html(document: dict[str, Any]) -> str:
    """The whole page for a JSON report document (as ``--streamguard-json`` writes it)."""
    meta = {k: v for k, v in document.items() if k != "tests"}
    tests = [_Test.from_dict(t) for t in document.get("tests", [])]
    records = [t.record for t in tests]
    counts = {v: sum(r.verdict == v for r in records) for v in _VERDICT_RANK}
    tally = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    sections = "".join(_test_section(i, t) for i, t in enumerate(tests, start=1))
    if records:
        summary = (
            _summary_table(tests)
            + (
                '<p class="muted">Times in ms; TTFT is the worst stream\'s, gaps are pooled over '
                "the test's streams (nearest-rank percentiles). Click a header to sort; hover a "
                "test name for its full id.</p>"
            )
            + _matrix_table(records)
            + _disagreements(records)
        )
    else:
        summary = '<p class="muted">No test read a stream.</p>'
    read = "test read streams" if len(records) == 1 else "tests read streams"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>pytest-streamguard report</title>"
        f"<style>{_CSS}</style></head><body>"
        '<header id="summary"><h1>pytest-streamguard report</h1>'
        f"<p>{len(records)} {read}{': ' + tally if tally else ''}.</p>"
        f"{_meta_list(meta)}</header>"
        f"<main>{summary}{sections}</main>"
        f"<script>{_SORT_JS}</script></body></html>\n"
    )


def write_html(path: Path, document: dict[str, Any]) -> None:
    """Render the JSON report ``document`` (``reports.json_document``) to ``path`` atomically."""
    # Through JSON text and back, so the page shows exactly what the JSON report holds.
    raw = json.loads(json.dumps(document))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(render_html(raw), encoding="utf-8")
    tmp.replace(path)
