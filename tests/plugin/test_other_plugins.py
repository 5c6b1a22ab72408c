"""The pytest plugins a team already uses, run beside this one as a user's run would load them:
pytest-rerunfailures, pytest-timeout, pytest-xdist, pytest-asyncio, pytest-randomly, pytest-html
(pytest-cov's subprocess settings are in docs/ci.md)."""

from __future__ import annotations

import html
import json
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from plugin_helpers import streamguard_runner

BODY = {"max_new_tokens": 40, "interval_s": 0.005}


@pytest.fixture
def run_subprocess(
    pytester: pytest.Pytester, app_url: str, toxiproxy_url: str
) -> Callable[..., pytest.RunResult]:
    """Run pytest in a subprocess with the plugin on, against the shared app and server."""
    return streamguard_runner(pytester, toxiproxy_url, app_url, subprocess=True)


FLAKY = f"""
import pytest

BODY = {BODY!r}
attempts = []


@pytest.mark.token_deadline(ttft=5.0, chunk=5.0)
def test_flaky(streamguard):
    attempts.append(1)
    trace = streamguard.stream("/generate", json=BODY)
    assert trace.completed, trace.error
    assert len(attempts) == 3, "flaky: passes on its third attempt"
"""


def test_a_rerun_attempt_is_judged_alone(
    pytester: pytest.Pytester, run_subprocess: Callable[..., pytest.RunResult]
) -> None:
    # Before, the item kept every attempt's guards: the third attempt was judged over 120
    # chunks of three streams, and its JUnit properties came three times.
    pytester.makepyfile(test_flaky=FLAKY)
    result = run_subprocess(
        "-p", "rerunfailures", "--reruns", "2", "--streamguard-json", "report.json",
        "--junitxml", "junit.xml",
    )  # fmt: skip
    assert result.parseoutcomes() == {"passed": 1, "rerun": 2}, result.stdout.str()
    report = json.loads(pytester.path.joinpath("report.json").read_text())
    (record,) = report["tests"]
    assert record["attempt"] == 3
    assert record["verdict"] == "pass"
    assert [len(t["chunks"]) for t in record["traces"]] == [40]
    assert record["findings"] == []
    assert [(r["attempt"], r["verdict"]) for r in record["earlier_attempts"]] == [
        (1, "error"),
        (2, "error"),
    ]
    assert all(len(r["traces"]) == 1 for r in record["earlier_attempts"])
    assert report["pooled"]["streams"] == 1
    result.stdout.fnmatch_lines(
        [
            "reruns (each attempt judged on its own streams;*",
            "  test_flaky.py::test_flaky: attempt 3 pass (40 chunks); "
            "before: 1 error (40 chunks), 2 error (40 chunks)",
        ]
    )
    # pytest's JUnit XML writes one testcase per attempt: each with its own attempt's figures.
    testcases = ET.parse(pytester.path / "junit.xml").getroot().iter("testcase")
    verdicts = [
        [p.get("value") for p in case.iter("property") if p.get("name") == "streamguard_verdict"]
        for case in testcases
    ]
    assert verdicts == [["error"], ["error"], ["pass"]]


TIMED_OUT = f"""
import pytest

BODY = {BODY!r}


@pytest.mark.timeout(1)
def test_held_past_the_limit(streamguard):
    streamguard.faults.blackhole()
    streamguard.stream("/generate", json=BODY, read_timeout=30)
"""


def test_a_stream_that_pytest_timeout_stops_is_kept_as_timeout(
    pytester: pytest.Pytester, run_subprocess: Callable[..., pytest.RunResult]
) -> None:
    # pytest-timeout's signal method raises its Failed from inside the read. Before, the stream
    # was dropped, and the blackhole that held it silent read "never fired".
    pytester.makepyfile(test_timed_out=TIMED_OUT)
    result = run_subprocess(
        "-p", "timeout", "--timeout-method", "signal", "--streamguard-json", "report.json"
    )  # fmt: skip
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Timeout (>1.0s) from pytest-timeout*"])
    assert "never fired" not in result.stdout.str()
    report = json.loads(pytester.path.joinpath("report.json").read_text())
    (record,) = report["tests"]
    (trace,) = record["traces"]
    assert trace["error_kind"] == "timeout", trace["error"]
    assert trace["error"].startswith("pytest-timeout's limit of 1.0 s for the whole test"), trace
    (fault,) = record["faults"]
    assert (fault["kind"], fault["fired"]) == ("blackhole", True), fault


SLOW_START = f"""
import pytest

BODY = {BODY!r}


@pytest.mark.timeout(1)
def test_first(streamguard):
    assert streamguard.stream("/generate", json=BODY).completed


@pytest.mark.timeout(1)
def test_second(streamguard):
    assert streamguard.stream("/generate", json=BODY).completed
"""


