"""The HTML report from a real run, opened in a real headless Chromium.

Checks the page loads with no console errors or warnings and no network requests, that each
test's section has its SVG plots (a gap histogram too for the load test), that what the plots
draw matches the run (heartbeats, the stall's over-deadline gap, the cut), that test ids are
shown as text, that nothing is cut off at common widths, and that the summary sorts when a
header is clicked. Screenshots are saved in
the test's tmp dir (README: "The HTML report" says how to refresh docs/report.png from them).
"""

from __future__ import annotations

import html
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chromium_cdp import Page, chromium_page
from report_helpers import MARKUP_ID, ReportRun

LOAD_TIMEOUT = 60.0
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _sections(run: ReportRun) -> dict[str, dict[str, Any]]:
    return {t["nodeid"]: t for t in run.document["tests"]}


def test_run_writes_json_and_html_from_the_same_records(report_run: ReportRun) -> None:
    result = report_run.result
    assert result.returncode == 1, result.stdout + result.stderr
    assert "2 failed, 2 passed" in result.stdout, result.stdout
    assert "HTML report: out/streamguard.html" in result.stdout
    verdicts = {nodeid.split("::")[1]: t["verdict"] for nodeid, t in _sections(report_run).items()}
    assert verdicts == {
        "test_stall_breaks_chunk_deadline": "FAIL",
        f"test_passes_with_heartbeats[{MARKUP_ID}]": "pass",
        "test_cut_mid_stream": "FAIL",
        "test_load_under_latency": "pass",
    }
    page = report_run.html
    for index, nodeid in enumerate(_sections(report_run), start=1):
        assert f'id="test-{index}" data-nodeid="{html.escape(nodeid)}"' in page
        assert f'href="#test-{index}"' in page
    # Self-contained: inline SVG plots and one small inline script (the table sort); nothing
    # loaded from anywhere.
    assert page.count("<script") == 1
    assert page.count('<svg class="timeline"') == 4
    assert "<script src" not in page
    assert "<link" not in page
    assert 'href="http' not in page
    assert MARKUP_ID not in page
    assert html.escape(MARKUP_ID) in page


@pytest.fixture(scope="module")
def page(report_run: ReportRun, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Page]:
    """The run's HTML report loaded in headless Chromium."""
    workdir = tmp_path_factory.mktemp("chromium")
    with chromium_page(workdir, width=1280, height=1400) as page:
        page.send("Page.navigate", url=report_run.html_path.as_uri())
        page.wait_event("Page.loadEventFired", LOAD_TIMEOUT)
        yield page


def test_page_loads_clean_with_a_plot_per_test(
    page: Page, report_run: ReportRun, tmp_path: Path
) -> None:
    assert page.problems() == []
    assert [u for u in page.requested_urls() if not u.startswith(("file:", "data:"))] == []
    sections = page.evaluate(
        "Array.from(document.querySelectorAll('section.test')).map((s) => ({"
        "  nodeid: s.dataset.nodeid, verdict: s.dataset.verdict,"
        "  heading: s.querySelector('h2 .fn').textContent,"
        "  nodeidLine: s.querySelector('p.nodeid').textContent,"
        "  elementsInHeading: s.querySelectorAll('h2 *').length,"
        "  plots: Array.from(s.querySelectorAll('.plot')).map((p) => p.id),"
        "  drawn: s.querySelectorAll('.plot svg.timeline g.chunks > circle').length"
        "}))"
    )
    expected = _sections(report_run)
    assert [s["nodeid"] for s in sections] == list(expected)
    for index, section in enumerate(sections, start=1):
        assert section["verdict"] == expected[section["nodeid"]]["verdict"]
        # The id is shown as text: markup in it is not turned into elements.
        assert section["nodeidLine"] == section["nodeid"]
        assert section["nodeid"].endswith("::" + section["heading"])
        assert section["elementsInHeading"] == 2  # the verdict badge and the name
        assert section["drawn"] > 0
        plots = [f"timeline-{index}"]
        if "test_load_under_latency" in section["nodeid"]:
            plots.append(f"gaps-{index}")
        assert section["plots"] == plots
    page.screenshot(tmp_path / "report.png")
    page.screenshot(tmp_path / "report-full.png", full_page=True)
    assert (tmp_path / "report.png").read_bytes().startswith(PNG_MAGIC)
    assert (tmp_path / "report.png").stat().st_size > 20_000


