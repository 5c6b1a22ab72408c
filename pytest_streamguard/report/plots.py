"""The HTML report's plots, drawn as inline SVG: a timeline of each test's streams, the probe
sent beside them (where it waited), and a histogram of its gaps.

No JavaScript library: every mark is an SVG shape whose ``<title>`` is its hover text, so a
report of thousands of chunks stays small and opens offline. Marks that would land on the same
few pixels of a row are drawn as one, titled with the range it stands for (``chunks 12-15``):
the page's size follows its width, not the number of chunks. Every piece of text that came
from a test (stream names, chunk text, error messages, fault arguments) is escaped.
"""

from __future__ import annotations

import html
import math
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field

from pytest_streamguard.common.display import counted
from pytest_streamguard.report.records import TestRecord
from pytest_streamguard.stream.trace import StreamTrace
from pytest_streamguard.verdict.deadlines import Deadline
from pytest_streamguard.verdict.probe import PROBE_WAIT_S
from pytest_streamguard.verdict.stats import percentile

# Drawing units of the viewBox; the SVG is scaled to the page's width.
WIDTH = 1200
_LABEL_W = 210
_RIGHT = 16
_TOP = 22
_AXIS_H = 40
_X0, _X1 = _LABEL_W, WIDTH - _RIGHT
# Marks closer than this on one row are drawn as one (about one mark's width).
BIN_UNITS = 4.0
_HOVER_TEXT_CHARS = 40
_LABEL_CHARS = 30
_HISTOGRAM_BINS = 40
_HISTOGRAM_H = 220

COLORS = {
    "chunk": "#1f77b4",
    "window": "rgba(44,160,44,0.22)",
    "over": "rgba(214,39,40,0.55)",
    "expired": "#d62728",
    "other": "#7f7f7f",
    "beat": "#9467bd",
    "fault": "rgba(255,127,14,0.8)",
    "headers": "#555",
    "done": "#2ca02c",
    "cut": "#d62728",
    "ttft": "#d62728",
    "said": "#8c564b",
}


def _e(value: object) -> str:
    """``value`` as text for HTML or SVG, quotes escaped too (the report's pages use it)."""
    return html.escape(str(value), quote=True)


def _f(value: float) -> str:
    """A coordinate: one decimal, no trailing ``.0``."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _s(ns: int, origin_ns: int) -> float:
    return (ns - origin_ns) / 1e9


def fault_fired(copies: Sequence[dict[str, object]]) -> bool | None:
    """Whether a fault fired, from the copies of its record on each stream it was active on:
    True if any says so, False if all say it did not, None for a report that predates
    ``fired``."""
    values = [c["fired"] for c in copies if isinstance(c.get("fired"), bool)]
    if not values:
        return None
    return any(values)


@dataclass(frozen=True)
class _Mark:
    x: float  # seconds since the stream's request
    title: str
    index: int | None = None  # a chunk's index, for the title of a run of chunks


class _Scale:
    """Seconds to drawing units, and the axis ticks."""

    def __init__(self, x_max: float) -> None:
        self.lo = -0.02 * max(x_max, 0.1)
        self.hi = x_max * 1.05 + 0.01

    def __call__(self, seconds: float) -> float:
        return _X0 + (seconds - self.lo) / (self.hi - self.lo) * (_X1 - _X0)

    def clamped(self, seconds: float) -> float:
        """Like calling the scale, but kept inside the plot (for bars that outlast the axis)."""
        return min(max(self(seconds), _X0), _X1)

    def ticks(self) -> Iterator[float]:
        return _ticks(max(self.lo, 0.0), self.hi)


def _ticks(lo: float, hi: float, target: int = 10) -> Iterator[float]:
    """Round values from ``lo`` to ``hi``, 1, 2 or 5 times a power of ten apart."""
    raw = (hi - lo) / target
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    value = math.ceil(lo / step) * step
    while value <= hi + step * 1e-9:
        yield round(value, 12)
        value += step


def _line_label(x: float, y: float, text: str) -> str:
    """The label of a deadline line: right of it, or left of it near the plot's right end."""
    side = 'dx="4"' if x < _X1 - 160 else 'dx="-4" text-anchor="end"'
    return (
        f'<text x="{_f(x)}" y="{_f(y)}" {side} font-size="11" stroke="none" '
        f'fill="{COLORS["ttft"]}">{_e(text)}</text>'
    )


