"""Under pytest-xdist the controller writes one HTML report covering every worker's tests."""

from __future__ import annotations

import html
from pathlib import Path

import pytest
from report_helpers import run_inner

pytest.importorskip("xdist")


def test_two_workers_one_page(tmp_path: Path) -> None:
    run = run_inner(tmp_path, "-n", "2")
    assert run.result.returncode == 1, run.result.stdout + run.result.stderr
    assert "2 failed, 2 passed" in run.result.stdout
    # Written once, by the controller, and no half-written temporary file left behind.
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "streamguard.html",
        "streamguard.json",
    ]
    document, page = run.document, run.html
    workers = {t["worker"] for t in document["tests"]}
    assert workers == {"gw0", "gw1"}
    assert len(document["tests"]) == 4
    for index, test in enumerate(document["tests"], start=1):
        assert f'id="test-{index}" data-nodeid="{html.escape(test["nodeid"])}"' in page
        assert f'id="timeline-{index}"' in page
        assert f"ran on pytest-xdist worker {test['worker']}" in page
    assert "Merged from 2 pytest-xdist workers:" in page
    assert 'class="missing"' not in page