@pytest.mark.parametrize("func_only", [False, True], ids=["plain", "timeout_func_only"])
def test_pytest_timeouts_start_of_the_target_names_the_setting_that_fixes_it(
    pytester: pytest.Pytester, toxiproxy_url: str, func_only: bool
) -> None:
    """Issue 45: the target's start (a session fixture, 2 s here) is charged to the first test's
    ``@pytest.mark.timeout(1)``: each test errors naming ``timeout_func_only``, which, set,
    leaves the start out of the limit."""
    pytester.makepyfile(test_slow_start=SLOW_START)
    app = Path(__file__).resolve().parents[2] / "examples" / "stream_app.py"
    command = (
        f'{sys.executable} -c "import runpy, sys, time; time.sleep(2); '
        f"sys.argv[0] = {str(app)!r}; runpy.run_path(sys.argv[0], run_name='__main__')\" "
        "--port {port}"
    )
    result = pytester.runpytest_subprocess(
        "--streamguard", "--streamguard-toxiproxy", toxiproxy_url,
        "--streamguard-target-cmd", command, "-p", "timeout", "--timeout-method", "signal",
        "-p", "no:cacheprovider", *(["-o", "timeout_func_only=true"] if func_only else []),
    )  # fmt: skip
    if func_only:
        result.assert_outcomes(passed=2)
        return
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        [
            "*streamguard target failed to start: pytest-timeout's limit of 1.0 s for the first "
            "test ran out while the target started*set timeout_func_only = true*",
        ]
    )
    assert result.stdout.str().count("set timeout_func_only = true") >= 2


PASSING = f"""
import pytest

BODY = {BODY!r}


@pytest.mark.token_deadline(ttft=5.0, chunk=5.0)
def test_streams(streamguard):
    assert streamguard.stream("/generate", json=BODY).completed
"""


def _html_data(path: Path) -> dict[str, Any]:
    """The data pytest-html's page draws its table from (its ``data-jsonblob``)."""
    blob = re.search(r'data-jsonblob="([^"]*)"', path.read_text(encoding="utf-8"))
    assert blob is not None
    data: dict[str, Any] = json.loads(html.unescape(blob[1]))
    return data


def test_pytest_html_shows_the_junit_properties(
    pytester: pytest.Pytester, run: Callable[..., pytest.RunResult]
) -> None:
    # pytest-html shows no user_properties: the plugin adds a column for its own.
    pytester.makepyfile(test_streams=PASSING)
    result = run("-p", "metadata", "-p", "html", "--html", "page.html", "--self-contained-html")
    result.assert_outcomes(passed=1)
    page = pytester.path / "page.html"
    assert '<th class="col-streamguard">streamguard</th>' in page.read_text(encoding="utf-8")
    data = _html_data(page)
    (row,) = data["tests"]["test_streams.py::test_streams"]
    (cell,) = [c for c in row["resultsTableRow"] if 'class="col-streamguard"' in c]
    assert re.fullmatch(
        r'<td class="col-streamguard">streamguard_ttft_s: [0-9.]+<br>'
        r"streamguard_max_gap_s: [0-9.]+<br>streamguard_verdict: pass</td>",
        cell,
    ), cell


THREE = f"""
import pytest

BODY = {BODY!r}


@pytest.mark.token_deadline(ttft=5.0, chunk=5.0)
@pytest.mark.parametrize("n", [1, 2, 3])
def test_streams(streamguard, n):
    assert streamguard.stream("/generate", json=BODY).completed
"""


def _nodeids(pytester: pytest.Pytester) -> list[str]:
    report = json.loads(pytester.path.joinpath("report.json").read_text())
    return sorted(t["nodeid"] for t in report["tests"])


@pytest.mark.parametrize(
    "plugin",
    [
        pytest.param(["-p", "xdist", "-n", "2"], id="xdist"),
        pytest.param(["-p", "randomly", "--randomly-seed", "7"], id="randomly"),
    ],
)
def test_every_test_is_recorded_under(
    pytester: pytest.Pytester, run_subprocess: Callable[..., pytest.RunResult], plugin: list[str]
) -> None:
    pytester.makepyfile(test_three=THREE)
    result = run_subprocess(*plugin, "--streamguard-json", "report.json")
    result.assert_outcomes(passed=3)
    if "randomly" in plugin:
        # pytest-randomly did act (tests/conftest.py turns it off unless asked for).
        result.stdout.fnmatch_lines(["Using --randomly-seed=7"])
    assert _nodeids(pytester) == [f"test_three.py::test_streams[{n}]" for n in (1, 2, 3)]


ASYNC = f"""
import pytest

BODY = {BODY!r}


@pytest.mark.asyncio
@pytest.mark.token_deadline(ttft=5.0, chunk=5.0)
async def test_streams(streamguard):
    trace = await streamguard.astream("/generate", json=BODY)
    assert trace.completed, trace.error
"""


def test_an_async_test_under_pytest_asyncio(
    pytester: pytest.Pytester, run: Callable[..., pytest.RunResult]
) -> None:
    pytester.makepyfile(test_async=ASYNC)
    result = run("-p", "asyncio", "--streamguard-json", "report.json")
    result.assert_outcomes(passed=1)
    report = json.loads(pytester.path.joinpath("report.json").read_text())
    (record,) = report["tests"]
    assert (record["verdict"], len(record["traces"][0]["chunks"])) == ("pass", 40)