def _tick_label(value: float) -> str:
    return f"{value:.6g}"


def _binned(marks: list[_Mark], scale: _Scale, what: str) -> list[tuple[float, int, str]]:
    """Marks of one row as (x units, count, title): runs within :data:`BIN_UNITS` joined."""
    out: list[tuple[float, int, str]] = []
    group: list[_Mark] = []

    def flush() -> None:
        if len(group) == 1:
            out.append((scale(group[0].x), 1, group[0].title))
        elif group:
            first, last = group[0], group[-1]
            which = f" ({first.index}-{last.index})" if first.index is not None else ""
            title = f"{len(group)} {what}{which} from {_ms(first.x)} to {_ms(last.x)}"
            out.append((scale(first.x), len(group), title))
        group.clear()

    for mark in sorted(marks, key=lambda m: m.x):
        if group and scale(mark.x) - scale(group[0].x) >= BIN_UNITS:
            flush()
        group.append(mark)
    flush()
    return out


def _merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


class _Layer:
    """The shapes of one kind of mark, drawn in one ``<g class=...>`` group."""

    def __init__(self, kind: str, style: str) -> None:
        self.kind = kind
        self.style = style
        self.shapes: list[str] = []

    def add(self, shape: str, title: str, count: int = 1) -> None:
        n = f' data-n="{count}"' if count > 1 else ""
        # The shape's closing tag is added here so the title can sit inside it.
        tag = shape.split(" ", 1)[0][1:]
        self.shapes.append(f"{shape}{n}><title>{_e(title)}</title></{tag}>")

    def svg(self) -> str:
        if not self.shapes:
            return ""
        return f'<g class="{self.kind}" {self.style}>{"".join(self.shapes)}</g>'


# Legend entries: layer kind, label, and the swatch's shape in a 16x12 box (drawn in its
# layer's style).
_LEGEND = [
    ("window", "within deadline", '<rect y="3" width="16" height="6"'),
    ("over", "gap over deadline", '<rect y="4" width="16" height="4"'),
    ("expired", "chunk deadline ran out", '<path d="M8 0v12"'),
    ("faults", "fault active", '<rect y="4" width="16" height="4"'),
    ("faults-unfired", "fault never fired", '<rect y="3.5" width="15" height="5"'),
    ("headers", "response headers", '<circle cx="8" cy="6" r="4"'),
    ("other", "other bytes (end event, partial events)", '<path d="M8 1v10"'),
    ("beats", "heartbeat", '<path d="M8 1l5 5-5 5-5-5z"'),
    ("said", "a hop's own words", '<path d="M3 2h10l-5 8z"'),
    ("chunks", "chunk", '<circle cx="8" cy="6" r="3.5"'),
    ("done", "completed", '<path d="M8 0l6 6-6 6-6-6z"'),
    ("cut", "cut / error", '<path d="M3 1l10 10M13 1l-10 10"'),
]


def _legend(present: set[str]) -> str:
    items = "".join(
        f'<span class="key" data-kind="{kind}"><svg width="16" height="12" aria-hidden="true">'
        f"{shape} {_LAYER_STYLES[kind]}/></svg>{_e(label)}</span>"
        for kind, label, shape in _LEGEND
        if kind in present
    )
    return f'<div class="legend">{items}</div>'


def _chunk_title(
    trace: StreamTrace, index: int, x: float, previous: float | None, *, text: bool
) -> str:
    chunk = trace.chunks[index]
    gap = "" if previous is None else f", +{_ms(x - previous)}"
    kind = "" if chunk.kind == "text" else f" ({chunk.kind})"
    title = f"chunk {chunk.index}{kind} at {_ms(x)}{gap}, {chunk.nbytes} B"
    return f"{title}: {_short(chunk.text, _HOVER_TEXT_CHARS)!r}" if text else title


