"""``python -m pytest_streamguard.report``: the HTML rebuilt from a saved JSON report, and
clear errors (exit status 2) for input it cannot use."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from report_helpers import ReportRun

from pytest_streamguard.report.cli import main
from pytest_streamguard.report.compact import texts_stored

CLI = [sys.executable, "-m", "pytest_streamguard.report"]
# The one line that differs between two renderings: when each document was made.
CREATED = re.compile(r"<dt>created</dt><dd>[^<]*</dd>")


def _without_chunk_texts(page: str, timelines: set[int]) -> str:
    """``page`` with the chunks of these timelines hovered without their text."""
    pieces = re.split(r'(<div class="plot" id="timeline-\d+">)', page)
    for i in range(1, len(pieces), 2):
        if int(re.findall(r"\d+", pieces[i])[0]) in timelines:
            pieces[i + 1] = re.sub(r" B: &#x27;[^<]*&#x27;</title>", " B</title>", pieces[i + 1])
    return "".join(pieces)


def test_cli_rebuilds_the_same_page_from_the_json(report_run: ReportRun, tmp_path: Path) -> None:
    out = tmp_path / "nested" / "rebuilt.html"
    result = subprocess.run(
        [*CLI, str(report_run.json_path), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"wrote {out} (4 tests)"
    rebuilt, original = out.read_text(encoding="utf-8"), report_run.html
    assert CREATED.search(rebuilt) is not None
    # The JSON report keeps the chunk texts of the failed tests (the stall, the cut): the page
    # is the same but for the passing tests' chunks, hovered without their text.
    tests = report_run.document["tests"]
    untexted = {i for i, t in enumerate(tests, 1) if not any(map(texts_stored, t["traces"]))}
    assert untexted == {2, 4}
    assert CREATED.sub("", rebuilt) != CREATED.sub("", original)
    assert CREATED.sub("", rebuilt) == CREATED.sub("", _without_chunk_texts(original, untexted))


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _report(**fields: object) -> str:
    return json.dumps({"format": "pytest-streamguard", "version": 1, "tests": [], **fields})


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read {path}: [Errno 2] No such file or directory"),
        ("{not json", "{path} is not JSON (Expecting property name"),
        ("[1, 2]", "{path} is not a pytest-streamguard report (format: 'list'); expected a JSON"),
        (
            json.dumps({"format": "junit", "version": 1}),
            "{path} is not a pytest-streamguard report (format: 'junit'); expected a JSON object "
            'with "format": "pytest-streamguard", as --streamguard-json writes',
        ),
        (_report(version=99), "{path} is report version 99; this plugin reads versions 1 to 2"),
        (_report(version="1"), "{path} has report version '1'; expected an integer >= 1"),
        (_report(tests=[{"verdict": "pass"}]), "{path} has a malformed test record (KeyError"),
        (_report(tests={"a": 1}), "{path} has a malformed test record"),
    ],
    ids=[
        "missing",
        "not-json",
        "not-an-object",
        "other-format",
        "newer",
        "bad-version",
        "record-without-nodeid",
        "tests-not-a-list",
    ],
)
def test_bad_input_is_a_clear_error_with_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    path = tmp_path / "in.json"
    if content is not None:
        _write(path, content)
    out = tmp_path / "out.html"
    assert main([str(path), "-o", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: " + message.format(path=path)), captured.err
    assert captured.out == ""
    assert not out.exists()


def test_empty_report_renders_a_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.html"
    assert main([str(_write(tmp_path / "in.json", _report())), "-o", str(out)]) == 0
    assert "No test read a stream." in out.read_text(encoding="utf-8")


def test_real_process_exit_status_and_usage(tmp_path: Path) -> None:
    missing = subprocess.run(
        [*CLI, str(tmp_path / "nope.json"), "-o", str(tmp_path / "x.html")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert missing.returncode == 2
    assert missing.stderr.startswith(f"error: cannot read {tmp_path / 'nope.json'}")
    no_output = subprocess.run(
        [*CLI, str(tmp_path / "nope.json")], capture_output=True, text=True, timeout=60, check=False
    )
    assert no_output.returncode == 2
    assert "give -o/--output FILE.html and/or --json FILE.json" in no_output.stderr


def test_missing_xdist_worker_is_named_on_the_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = _report(
        workers={"gw0": {"tests": 0, "target_url": "http://127.0.0.1:1"}},
        missing_workers=[{"worker": "gw1", "reason": "crashed <signal 9>"}],
    )
    out = tmp_path / "out.html"
    assert main([str(_write(tmp_path / "in.json", document)), "-o", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert "Merged from 1 pytest-xdist worker:" in page
    assert (
        '<li class="missing">MISSING gw1: crashed &lt;signal 9&gt;; '
        "its tests' streams are not in this report</li>"
    ) in page
