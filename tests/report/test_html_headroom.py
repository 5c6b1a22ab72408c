"""A headroom search in the HTML report (:mod:`pytest_streamguard.report.headroom_view`): its
plot of the figure against the level, with the deadline's line and the held/broke marks, and its
levels' table; from a document built here, rendered in headless Chromium. A real run's report
carries one too (tests/headroom/test_headroom_runs.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chromium_cdp import Page, chromium_page

from pytest_streamguard.headroom.result import Headroom, HeadroomLevel
from pytest_streamguard.report.html import render_html, write_html
from pytest_streamguard.report.records import JSON_FORMAT, JSON_VERSION, TestRecord
from pytest_streamguard.verdict.deadlines import Deadline

LOAD_TIMEOUT = 60.0
CAUSE = "TTFT p50 0.612 s > 0.3 s"
FINDINGS = "queued: 4 of 7 streams sent together waited up to 0.61 s for a slot <&>"


def level(at: float, ttft_s: float | None, held: bool, confirming: bool = False) -> HeadroomLevel:
    figures: dict[str, Any] = {
        "streams": int(at),
        "completed": int(at),
        "ttft_p50_s": ttft_s,
        "gap_p50_s": 0.05,
        "forwarding_p99_s": 0.0015 * at,
        "probe_samples": 20,
        "probe_unanswered": 0,
        "probe_longest_s": 0.004,
    }
    return HeadroomLevel(
        level=at,
        held=held,
        figures=figures,
        violations=() if held else (CAUSE,),
        findings="" if held else FINDINGS,
        confirming=confirming,
        forwarding=f"p50 1 ms, p99 {1.5 * at:g} ms, max 9 ms over 96 events",
    )


def search() -> Headroom:
    """The search of tests/headroom/test_headroom_runs.py's queued case: 3 slots, judged at p50."""
    levels = (
        level(1, 0.01, True),
        level(2, 0.01, True),
        level(4, 0.01, True),
        level(8, 0.61, False),
        level(6, 0.02, True),
        level(7, None, False),
        level(6, 0.02, True, confirming=True),
    )
    return Headroom(
        vary="streams",
        unit="streams",
        value=6,
        broke_at=7,
        cause=levels[5].cause,
        levels=levels,
        up_to=16,
        precision=1,
        deadline=Deadline(ttft=0.3, chunk=1.0, percentile=50).to_dict(),
    )


def document() -> dict[str, Any]:
    record = TestRecord(
        nodeid="tests/test_capacity.py::test_capacity",
        deadline=Deadline(ttft=0.3, chunk=1.0, percentile=50),
        verdict="pass",
        headroom=[search()],
    )
    return {"format": JSON_FORMAT, "version": JSON_VERSION, "tests": [record.to_dict()]}


def test_each_bounded_figure_is_plotted_against_the_level_with_its_deadline() -> None:
    page = render_html(document())
    assert page.count('<div class="plot headroom" id="headroom-1-1">') == 1
    # TTFT and gap are bounded (total is not): a plot each.
    plots = re.findall(r'<svg class="headroom".*?</svg>', page)
    assert [re.search(r'aria-label="([^"]*)"', p).group(1) for p in plots] == [  # type: ignore[union-attr]
        "TTFT p50 against streams",
        "gap p50 against streams",
    ]
    ttft = plots[0]
    held = re.search(r'<g class="held".*?</g>', ttft).group(0)  # type: ignore[union-attr]
    broke = re.search(r'<g class="broke".*?</g>', ttft).group(0)  # type: ignore[union-attr]
    rings = re.search(r'<g class="confirmed".*?</g>', ttft).group(0)  # type: ignore[union-attr]
    assert held.count("<circle") == 5
    assert broke.count("<path") == 2
    assert rings.count("<circle") == 1
    assert "TTFT deadline 300 ms" in ttft
    assert "headroom 6 streams" in ttft
    # The forwarding delay of every level, on the same axis.
    assert re.search(r'<g class="forwarding".*?</g>', ttft).group(0).count("<path") == 7  # type: ignore[union-attr]
    titles = re.findall(r"<title>([^<]*)</title>", ttft)
    broke_title = (
        f"7 streams: TTFT p50: streams did not complete (broke): {CAUSE.replace('>', '&gt;')}; "
        "likely cause: queued: 4 of 7 streams sent together waited up to 0.61 s for a slot "
        "&lt;&amp;&gt;"
    )
    assert broke_title in titles
    assert "6 streams: TTFT p50 20.0 ms (held, a confirmation)" in titles
    assert "8 streams: forwarding p50 1 ms, p99 12 ms, max 9 ms over 96 events" in titles
    # The levels' table: a row per level run, in order.
    table = re.search(r'<table class="headroom-levels">.*?</table>', page).group(0)  # type: ignore[union-attr]
    rows = re.findall(r'<tr class="(held|broke)">', table)
    assert rows == ["held", "held", "held", "broke", "held", "broke", "held"]
    assert "TTFT p50 (ms)" in table
    assert "gap p50 (ms)" in table
    assert "20 probes, 0 unanswered, longest 4.0 ms" in table
    assert "<&>" not in page


def test_a_test_that_only_searched_has_no_empty_timeline() -> None:
    # The record has no stream of the test's own (the levels' are the search's).
    page = render_html(document())
    assert '<svg class="timeline"' not in page
    assert 'id="timeline-1"' not in page


def test_a_test_without_headroom_has_no_headroom_part() -> None:
    raw = document()
    raw["tests"][0]["headroom"] = []
    assert "headroom-levels" not in render_html(raw)
    assert '<svg class="headroom"' not in render_html(raw)


@pytest.fixture(scope="module")
def headroom_page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Page, Path]]:
    """The report open in headless Chromium."""
    workdir = tmp_path_factory.mktemp("headroom_page")
    path = workdir / "report.html"
    write_html(path, document())
    with chromium_page(workdir, width=1280, height=1200) as page:
        page.send("Page.navigate", url=path.as_uri())
        page.wait_event("Page.loadEventFired", LOAD_TIMEOUT)
        yield page, workdir


def test_the_plot_renders_with_every_mark_inside_it(headroom_page: tuple[Page, Path]) -> None:
    page, workdir = headroom_page
    assert page.problems() == []
    drawn = page.evaluate(
        "(() => { const svg = document.querySelector('svg.headroom');"
        "  const box = svg.viewBox.baseVal;"
        "  const marks = Array.from(svg.querySelectorAll('g.held > *, g.broke > *,"
        "    g.forwarding > *, g.confirmed > *'));"
        "  const inside = marks.filter((m) => { const b = m.getBBox();"
        "    return b.x >= 0 && b.y >= 0 && b.x + b.width <= box.width"
        "      && b.y + b.height <= box.height; }).length;"
        "  const shown = svg.getBoundingClientRect();"
        "  return {marks: marks.length, inside, width: shown.width, height: shown.height}; })()"
    )
    assert drawn["marks"] == 5 + 2 + 7 + 1
    assert drawn["inside"] == drawn["marks"]
    # Drawn across the page, not collapsed.
    assert drawn["width"] > 1000
    assert drawn["height"] > 150
    overflow = page.evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0
    page.screenshot(workdir / "headroom.png", full_page=True)
    assert (workdir / "headroom.png").stat().st_size > 10_000
