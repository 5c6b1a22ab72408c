"""The HTML report: one self-contained page built from the JSON report's document.

The page holds the session summary (a table sortable by clicking its headers, each row linking
to its test) and, per test, the verdict, the deadlines, the violations, the faults with their
on/off times, the streams, a timeline plot of chunk arrivals and, for tests with many streams,
a histogram of gaps. Plots are plotly figures; plotly.js is embedded once, inline, so the file
opens with no network. Every piece of text that came from a test (node ids, stream names,
chunk text, error messages, fault arguments) is escaped.
"""

from __future__ import annotations

import html
import json
import os
import time
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from pytest_streamguard.deadlines import Deadline
from pytest_streamguard.reports import TestRecord, matrix
from pytest_streamguard.stats import percentile
from pytest_streamguard.trace import FaultRecord, StreamTrace

# A test with at least this many streams is a load test and gets a gap histogram.
HISTOGRAM_MIN_STREAMS = 4
# Sort rank of each verdict, so an ascending sort puts the tests to look at first.
_VERDICT_RANK = {"FAIL": 0, "error": 1, "caught": 2, "unchecked": 3, "pass": 4}
_HOVER_TEXT_CHARS = 40
_PLOT_CONFIG = {"displaylogo": False, "responsive": True}
_COLORS = {
    "chunk": "#1f77b4",
    "window": "rgba(44, 160, 44, 0.22)",
    "over": "rgba(214, 39, 40, 0.55)",
    "expired": "#d62728",
    "other": "#7f7f7f",
    "beat": "#9467bd",
    "fault": "rgba(255, 127, 14, 0.75)",
    "done": "#2ca02c",
    "cut": "#d62728",
}

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto;
       max-width: 1280px; padding: 16px 24px; color: #222; box-sizing: border-box; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 0 0 6px; word-break: break-all; }