# Each layer's style, bottom first: the deadline window under everything, the stream's end on top.
_LAYER_STYLES = {
    "window": f'fill="{COLORS["window"]}"',
    "over": f'fill="{COLORS["over"]}"',
    "faults": f'fill="{COLORS["fault"]}"',
    "faults-unfired": f'fill="none" stroke="{COLORS["fault"]}" stroke-width="1.5" '
    'stroke-dasharray="4 3"',
    "headers": f'fill="#fff" stroke="{COLORS["headers"]}" stroke-width="1.2"',
    "other": f'stroke="{COLORS["other"]}" stroke-width="1.5"',
    "beats": f'fill="#fff" stroke="{COLORS["beat"]}" stroke-width="1.5"',
    "said": f'fill="{COLORS["said"]}"',
    "chunks": f'fill="{COLORS["chunk"]}"',
    "expired": f'stroke="{COLORS["expired"]}" stroke-width="2"',
    "done": f'fill="{COLORS["done"]}"',
    "cut": f'stroke="{COLORS["cut"]}" stroke-width="2.5"',
}


def _layers() -> dict[str, _Layer]:
    return {kind: _Layer(kind, style) for kind, style in _LAYER_STYLES.items()}


@dataclass
class _Plot:
    """What drawing every row of a timeline shares: its deadline and scale, the size of a
    row and of a chunk's dot, which faults fired, and what the rows drew so far."""

    deadline: Deadline
    scale: _Scale
    row_h: float
    fired: dict[tuple[str, int | None], bool | None]
    untexted: Collection[int] = ()
    layers: dict[str, _Layer] = field(default_factory=_layers)
    labels: list[str] = field(default_factory=list)

    @property
    def r(self) -> float:
        """A chunk's dot's radius; the other marks are sized from it."""
        return min(3.5, self.row_h / 7)

    @property
    def band(self) -> float:
        """The height of the deadline window's band."""
        return self.row_h * 0.4


@dataclass(frozen=True)
class _Row:
    """One stream's row: its trace, the row's middle, its chunks' x (seconds) and its index
    (0 first)."""

    trace: StreamTrace
    y: float
    stamps: list[float]
    index: int

    @property
    def t0(self) -> int:
        """The stream's request stamp, the row's zero."""
        return self.trace.request_ns


def timeline_svg(
    record: TestRecord,
    fired: dict[tuple[str, int | None], bool | None],
    untexted: Collection[int] = (),
) -> str:
    """Chunk arrivals per stream (one row each), x in seconds since that stream's request,
    with a legend of the marks drawn (:data:`_LEGEND`; docs/reports.md, "HTML"); ``fired``
    says, per fault (description, on stamp), whether it fired (None: unknown); ``untexted``:
    the indexes of the streams whose chunk texts the report left out (a chunk's hover text
    then ends at its size)."""
    deadline = record.deadline or Deadline()
    rows = len(record.traces)
    row_h = 30.0 if rows <= 12 else max(12.0, min(30.0, 600.0 / rows))
    plot = _Plot(deadline, _Scale(_x_max(record, deadline)), row_h, fired, untexted)
    for index, trace in enumerate(record.traces):
        _draw_row(plot, index, trace)
    plot_bottom = _TOP + rows * row_h
    height = plot_bottom + _AXIS_H
    layers = plot.layers.values()
    present = {layer.kind for layer in layers if layer.shapes}
    body = "".join(layer.svg() for layer in layers)
    return (
        f"{_legend(present)}"
        f'<svg class="timeline" viewBox="0 0 {WIDTH} {_f(height)}" '
        f'data-rows="{rows}" role="img" aria-label="timeline of {counted(rows, "stream")}">'
        f'<g class="rows" font-size="12" text-anchor="end" fill="#222">{"".join(plot.labels)}</g>'
        f"{_axis(plot.scale, plot_bottom)}{_ttft_line(deadline, plot.scale, plot_bottom)}{body}"
        "</svg>"
    )


def _x_max(record: TestRecord, deadline: Deadline) -> float:
    """The axis' end: the latest chunk or end of any stream, or the TTFT deadline."""
    x_max = deadline.ttft or 0.0
    for trace in record.traces:
        t0 = trace.request_ns
        if trace.end_ns is not None:
            x_max = max(x_max, _s(trace.end_ns, t0))
        if trace.chunks:
            x_max = max(x_max, _s(trace.chunks[-1].stamp_ns, t0))
    return x_max