def _kinds(page: Page, div_id: str) -> set[str]:
    """The kinds of marks a timeline drew (its SVG's layer groups)."""
    kinds: list[str] = page.evaluate(
        f"Array.from(document.querySelectorAll('#{div_id} svg.timeline g[class]'))"
        ".map((g) => g.getAttribute('class'))"
    )
    return set(kinds)


def _marks(page: Page, div_id: str, kind: str) -> int:
    """How many events the marks of ``kind`` stand for (a mark may stand for a close run)."""
    count: int = page.evaluate(
        f"Array.from(document.querySelectorAll('#{div_id} svg.timeline g.{kind} > *'))"
        ".reduce((n, m) => n + Number(m.dataset.n || 1), 0)"
    )
    return count


def test_timelines_draw_what_the_streams_did(page: Page, report_run: ReportRun) -> None:
    stall, passing, cut, load = (f"timeline-{i}" for i in range(1, 5))
    assert {"over", "expired", "faults", "window", "ttft"} <= _kinds(page, stall)
    assert "cut" in _kinds(page, cut)
    assert "done" not in _kinds(page, cut)
    # Heartbeats are drawn apart from other reads, one mark per heartbeat the JSON holds.
    assert "beats" in _kinds(page, passing)
    passing_traces = report_run.document["tests"][1]["traces"]
    assert _marks(page, passing, "beats") == sum(len(t["heartbeat_ns"]) for t in passing_traces)
    assert _marks(page, passing, "beats") >= 2
    assert "over" not in _kinds(page, passing)
    # One chunk mark per chunk the JSON holds, one row per stream.
    tests = report_run.document["tests"]
    for div_id, test in zip((stall, passing, cut, load), tests, strict=True):
        assert _marks(page, div_id, "chunks") == sum(len(t["chunks"]) for t in test["traces"])
        rows = page.evaluate(f"document.querySelector('#{div_id} svg.timeline').dataset.rows")
        assert int(rows) == len(test["traces"])
        # Every mark lies inside the drawing (nothing clipped at its edges).
        outside = page.evaluate(
            f"(() => {{ const svg = document.querySelector('#{div_id} svg.timeline');"
            "  const box = svg.viewBox.baseVal;"
            "  return Array.from(svg.querySelectorAll('circle, rect, path')).filter((e) => {"
            "    const b = e.getBBox();"
            "    return b.x < -0.5 || b.y < -0.5 || b.x + b.width > box.width + 0.5"
            "      || b.y + b.height > box.height + 0.5; }).length; })()"
        )
        assert outside == 0
    ttft_line = page.evaluate(f"document.querySelector('#{stall} svg.timeline g.ttft').dataset.x")
    assert float(ttft_line) == 0.5
    titles = page.evaluate(
        f"Array.from(document.querySelectorAll('#{stall} g.over title')).map((t) => t.textContent)"
    )
    assert titles
    assert all("> chunk deadline 200.0 ms" in t for t in titles), titles


def test_summary_links_and_sorting(page: Page) -> None:
    links = page.evaluate(
        "Array.from(document.querySelectorAll('#summary-table tbody a'))"
        ".map((a) => document.getElementById(a.getAttribute('href').slice(1)) !== null)"
    )
    assert links == [True] * 4

    def column(index: int) -> list[str]:
        values: list[str] = page.evaluate(
            "Array.from(document.querySelectorAll('#summary-table tbody tr'))"
            f".map((r) => r.cells[{index}].textContent)"
        )
        return values

    headers: list[str] = page.evaluate(
        "Array.from(document.querySelectorAll('#summary-table th')).map((h) => h.textContent)"
    )
    verdict, streams = headers.index("verdict"), headers.index("streams")

    def click(index: int) -> None:
        page.evaluate(f"document.querySelectorAll('#summary-table th')[{index}].click()")

    click(streams)
    assert [int(v) for v in column(streams)] == [1, 1, 1, 5]
    click(streams)
    assert [int(v) for v in column(streams)] == [5, 1, 1, 1]
    click(verdict)
    assert column(verdict) == ["FAIL", "FAIL", "pass", "pass"]
    click(verdict)
    assert column(verdict) == ["pass", "pass", "FAIL", "FAIL"]
    assert page.problems() == []


def test_report_names_no_absolute_path(report_run: ReportRun) -> None:
    # The app is in the run's rootdir and the interpreter is pytest's: both shown short.
    assert "command python stream_app.py --port {port}" in report_run.html
    for absolute in (str(report_run.path), sys.executable, str(Path.home())):
        assert absolute not in report_run.html