h3 { font-size: 14px; margin: 14px 0 4px; }
table { border-collapse: collapse; margin: 6px 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
#summary-table { width: 100%; }
td.test { overflow-wrap: anywhere; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
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
section.test { border-top: 2px solid #ccc; margin-top: 24px; padding-top: 12px; }
ul.violations li { color: #a00; font-family: ui-monospace, monospace; font-size: 13px; }
dl.meta { display: grid; grid-template-columns: max-content auto; gap: 0 12px; margin: 8px 0; }
dl.meta dt { font-weight: 600; } dl.meta dd { margin: 0; word-break: break-all; }
.muted { color: #666; }
li.missing { color: #a00; font-weight: 600; }
.plot { border: 1px solid #eee; margin: 8px 0; }
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


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


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


def _unique_faults(record: TestRecord) -> list[FaultRecord]:
    """Each fault once, although every stream it was active during carries a copy."""
    seen: set[tuple[str, int | None]] = set()
    faults: list[FaultRecord] = []
    for trace in record.traces:
        for fault in trace.faults:
            key = (fault.describe(), fault.on_ns)
            if key not in seen:
                seen.add(key)
                faults.append(fault)
    return faults


def _hover(text: str) -> str:
    """Chunk text for a hover label: shortened, escaped (plotly renders a subset of HTML)."""
    short = text if len(text) <= _HOVER_TEXT_CHARS else text[: _HOVER_TEXT_CHARS - 1] + "\u2026"
    return _e(short)


def _merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


class _Series:
    """Points of one plotly trace; ``None`` separates line segments."""

    def __init__(self) -> None:
        self.x: list[float | None] = []
        self.y: list[float | None] = []
        self.text: list[str | None] = []

    def point(self, x: float, y: float, text: str) -> None:
        self.x.append(x)
        self.y.append(y)
        self.text.append(text)

    def segment(self, x0: float, x1: float, y: float, text: str) -> None:
        self.point(x0, y, text)
        self.point(x1, y, text)
        self.x.append(None)
        self.y.append(None)
        self.text.append(None)


def _s(ns: int, origin_ns: int) -> float:
    return (ns - origin_ns) / 1e9


def timeline_figure(record: TestRecord) -> go.Figure:
    """Chunk arrivals per stream (one row each), x in seconds since that stream's request.

    Drawn: each chunk; the deadline window (green: until the TTFT deadline after the request,
    then the chunk deadline after each chunk, so a gap that leaves the band broke it); gaps
    over the chunk deadline in red with a tick where the deadline ran out; socket reads that
    completed no data event (partial and end events), and the heartbeats (SSE comments) apart
    from them; the faults while active;
    the response headers; the end of the stream (done, or the cut/error).
    """
    deadline = record.deadline or Deadline()
    chunks, window, over, expired = _Series(), _Series(), _Series(), _Series()
    other, faults, headers, done, cut = _Series(), _Series(), _Series(), _Series(), _Series()
    beats = _Series()
    labels: list[str] = []
    x_max = deadline.ttft or 0.0
    for row, trace in enumerate(record.traces):
        labels.append(f"#{row + 1} {_e(trace.name)}")
        t0 = trace.request_ns
        stamps = [_s(c.stamp_ns, t0) for c in trace.chunks]
        intervals = [(0.0, deadline.ttft)] if deadline.ttft is not None else []
        if deadline.chunk is not None:
            intervals.extend((x, x + deadline.chunk) for x in stamps)
        # Once a stream has completed, no further chunk is due.
        until = _s(trace.end_ns, t0) if trace.completed and trace.end_ns is not None else None
        for start, end in _merge(intervals):
            if until is not None:
                if start >= until:
                    continue
                end = min(end, until)
            window.segment(start, end, row, "within deadline")
        previous: float | None = None
        for chunk, x in zip(trace.chunks, stamps, strict=True):
            gap = "" if previous is None else f"<br>gap {(x - previous) * 1e3:.1f} ms"
            chunks.point(
                x,
                row,
                f"chunk {chunk.index} at {x * 1e3:.1f} ms{gap}<br>{chunk.nbytes} B: "
                f"{_hover(chunk.text)}",
            )
            if (
                previous is not None
                and deadline.chunk is not None
                and x - previous > deadline.chunk
            ):
                over.segment(
                    previous,
                    x,
                    row,
                    f"gap {(x - previous) * 1e3:.1f} ms > chunk deadline "
                    f"{deadline.chunk * 1e3:.1f} ms (before chunk {chunk.index})",
                )
                expired.point(
                    previous + deadline.chunk,
                    row,
                    f"chunk deadline ran out ({deadline.chunk * 1e3:.1f} ms after "
                    "the previous chunk)",
                )
            previous = x
        for stamp in trace.heartbeat_ns:
            x = _s(stamp, t0)
            beats.point(x, row, f"heartbeat (SSE comment) at {x * 1e3:.1f} ms")
        data_stamps = {c.stamp_ns for c in trace.chunks} | set(trace.heartbeat_ns)
        for stamp, nbytes in trace.reads:
            if stamp not in data_stamps:
                x = _s(stamp, t0)
                other.point(x, row, f"{nbytes} B read at {x * 1e3:.1f} ms, no data event")
        end_ns = trace.end_ns if trace.end_ns is not None else t0
        for fault in trace.faults:
            if fault.on_ns is None:
                continue
            on = max(_s(fault.on_ns, t0), 0.0)
            off = _s(fault.off_ns if fault.off_ns is not None else end_ns, t0)
            faults.segment(on, max(off, on), row + 0.28, f"fault: {_e(fault.describe())}")
        if trace.response_ns is not None:
            x = _s(trace.response_ns, t0)
            headers.point(x, row, f"response headers ({trace.status_code}) at {x * 1e3:.1f} ms")
        if trace.end_ns is not None:
            x = _s(trace.end_ns, t0)
            x_max = max(x_max, x)
            if trace.completed:
                done.point(x, row, f"completed at {x * 1e3:.1f} ms")
            else:
                what = trace.error or "ended early"
                cut.point(x, row, f"stopped at {x * 1e3:.1f} ms: {_e(what)}")
        x_max = max([x_max, *stamps])

    fig = go.Figure()
    lines: list[tuple[str, _Series, dict[str, Any]]] = [
        ("within deadline", window, {"color": _COLORS["window"], "width": 12}),
        ("gap over deadline", over, {"color": _COLORS["over"], "width": 6}),
        ("fault active", faults, {"color": _COLORS["fault"], "width": 4}),
    ]
    marks: list[tuple[str, _Series, dict[str, Any]]] = [
        ("response headers", headers, {"symbol": "circle-open", "size": 9, "color": "#555"}),
        (
            "other bytes (end event, partial events)",
            other,
            {"symbol": "line-ns-open", "size": 9, "color": _COLORS["other"]},
        ),
        ("heartbeat", beats, {"symbol": "diamond-open", "size": 8, "color": _COLORS["beat"]}),
        ("chunk", chunks, {"symbol": "circle", "size": 7, "color": _COLORS["chunk"]}),
        (
            "chunk deadline ran out",
            expired,
            {
                "symbol": "line-ns-open",
                "size": 18,
                "color": _COLORS["expired"],
                "line": {"width": 3},
            },
        ),
        ("completed", done, {"symbol": "diamond", "size": 11, "color": _COLORS["done"]}),
        ("cut / error", cut, {"symbol": "x", "size": 13, "color": _COLORS["cut"]}),
    ]
    drawn = [(name, s, "lines", {"line": style}) for name, s, style in lines]
    drawn += [(name, s, "markers", {"marker": style}) for name, s, style in marks]
    for name, series, mode, style in drawn:
        if series.x:
            fig.add_trace(
                go.Scatter(
                    x=series.x,
                    y=series.y,
                    text=series.text,
                    name=name,
                    mode=mode,
                    hovertemplate="%{text}<extra></extra>",
                    **style,
                )
            )
    if deadline.ttft is not None:
        fig.add_vline(
            x=deadline.ttft,
            line={"dash": "dash", "color": "#d62728", "width": 1},
            annotation_text=f"TTFT deadline {deadline.ttft * 1e3:.0f} ms",
            annotation_position="top right",
        )
    rows = len(record.traces)
    chunk_note = (
        f"; chunk deadline {deadline.chunk * 1e3:.0f} ms after each chunk"
        if deadline.chunk is not None
        else ""
    )
    fig.update_layout(
        title={"text": f"Chunk arrivals per stream{chunk_note}", "font": {"size": 14}},
        template="plotly_white",
        height=min(max(280, 120 + 40 * rows), 900),
        margin={"l": 10, "r": 10, "t": 50, "b": 45},
        legend={"font": {"size": 11}, "tracegroupgap": 2},
        hovermode="closest",
    )
    fig.update_xaxes(
        title_text="seconds since the stream's request was sent",
        range=[-0.02 * max(x_max, 0.1), x_max * 1.05 + 0.01],
        zeroline=True,
    )
    fig.update_yaxes(
        tickvals=list(range(rows)),
        ticktext=labels,
        # Descending, so stream #1 is the top row; room below the last row for its faults.
        range=[rows - 0.45, -0.6],
        showgrid=False,
        zeroline=False,
    )
    return fig


def gap_histogram(record: TestRecord) -> go.Figure:
    """The distribution of every gap of every stream of the test (ms), with the deadline."""
    gaps_ms = [g * 1e3 for g in record.gaps()]
    p50, p95 = percentile(gaps_ms, 50), percentile(gaps_ms, 95)
    fig = go.Figure(
        go.Histogram(
            x=gaps_ms,
            name="gaps",
            marker={"color": _COLORS["chunk"]},
            hovertemplate="%{x} ms: %{y} gaps<extra></extra>",
        )
    )
    chunk = record.deadline.chunk if record.deadline is not None else None
    if chunk is not None:
        fig.add_vline(
            x=chunk * 1e3,
            line={"dash": "dash", "color": "#d62728", "width": 1},
            annotation_text=f"chunk deadline {chunk * 1e3:.0f} ms",
            annotation_position="top right",
        )
    stats = "" if p50 is None else f" (p50 {p50:.1f} ms, p95 {p95:.1f} ms, n={len(gaps_ms)})"
    fig.update_layout(
        title={"text": f"Gaps between chunks, all streams pooled{stats}", "font": {"size": 14}},
        template="plotly_white",
        height=300,
        margin={"l": 10, "r": 10, "t": 50, "b": 40},
        showlegend=False,
        bargap=0.05,
    )
    fig.update_xaxes(title_text="gap (ms)")
    fig.update_yaxes(title_text="gaps")
    return fig


def _figure_html(fig: go.Figure, div_id: str) -> str:
    body: str = fig.to_html(
        full_html=False, include_plotlyjs=False, div_id=div_id, config=_PLOT_CONFIG
    )
    return f'<div class="plot">{body}</div>'


def _summary_table(records: list[TestRecord]) -> str:
    heads = [
        ("test", "text"),
        ("verdict", "number"),
        ("streams", "number"),
        ("chunks", "number"),
        ("worst TTFT (ms)", "number"),
        ("gap p50 (ms)", "number"),
        ("gap p95 (ms)", "number"),
        ("max gap (ms)", "number"),
        ("deadline", "text"),
        ("faults", "text"),
    ]
    head = "".join(f'<th data-type="{kind}">{_e(name)}</th>' for name, kind in heads)
    rows = []
    for index, record in enumerate(records, start=1):
        gaps = record.gaps()
        chunks = sum(len(t.chunks) for t in record.traces)
        deadline = record.deadline.describe() if record.deadline is not None else "none"
        rows.append(
            "<tr>"
            f'<td class="test"><a href="#{_test_anchor(index)}">{_e(record.nodeid)}</a></td>'
            f'<td data-sort="{_VERDICT_RANK.get(record.verdict, 9)}">'
            f"{_verdict(record.verdict)}</td>"
            f'<td class="num">{len(record.traces)}</td>'
            f'<td class="num">{chunks}</td>'
            f"{_num_cell(record.worst_ttft())}"
            f"{_num_cell(percentile(gaps, 50))}"
            f"{_num_cell(percentile(gaps, 95))}"
            f"{_num_cell(max(gaps) if gaps else None)}"
            f"<td>{_e(deadline)}</td>"
            f"<td>{_e(', '.join(record.fault_names()) or '-')}</td>"
            "</tr>"
        )
    return (
        '<table class="sortable" id="summary-table">'
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
        cells = [f'<td class="test">{_e(row["test"])}</td>']
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
        '<h2 id="matrix">Fault matrix</h2><table id="matrix-table">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        '<p class="muted">Per profile: verdict, worst TTFT / gap p95 (ms).</p>'
    )


def _faults_table(record: TestRecord) -> str:
    faults = _unique_faults(record)
    if not faults:
        return '<p class="muted">No faults.</p>'
    origin = min(t.request_ns for t in record.traces)

    def at(ns: int | None) -> str:
        return "-" if ns is None else f"{_s(ns, origin):.3f}"

    rows = "".join(
        f"<tr><td>{_e(f.describe())}</td><td>{_e(', '.join(f.toxics) or '-')}</td>"
        f'<td class="num">{at(f.on_ns)}</td><td class="num">{at(f.off_ns)}</td></tr>'
        for f in faults
    )
    return (
        '<table class="faults"><thead><tr><th>fault</th><th>toxics</th>'
        "<th>on (s)</th><th>off (s)</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
        '<p class="muted">On/off in seconds since the test\'s first request was sent '
        "(negative: switched on before it).</p>"
    )


def _outcome(trace: StreamTrace) -> str:
    if trace.completed:
        return "completed"
    kind = f"{trace.error_kind}: " if trace.error_kind else ""
    return f"stopped: {kind}{trace.error or 'ended early'}"


def _streams_table(record: TestRecord) -> str:
    rows = "".join(
        f"<tr><td>{row}</td><td>{_e(t.name)}</td><td>{_e(t.status_code or '-')}</td>"
        f'<td>{_e(_outcome(t))}</td><td class="num">{len(t.chunks)}</td>'
        f"{_num_cell(t.ttft)}{_num_cell(t.max_gap)}{_num_cell(t.total)}"
        f'<td class="num">{t.heartbeats}</td><td class="num">{t.nbytes}</td></tr>'
        for row, t in enumerate(record.traces, start=1)
    )
    return (
        '<table class="streams"><thead><tr><th>#</th><th>stream</th><th>status</th>'
        "<th>outcome</th><th>chunks</th><th>TTFT (ms)</th><th>max gap (ms)</th>"
        "<th>total (ms)</th><th>heartbeats</th><th>bytes</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


def _test_section(index: int, record: TestRecord) -> str:
    anchor = _test_anchor(index)
    deadline = record.deadline.describe() if record.deadline is not None else "none (unchecked)"
    violations = ""
    if record.violations:
        items = "".join(f"<li>{_e(v)}</li>" for v in record.violations)
        violations = f'<ul class="violations">{items}</ul>'
    plots = _figure_html(timeline_figure(record), f"timeline-{index}")
    if len(record.traces) >= HISTOGRAM_MIN_STREAMS and record.gaps():
        plots += _figure_html(gap_histogram(record), f"gaps-{index}")
    return (
        f'<section class="test" id="{anchor}" data-nodeid="{_e(record.nodeid)}" '
        f'data-verdict="{_e(record.verdict)}">'
        f"<h2>{_verdict(record.verdict)} {_e(record.nodeid)}</h2>"
        f"<p>Deadline: <code>{_e(deadline)}</code> (seconds)"
        f"{'' if record.worker is None else f'; ran on pytest-xdist worker {_e(record.worker)}'}"
        "</p>"
        f"{violations}<h3>Faults</h3>{_faults_table(record)}"
        f"<h3>Streams</h3>{_streams_table(record)}{plots}"
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


def _workers(meta: dict[str, Any]) -> str:
    """Which pytest-xdist workers (or saved reports, for a merged report) the records were
    merged from, and which sent none."""
    kind = "report(s)" if meta.get("merged_from") else "pytest-xdist worker(s)"
    workers = meta.get("workers") or {}
    missing = meta.get("missing_workers") or []
    if not workers and not missing:
        return ""
    items = [
        f"<li>{_e(name)}: {_e(info.get('tests'))} test(s); target "
        f"{_e(info.get('target_url', info.get('target')))}</li>"
        for name, info in sorted(workers.items())
    ]
    items.extend(
        f'<li class="missing">MISSING {_e(m.get("worker"))}: {_e(m.get("reason"))}; its tests\' '
        "streams are not in this report</li>"
        for m in missing
    )
    return f'<p id="workers">Merged from {len(workers)} {kind}:</p><ul>{"".join(items)}</ul>'


def render_html(meta: dict[str, Any], records: list[TestRecord]) -> str:
    """The whole page for a report's metadata and records (as :func:`load_json` returns)."""
    counts = {v: sum(r.verdict == v for r in records) for v in _VERDICT_RANK}
    tally = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    sections = "".join(_test_section(i, r) for i, r in enumerate(records, start=1))
    if records:
        summary = (
            _summary_table(records)
            + (
                '<p class="muted">Times in ms; TTFT is the worst stream\'s, gaps are pooled over '
                "the test's streams (nearest-rank percentiles). Click a header to sort.</p>"
            )
            + _matrix_table(records)
        )
    else:
        summary = '<p class="muted">No test read a stream.</p>'
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>pytest-streamguard report</title>"
        f"<style>{_CSS}</style>"
        f"<script>{get_plotlyjs()}</script></head><body>"
        '<header id="summary"><h1>pytest-streamguard report</h1>'
        f"<p>{len(records)} test(s) read streams{': ' + tally if tally else ''}.</p>"
        f"{_meta_list(meta)}</header>"
        f"<main>{summary}{sections}</main>"
        f"<script>{_SORT_JS}</script></body></html>\n"
    )


def write_html(path: Path, document: dict[str, Any]) -> None:
    """Render the JSON report ``document`` (``reports.json_document``) to ``path`` atomically."""
    # Through JSON text and back, so the page shows exactly what the JSON report holds.
    raw = json.loads(json.dumps(document))
    meta = {k: v for k, v in raw.items() if k != "tests"}
    records = [TestRecord.from_dict(t) for t in raw.get("tests", [])]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(render_html(meta, records), encoding="utf-8")
    tmp.replace(path)