def _draw_row(plot: _Plot, index: int, trace: StreamTrace) -> None:
    """One stream's label and every mark of its row."""
    y = _TOP + plot.row_h * (index + 0.45)
    name = f"#{index + 1} {trace.name}"
    plot.labels.append(
        f'<text x="{_LABEL_W - 8}" y="{_f(y + 4)}"><title>{_e(name)}</title>'
        f"{_e(_short(name, _LABEL_CHARS))}</text>"
    )
    row = _Row(trace, y, [_s(c.stamp_ns, trace.request_ns) for c in trace.chunks], index)
    _draw_window(plot, row)
    _draw_chunks(plot, row)
    _draw_heartbeats(plot, row)
    _draw_said(plot, row)
    _draw_other_reads(plot, row)
    _draw_faults(plot, row)
    _draw_headers(plot, row)
    _draw_end(plot, row)


def _draw_window(plot: _Plot, row: _Row) -> None:
    """The band of time within the deadlines: until the TTFT deadline, then the chunk
    deadline after each chunk."""
    deadline, trace = plot.deadline, row.trace
    intervals = [(0.0, deadline.ttft)] if deadline.ttft is not None else []
    if deadline.chunk is not None:
        intervals.extend((x, x + deadline.chunk) for x in row.stamps)
    # Once a stream has completed, no further chunk is due.
    until = _s(trace.end_ns, row.t0) if trace.completed and trace.end_ns is not None else None
    band = plot.band
    for start, end in _merge(intervals):
        if until is not None:
            if start >= until:
                continue
            end = min(end, until)
        x0, x1 = plot.scale.clamped(start), plot.scale.clamped(end)
        plot.layers["window"].add(
            f'<rect x="{_f(x0)}" y="{_f(row.y - band / 2)}" width="{_f(x1 - x0)}" '
            f'height="{_f(band)}"',
            f"within deadline from {_ms(start)} to {_ms(end)}",
        )


def _draw_chunks(plot: _Plot, row: _Row) -> None:
    """Each chunk (runs of close ones as one), and each gap over the chunk deadline with a
    tick where the deadline ran out."""
    trace, y, scale, chunk = row.trace, row.y, plot.scale, plot.deadline.chunk
    band = plot.band
    marks: list[_Mark] = []
    previous: float | None = None
    text = row.index not in plot.untexted
    for i, x in enumerate(row.stamps):
        title = _chunk_title(trace, i, x, previous, text=text)
        marks.append(_Mark(x, title, trace.chunks[i].index))
        if previous is not None and chunk is not None and x - previous > chunk:
            x0, x1 = scale(previous), scale(x)
            plot.layers["over"].add(
                f'<rect x="{_f(x0)}" y="{_f(y - band / 4)}" width="{_f(x1 - x0)}" '
                f'height="{_f(band / 2)}"',
                f"gap {_ms(x - previous)} > chunk deadline {_ms(chunk)} "
                f"(before chunk {trace.chunks[i].index})",
            )
            xe = scale(previous + chunk)
            plot.layers["expired"].add(
                f'<path d="M{_f(xe)} {_f(y - band)}v{_f(2 * band)}"',
                f"chunk deadline ran out ({_ms(chunk)} after the previous chunk)",
            )
        previous = x
    for x, count, title in _binned(marks, scale, "chunks"):
        plot.layers["chunks"].add(
            f'<circle cx="{_f(x)}" cy="{_f(y)}" r="{_f(plot.r)}"', title, count
        )


def _draw_heartbeats(plot: _Plot, row: _Row) -> None:
    """The heartbeats (SSE comments), as diamonds."""
    t0, y = row.t0, row.y
    beat_marks = [
        _Mark(_s(s, t0), f"heartbeat (SSE comment) at {_ms(_s(s, t0))}")
        for s in row.trace.heartbeat_ns
    ]
    d = plot.r * 1.3
    for x, count, title in _binned(beat_marks, plot.scale, "heartbeats"):
        plot.layers["beats"].add(
            f'<path d="M{_f(x)} {_f(y - d)}l{_f(d)} {_f(d)} {_f(-d)} {_f(d)} {_f(-d)} {_f(-d)}z"',
            title,
            count,
        )


