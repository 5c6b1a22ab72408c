"""A headroom search in the HTML report: a plot of each bounded figure against the level, and a
table of every level run (docs/headroom.md, "Where it shows").

One plot per figure the test's ``token_deadline`` bounds: x is the level in the search's unit,
y the figure in ms. A level that held is a green dot, one that broke a red cross, a
confirmation a ring around its level's mark; a level whose streams did not complete within the
percentile has no figure and is drawn on the plot's top edge. The deadline is a dashed
horizontal line, the headroom a dashed vertical one, and the forwarding delay's p99 at each
level a grey diamond on the same axis, so the instrument's share reads against the app's.

Hand-written SVG, as the timelines are (:mod:`.plots`): a search runs a handful of levels, so a
plot is a few dozen shapes, and the page stays one file that opens offline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pytest_streamguard.headroom.result import Headroom, HeadroomLevel
from pytest_streamguard.report.plots import COLORS, WIDTH, _e, _f, _ticks

__all__ = ["headroom_html", "headroom_svg"]

_HEIGHT = 240
_X0, _X1 = 80.0, WIDTH - 24.0
_TOP, _BOTTOM = 24.0, _HEIGHT - 44.0
_FIGURES = (("ttft", "ttft", "TTFT"), ("gap", "chunk", "gap"), ("total", "total", "total"))
_KEY = re.compile(r"^(ttft|gap|total)_(p[0-9.]+|max)_s$")
_HELD = "#2ca02c"
_FORWARDING = "#7f7f7f"


def _figure_name(levels: tuple[HeadroomLevel, ...], key: str) -> str | None:
    """The figure's name in the levels' figures (``ttft_p95_s``), None when no level has it."""
    for level in levels:
        for name in level.figures:
            match = _KEY.match(name)
            if match is not None and match.group(1) == key:
                return name
    return None


@dataclass(frozen=True)
class _Axes:
    """Levels and milliseconds to drawing units."""

    x_hi: float
    y_hi: float

    def x(self, level: float) -> float:
        return _X0 + level / self.x_hi * (_X1 - _X0)

    def y(self, ms: float) -> float:
        return _BOTTOM - min(ms, self.y_hi) / self.y_hi * (_BOTTOM - _TOP)


def _shown(level: float) -> str:
    return f"{level:g}"


def _level_title(found: Headroom, level: HeadroomLevel, label: str, ms: float | None) -> str:
    figure = f"{label} {ms:.1f} ms" if ms is not None else f"{label}: streams did not complete"
    state = "held" if level.held else "broke"
    again = ", a confirmation" if level.confirming else ""
    cause = f": {level.cause}" if level.cause else ""
    return f"{_shown(level.level)} {found.unit}: {figure} ({state}{again}){cause}"


def _axes_svg(found: Headroom, axes: _Axes, label: str) -> str:
    parts = []
    for tick in _ticks(0.0, axes.x_hi, 6):
        x = _f(axes.x(tick))
        parts.append(
            f'<path d="M{x} {_TOP}V{_BOTTOM}" stroke="#eee"/>'
            f'<text x="{x}" y="{_BOTTOM + 15}" text-anchor="middle">{tick:g}</text>'
        )
    for tick in _ticks(0.0, axes.y_hi, 4):
        y = _f(axes.y(tick))
        parts.append(
            f'<path d="M{_X0} {y}H{_X1}" stroke="#eee"/>'
            f'<text x="{_X0 - 6}" y="{_f(axes.y(tick) + 4)}" text-anchor="end">{tick:g}</text>'
        )
    return (
        f'<g class="axis" font-size="11" fill="#444">{"".join(parts)}'
        f'<path d="M{_X0} {_BOTTOM}H{_X1}M{_X0} {_TOP}V{_BOTTOM}" stroke="#999"/>'
        f'<text x="{(_X0 + _X1) / 2}" y="{_BOTTOM + 33}" text-anchor="middle">'
        f"{_e(found.vary if found.vary == found.unit else f'{found.vary} ({found.unit})')}"
        "</text>"
        f'<text transform="translate(22 {(_TOP + _BOTTOM) / 2}) rotate(-90)" '
        f'text-anchor="middle">{_e(label)} (ms)</text></g>'
    )


def _lines_svg(found: Headroom, axes: _Axes, label: str, bound_ms: float) -> str:
    y = _f(axes.y(bound_ms))
    deadline = (
        f'<g class="deadline" stroke="{COLORS["ttft"]}">'
        f'<path d="M{_X0} {y}H{_X1}" stroke-dasharray="5 4"/>'
        f'<text x="{_X1 - 4}" y="{_f(axes.y(bound_ms) - 5)}" text-anchor="end" font-size="11" '
        f'stroke="none" fill="{COLORS["ttft"]}">{_e(label)} deadline {bound_ms:g} ms</text>'
        f"<title>{_e(label)} deadline {bound_ms:g} ms</title></g>"
    )
    if found.value <= 0:
        return deadline
    x = _f(axes.x(found.value))
    return deadline + (
        f'<g class="value" stroke="{_HELD}">'
        f'<path d="M{x} {_TOP - 8}V{_BOTTOM}" stroke-dasharray="3 3"/>'
        f'<text x="{_f(axes.x(found.value) + 4)}" y="{_TOP - 10}" font-size="11" '
        f'stroke="none" fill="{_HELD}">headroom {_shown(found.value)} {_e(found.unit)}</text>'
        f"<title>headroom {_shown(found.value)} {_e(found.unit)}</title></g>"
    )


def _marks_svg(found: Headroom, axes: _Axes, name: str, label: str) -> str:
    held, broke, rings, forwarding = [], [], [], []
    for level in found.levels:
        value = level.figures.get(name)
        ms = value * 1e3 if isinstance(value, int | float) else None
        x, y = axes.x(level.level), axes.y(ms) if ms is not None else _TOP
        title = f"<title>{_e(_level_title(found, level, label, ms))}</title>"
        if level.held:
            held.append(f'<circle cx="{_f(x)}" cy="{_f(y)}" r="5">{title}</circle>')
        else:
            broke.append(f'<path d="M{_f(x - 5)} {_f(y - 5)}l10 10m0 -10l-10 10">{title}</path>')
        if level.confirming:
            rings.append(f'<circle cx="{_f(x)}" cy="{_f(y)}" r="9">{title}</circle>')
        p99 = level.figures.get("forwarding_p99_s")
        if isinstance(p99, int | float):
            fy = axes.y(p99 * 1e3)
            forwarding.append(
                f'<path d="M{_f(x)} {_f(fy - 5)}l4 5l-4 5l-4 -5z"><title>'
                f"{_shown(level.level)} {_e(found.unit)}: forwarding {_e(level.forwarding)}"
                "</title></path>"
            )
    return (
        f'<g class="forwarding" fill="{_FORWARDING}">{"".join(forwarding)}</g>'
        f'<g class="held" fill="{_HELD}">{"".join(held)}</g>'
        f'<g class="broke" stroke="{COLORS["ttft"]}" stroke-width="2.5" fill="none">'
        f"{''.join(broke)}</g>"
        f'<g class="confirmed" stroke="{_HELD}" fill="none">{"".join(rings)}</g>'
    )


def headroom_svg(found: Headroom) -> list[str]:
    """One plot per figure the deadline bounds (see the module docstring); none without a
    level or a bound."""
    plots: list[str] = []
    if not found.levels:
        return plots
    for key, bound_key, label in _FIGURES:
        bound = found.deadline.get(bound_key)
        name = _figure_name(found.levels, key)
        if not isinstance(bound, int | float) or name is None:
            continue
        values = [v for lv in found.levels if isinstance(v := lv.figures.get(name), int | float)]
        values += [
            v
            for lv in found.levels
            if isinstance(v := lv.figures.get("forwarding_p99_s"), int | float)
        ]
        axes = _Axes(
            x_hi=max(lv.level for lv in found.levels) * 1.08,
            y_hi=max([*values, bound]) * 1e3 * 1.15,
        )
        figure = f"{label} {name.split('_')[1]}"
        plots.append(
            f'<svg class="headroom" viewBox="0 0 {WIDTH} {_HEIGHT}" role="img" '
            f'aria-label="{_e(figure)} against {_e(found.vary)}">'
            f"{_axes_svg(found, axes, figure)}{_lines_svg(found, axes, label, bound * 1e3)}"
            f"{_marks_svg(found, axes, name, figure)}</svg>"
        )
    return plots


def _ms_cell(value: object) -> str:
    if not isinstance(value, int | float):
        return '<td class="num">-</td>'
    return f'<td class="num">{value * 1e3:.1f}</td>'


def _levels_table(found: Headroom) -> str:
    named = [
        (name, f"{label} {name.split('_')[1]} (ms)")
        for key, _, label in _FIGURES
        if (name := _figure_name(found.levels, key)) is not None
    ]
    names = [name for name, _ in named]
    heads = ["#", f"level ({found.unit})", "held", "streams completed"]
    heads += [head for _, head in named]
    heads += ["forwarding", "probe", "what broke it"]
    rows = []
    for k, level in enumerate(found.levels, start=1):
        figures = level.figures
        state = "held" if level.held else "broke"
        again = " (confirmation)" if level.confirming else ""
        probe = "off"
        if "probe_samples" in figures:
            longest = figures.get("probe_longest_s")
            probe = (
                f"{figures['probe_samples']} probes, {figures.get('probe_unanswered', 0)} "
                "unanswered"
                + (f", longest {longest * 1e3:.1f} ms" if isinstance(longest, int | float) else "")
            )
        rows.append(
            f'<tr class="{state}"><td class="num">{k}</td>'
            f'<td class="num">{_shown(level.level)}</td><td>{state}{again}</td>'
            f'<td class="num">{figures.get("completed", "-")}/{figures.get("streams", "-")}</td>'
            + "".join(_ms_cell(figures.get(n)) for n in names)
            + f'<td class="small">{_e(level.forwarding)}</td><td class="small">{_e(probe)}</td>'
            f'<td class="small">{_e(level.cause)}</td></tr>'
        )
    head = "".join(f"<th>{_e(h)}</th>" for h in heads)
    return (
        f'<div class="scroll"><table class="headroom-levels"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def headroom_html(found: Headroom, anchor: str) -> str:
    """A search's part of its test's section (``anchor``: its element id): its line, its
    plots and its levels' table."""
    plots = "".join(headroom_svg(found))
    return (
        f'<div class="plot headroom" id="{_e(anchor)}">'
        f'<p class="plot-title">{_e(found.describe())}</p>'
        '<p class="muted">Each level the search ran (green: held, red cross: broke, ring: a '
        "confirmation; grey diamond: the hop's forwarding delay p99 at that level; the dashed "
        "lines: the deadline and the headroom). See docs/headroom.md.</p>"
        f"{plots}{_levels_table(found)}</div>"
    )