def _draw_said(plot: _Plot, row: _Row) -> None:
    """What the hops wrote while the stream was open (kept for a failed test), as triangles
    over the row; hovering one shows the line (a traceback folded to its exception)."""
    d = plot.r * 1.3
    marks = [
        _Mark(_s(s.stamp_ns, row.t0), f"{s.timeline_text()} at {_ms(_s(s.stamp_ns, row.t0))}")
        for s in row.trace.said
    ]
    for x, count, title in _binned(marks, plot.scale, "lines"):
        top = row.y - 3 * d
        plot.layers["said"].add(
            f'<path d="M{_f(x - d)} {_f(top)}h{_f(2 * d)}l{_f(-d)} {_f(1.5 * d)}z"', title, count
        )


def _draw_other_reads(plot: _Plot, row: _Row) -> None:
    """The socket reads that completed no data event (partial and end events)."""
    trace, t0 = row.trace, row.t0
    data_stamps = {c.stamp_ns for c in trace.chunks} | set(trace.heartbeat_ns)
    other_marks = [
        _Mark(_s(s, t0), f"{n} B read at {_ms(_s(s, t0))}, no data event")
        for s, n in trace.reads
        if s not in data_stamps
    ]
    band = plot.band
    for x, count, title in _binned(other_marks, plot.scale, "reads"):
        plot.layers["other"].add(
            f'<path d="M{_f(x)} {_f(row.y - band / 2)}v{_f(band)}"', title, count
        )


def _draw_faults(plot: _Plot, row: _Row) -> None:
    """Each fault while it was on, under the row (outlined when it never fired)."""
    trace, t0 = row.trace, row.t0
    end_ns = trace.end_ns if trace.end_ns is not None else t0
    for fault in trace.faults:
        if fault.on_ns is None:
            continue
        on = max(_s(fault.on_ns, t0), 0.0)
        off = max(_s(fault.off_ns if fault.off_ns is not None else end_ns, t0), on)
        x0, x1 = plot.scale.clamped(on), plot.scale.clamped(off)
        was_fired = plot.fired.get((fault.describe(), fault.on_ns))
        layer = plot.layers["faults-unfired"] if was_fired is False else plot.layers["faults"]
        note = ": never fired" if was_fired is False else ""
        fy = row.y + plot.row_h * 0.3
        layer.add(
            f'<rect x="{_f(x0)}" y="{_f(fy - 2)}" width="{_f(max(x1 - x0, 2.0))}" height="4"',
            f"fault {fault.describe()}{note}, on {_ms(on)} to {_ms(off)}",
        )


def _draw_headers(plot: _Plot, row: _Row) -> None:
    """When the response headers came."""
    trace = row.trace
    if trace.response_ns is not None:
        x = _s(trace.response_ns, row.t0)
        plot.layers["headers"].add(
            f'<circle cx="{_f(plot.scale(x))}" cy="{_f(row.y)}" r="{_f(plot.r * 1.3)}"',
            f"response headers ({trace.status_code}) at {_ms(x)}",
        )


def _draw_end(plot: _Plot, row: _Row) -> None:
    """The stream's end: done (a diamond) or cut/error (a cross)."""
    trace, y = row.trace, row.y
    if trace.end_ns is None:
        return
    x = _s(trace.end_ns, row.t0)
    px, d = plot.scale(x), plot.r * 1.6
    if trace.completed:
        plot.layers["done"].add(
            f'<path d="M{_f(px)} {_f(y - d)}l{_f(d)} {_f(d)} {_f(-d)} {_f(d)} {_f(-d)} {_f(-d)}z"',
            f"completed at {_ms(x)}",
        )
    else:
        what = f"{trace.error_kind}: " if trace.error_kind else ""
        plot.layers["cut"].add(
            f'<path d="M{_f(px - d)} {_f(y - d)}l{_f(2 * d)} {_f(2 * d)}'
            f'm0 {_f(-2 * d)}l{_f(-2 * d)} {_f(2 * d)}"',
            f"stopped at {_ms(x)}: {what}{trace.error or 'ended early'}",
        )


def _axis(scale: _Scale, plot_bottom: float) -> str:
    """The x axis: its ticks, their grid lines and its title."""
    grid = []
    for tick in scale.ticks():
        tx = _f(scale(tick))
        grid.append(
            f'<path d="M{tx} {_TOP}V{_f(plot_bottom)}" stroke="#eee"/>'
            f'<text x="{tx}" y="{_f(plot_bottom + 15)}" text-anchor="middle">'
            f"{_tick_label(tick)}</text>"
        )
    return (
        f'<g class="axis" font-size="11" fill="#444">{"".join(grid)}'
        f'<path d="M{_X0} {_f(plot_bottom)}H{_X1}" stroke="#999"/>'
        f'<text x="{(_X0 + _X1) / 2}" y="{_f(plot_bottom + 33)}" text-anchor="middle">'
        "seconds since the stream's request was sent</text></g>"
    )


def _ttft_line(deadline: Deadline, scale: _Scale, plot_bottom: float) -> str:
    """The TTFT deadline as a dashed line over every row (empty without one)."""
    if deadline.ttft is None:
        return ""
    tx = _f(scale(deadline.ttft))
    return (
        f'<g class="ttft" data-x="{deadline.ttft!r}" stroke="{COLORS["ttft"]}">'
        f'<path d="M{tx} {_TOP - 6}V{_f(plot_bottom)}" stroke-dasharray="5 4"/>'
        + _line_label(scale(deadline.ttft), _TOP - 9, f"TTFT deadline {deadline.ttft * 1e3:.0f} ms")
        + f"<title>TTFT deadline {_ms(deadline.ttft)} after the request</title></g>"
    )


_PROBE_H = 70.0


def probe_svg(record: TestRecord) -> str:
    """The probe's samples under the streams' timeline (empty without any), x in seconds since
    the test's first request: a pale band while it ran, and in red each stretch in which it
    waited (``PROBE_WAIT_S`` or more), stretches that touch merged into one mark."""
    probe = record.probe
    if probe is None or not probe.samples or not record.traces:
        return ""
    t0 = min(t.request_ns for t in record.traces)
    ends = [stamp + (latency or 0) for stamp, latency in probe.samples]
    x_max = max(_s(max(ends), t0), max(_s(t.end_ns or t.request_ns, t0) for t in record.traces))
    scale = _Scale(x_max)
    floor = int(PROBE_WAIT_S * 1e9)
    waits: list[tuple[float, float]] = []
    for k, (stamp, latency) in enumerate(probe.samples):
        if latency is None:
            nxt = probe.samples[k + 1][0] if k + 1 < len(probe.samples) else stamp
            waits.append((_s(stamp, t0), _s(max(nxt, stamp), t0)))
        elif latency >= floor:
            waits.append((_s(stamp, t0), _s(stamp + latency, t0)))
    y, band = _TOP + 14.0, 16.0
    first, last = _s(probe.samples[0][0], t0), _s(max(ends), t0)
    x0, x1 = scale.clamped(first), scale.clamped(last)
    answered = _Layer("probe-ran", 'fill="rgba(44,160,44,0.22)"')
    answered.add(
        f'<rect x="{_f(x0)}" y="{_f(y - band / 2)}" width="{_f(max(x1 - x0, 2.0))}" '
        f'height="{_f(band)}"',
        f"{probe.what}: {counted(len(probe.samples), 'probe')} every "
        f"{_ms(probe.interval_s)}, from {_ms(first)} to {_ms(last)}",
    )
    waited = _Layer("probe-waited", f'fill="{COLORS["over"]}"')
    for start, end in _merge(waits):
        wx0, wx1 = scale.clamped(start), scale.clamped(end)
        waited.add(
            f'<rect x="{_f(wx0)}" y="{_f(y - band / 2)}" width="{_f(max(wx1 - wx0, 2.0))}" '
            f'height="{_f(band)}"',
            f"{probe.what} waited {_ms(end - start)}, from {_ms(start)} to {_ms(end)}",
        )
    label = _short(f"probe: {probe.what}", _LABEL_CHARS)
    ticks = "".join(
        f'<text x="{_f(scale(tick))}" y="{_f(y + band + 14)}" text-anchor="middle">'
        f"{_tick_label(tick)}</text>"
        for tick in scale.ticks()
    )
    return (
        f'<svg class="probe" viewBox="0 0 {WIDTH} {_f(_PROBE_H)}" role="img" '
        f'aria-label="{_e(probe.what)} beside the streams">'
        f'<text x="{_LABEL_W - 8}" y="{_f(y + 4)}" font-size="12" text-anchor="end" '
        f'fill="#222"><title>{_e(probe.what)}</title>{_e(label)}</text>'
        f'<g class="axis" font-size="11" fill="#444">{ticks}</g>'
        f"{answered.svg()}{waited.svg()}</svg>"
    )


def gap_histogram_svg(record: TestRecord) -> str:
    """The distribution of every gap of every stream of the test (ms), with the chunk
    deadline as a dashed line; each bar's title gives its range and count."""
    gaps_ms = [g * 1e3 for g in record.gaps()]
    chunk = record.deadline.chunk if record.deadline is not None else None
    top = max([*gaps_ms, (chunk or 0.0) * 1e3 * 1.05, 1e-3])
    width = top / _HISTOGRAM_BINS
    counts = [0] * _HISTOGRAM_BINS
    for gap in gaps_ms:
        counts[min(int(gap / width), _HISTOGRAM_BINS - 1)] += 1
    most = max(counts) or 1
    plot_top, plot_h = 14, _HISTOGRAM_H - 14 - _AXIS_H

    def px(ms: float) -> float:
        return _X0 + ms / top * (_X1 - _X0)

    bars = []
    for i, count in enumerate(counts):
        if not count:
            continue
        h = count / most * plot_h
        x0, x1 = px(i * width), px((i + 1) * width)
        bars.append(
            f'<rect x="{_f(x0)}" y="{_f(plot_top + plot_h - h)}" width="{_f(max(x1 - x0 - 1, 1))}" '
            f'height="{_f(h)}"><title>{i * width:.1f}-{(i + 1) * width:.1f} ms: '
            f"{counted(count, 'gap')}</title></rect>"
        )
    bottom = plot_top + plot_h
    grid = [
        f'<text x="{_f(px(t))}" y="{bottom + 15}" text-anchor="middle">{_tick_label(t)}</text>'
        for t in _ticks(0.0, top)
    ]
    grid += [
        f'<path d="M{_X0} {_f(bottom - c / most * plot_h)}h-4" stroke="#999"/>'
        f'<text x="{_X0 - 7}" y="{_f(bottom - c / most * plot_h + 4)}" text-anchor="end">'
        f"{int(c)}</text>"
        for c in _ticks(0.0, most, 4)
        if c == int(c)
    ]
    line = ""
    if chunk is not None:
        x = _f(px(chunk * 1e3))
        line = (
            f'<g class="deadline" stroke="{COLORS["ttft"]}">'
            f'<path d="M{x} {plot_top - 8}V{bottom}" stroke-dasharray="5 4"/>'
            + _line_label(px(chunk * 1e3), plot_top - 2, f"chunk deadline {chunk * 1e3:.0f} ms")
            + "</g>"
        )
    return (
        f'<svg class="histogram" viewBox="0 0 {WIDTH} {_HISTOGRAM_H}" role="img" '
        f'aria-label="histogram of {counted(len(gaps_ms), "gap")}">'
        f'<g class="axis" font-size="11" fill="#444">{"".join(grid)}'
        f'<path d="M{_X0} {bottom}H{_X1}M{_X0} {plot_top}V{bottom}" stroke="#999"/>'
        f'<text x="{(_X0 + _X1) / 2}" y="{bottom + 33}" text-anchor="middle">gap (ms)</text>'
        f'<text transform="translate({_X0 - 40} {plot_top + plot_h / 2}) rotate(-90)" '
        'text-anchor="middle">gaps</text></g>'
        f'<g class="bars" fill="{COLORS["chunk"]}">{"".join(bars)}</g>{line}</svg>'
    )


def gap_stats(record: TestRecord) -> str:
    """``p50 .. ms, p95 .. ms, n=..`` of the test's pooled gaps (empty without gaps)."""
    gaps_ms = [g * 1e3 for g in record.gaps()]
    p50, p95 = percentile(gaps_ms, 50), percentile(gaps_ms, 95)
    if p50 is None or p95 is None:
        return ""
    return f"p50 {p50:.1f} ms, p95 {p95:.1f} ms, n={len(gaps_ms)}"
