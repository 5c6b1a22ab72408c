"""``@pytest.mark.streamguard_matrix``: one item per profile, applied and undone on the proxy.

The inner runs use the shared embedded Toxiproxy server (by URL) and the example app; the
proxy's state is read back through the Toxiproxy HTTP API, during each body and after each
item's teardown, never from the plugin's own bookkeeping.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_streamguard.report.recording import matrix_test

# Reads the proxy's toxics and enabled state through the real API, and logs them.
INNER_CONFTEST = """
import json
import urllib.request

import pytest

API = {api!r}
LOG = "state.jsonl"


def proxies():
    with urllib.request.urlopen(API + "/proxies", timeout=5) as response:
        raw = json.load(response)
    return {{
        name: {{
            "enabled": p["enabled"],
            "toxics": sorted(
                [t["type"], t["stream"], t["toxicity"], t["attributes"]] for t in p["toxics"]
            ),
        }}
        for name, p in raw.items()
    }}


def log(entry):
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\\n")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    result = yield
    # The session's proxy outlives every item but the last one.
    if nextitem is not None:
        log({{"after": item.nodeid, "proxies": proxies()}})
    return result
"""

INNER_TESTS = """
import pytest
from conftest import log, proxies


@pytest.mark.streamguard_matrix(
    "none", "latency-200", "cut-mid-stream", "down", "stall-1s", "slow-reader-2kbps"
)
def test_incident(streamguard):
    log({
        "nodeid": streamguard.profile and streamguard.profile.name,
        "proxy": streamguard.proxy.name,
        "profile": streamguard.profile.to_dict(),
        "during": proxies()[streamguard.proxy.name],
    })
    # The chunk-triggered cut acts one API call after the 3rd chunk: events 50 ms apart leave
    # it over a second, even on a loaded machine. The slow reader gets 2.7 KB in ~0.3 s, far
    # faster than its 2 KB/s, so it has to wait (it fired).
    name = streamguard.profile.name
    body = {"max_new_tokens": 30, "interval_s": 0.05 if name == "cut-mid-stream" else 0.01}
    if name == "slow-reader-2kbps":
        body["pad"] = 50
    trace = streamguard.stream(json=body)
    if streamguard.profile.name in ("cut-mid-stream", "down"):
        # The graceful-error assertion a matrix test makes under a cut.
        assert not trace.completed
        assert trace.error_kind is not None
    else:
        assert trace.completed


def test_plain(streamguard):
    assert streamguard.profile is None
    log({"plain": proxies()[streamguard.proxy.name]})
"""


def _entries(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_matrix_expands_applies_and_undoes_each_profile(
    pytester: pytest.Pytester, run: Callable[..., pytest.RunResult], toxiproxy_url: str
) -> None:
    pytester.makeconftest(INNER_CONFTEST.format(api=toxiproxy_url))
    pytester.makepyfile(test_matrix_inner=INNER_TESTS)
    result = run(
        "-v",
        "--streamguard-json",
        "report.json",
        "--streamguard-html",
        "report.html",
        "--junitxml",
        "junit.xml",
    )
    result.assert_outcomes(passed=7)
    ids = ["none", "latency-200", "cut-mid-stream", "down", "stall-1s", "slow-reader-2kbps"]
    result.stdout.fnmatch_lines(
        [f"test_matrix_inner.py::test_incident[[]{name}[]] PASSED*" for name in ids]
    )
    entries = _entries(pytester.path / "state.jsonl")
    bodies = [e for e in entries if "during" in e]
    assert [e["profile"]["name"] for e in bodies] == ids
    during = {e["profile"]["name"]: e["during"] for e in bodies}
    assert during["none"] == {"enabled": True, "toxics": []}
    assert during["latency-200"] == {
        "enabled": True,
        "toxics": [["latency", "downstream", 1.0, {"latency": 200, "jitter": 0}]],
    }
    assert during["down"] == {"enabled": False, "toxics": []}
    # On the embedded server the cut and the stall are chunk toxics the proxy applies itself at
    # the third chunk: nothing holds the response before it.
    assert during["cut-mid-stream"] == {
        "enabled": True,
        "toxics": [["chunk_cut", "downstream", 1, {"after_chunks": 3, "aimed": 0}]],
    }
    assert during["stall-1s"] == {
        "enabled": True,
        "toxics": [
            ["chunk_stall", "downstream", 1, {"after_chunks": 3, "duration": 1000, "aimed": 0}]
        ],
    }
    # 2 KB/s read by the client; the proxy's toxic a little faster (2.5 KB/s, rounded up).
    assert during["slow-reader-2kbps"] == {
        "enabled": True,
        "toxics": [["bandwidth", "downstream", 1.0, {"rate": 3}]],
    }
    # The body saw the profile's definition, not only its name.
    assert bodies[1]["profile"]["toxics"] == [
        {
            "type": "latency",
            "stream": "downstream",
            "toxicity": 1.0,
            "attributes": {"latency": 200, "jitter": 0},
        }
    ]
    # After each matrix item's teardown the proxy is clean and enabled again.
    proxy = bodies[0]["proxy"]
    afters = [e for e in entries if "after" in e]
    assert [e["after"].split("::")[1] for e in afters] == [f"test_incident[{n}]" for n in ids]
    assert all(e["proxies"][proxy] == {"enabled": True, "toxics": []} for e in afters), afters
    assert [e for e in entries if "plain" in e] == [{"plain": {"enabled": True, "toxics": []}}]

    # Every report shows the matrix: the terminal summary ...
    result.stdout.fnmatch_lines(
        [
            "matrix (verdict worst-ttft/gap-p95 in ms, per profile):",
            "test * none * latency-200 * cut-mid-stream * down * stall-1s * slow-reader-2kbps",
            "test_matrix_inner.py::test_incident * unchecked *.*/*.* * unchecked *",
        ]
    )
    # ... the JSON report ...
    report = json.loads((pytester.path / "report.json").read_text())
    assert [row["test"] for row in report["matrix"]] == ["test_matrix_inner.py::test_incident"]
    cells = report["matrix"][0]["profiles"]
    assert list(cells) == ids
    assert cells["latency-200"]["worst_ttft_s"] >= 0.2
    assert cells["none"]["worst_ttft_s"] < cells["latency-200"]["worst_ttft_s"]
    assert cells["down"]["streams"] == 1
    assert set(report["profiles"]) == set(ids)
    by_id = {t["nodeid"]: t for t in report["tests"]}
    assert by_id["test_matrix_inner.py::test_incident[cut-mid-stream]"]["profile"] == (
        "cut-mid-stream"
    )
    # Every profile's faults took effect on the stream it ran under.
    for name in ids[1:]:
        faults = by_id[f"test_matrix_inner.py::test_incident[{name}]"]["faults"]
        assert faults, name
        assert all(f["fired"] is True for f in faults), (name, faults)
    cut = by_id["test_matrix_inner.py::test_incident[cut-mid-stream]"]["traces"][0]
    assert cut["error_kind"] == "cut"
    assert 3 <= len(cut["chunks"]) < 30
    stalled = by_id["test_matrix_inner.py::test_incident[stall-1s]"]
    assert [f["kind"] for f in stalled["traces"][0]["faults"]] == ["stall"]
    stamp = stalled["traces"][0]["chunk_fields"].index("stamp_ns")
    stamps = [c[stamp] for c in stalled["traces"][0]["chunks"]]
    assert max(b - a for a, b in itertools.pairwise(stamps)) >= 0.9e9
    # ... the HTML report ...
    html = (pytester.path / "report.html").read_text()
    assert 'id="matrix-table"' in html
    for name in ids:
        assert f"<th>{name}</th>" in html
    # ... and the JUnit report's per-item properties.
    junit = (pytester.path / "junit.xml").read_text()
    assert 'name="streamguard_profile" value="latency-200"' in junit


def test_unknown_profile_is_a_collection_error_listing_known_ones(
    pytester: pytest.Pytester, run: Callable[..., pytest.RunResult]
) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.streamguard_matrix("none", "latency-9000")
        def test_x(streamguard):
            pass
        """
    )
    result = run()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*streamguard_matrix: unknown profile(s) 'latency-9000'; known profiles: "
            "cut-mid-stream, down, jitter-150, latency-200, mobile-3g, none, reset, "
            "slow-reader-2kbps, stall-1s"
        ]
    )


def test_matrix_without_streamguard_fixture_is_a_collection_error(
    pytester: pytest.Pytester, run: Callable[..., pytest.RunResult]
) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.streamguard_matrix("none")
        def test_x():
            pass
        """
    )
    result = run()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*streamguard_matrix needs the streamguard fixture*"])


def test_user_profile_directory_by_ini_and_bad_file_is_a_usage_error(
    pytester: pytest.Pytester, run: Callable[..., pytest.RunResult]
) -> None:
    profiles = pytester.mkdir("netprofiles")
    (profiles / "slow-dsl.json").write_text(
        json.dumps(
            {
                "description": "a slow DSL line",
                "toxics": [
                    {"type": "latency", "toxicity": 0.5, "attributes": {"latency": 30}},
                    {"type": "bandwidth", "stream": "upstream", "attributes": {"rate": 100}},
                ],
            }
        )
    )
    pytester.makeini(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
        "streamguard_profiles = netprofiles\n"
    )
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.streamguard_matrix("slow-dsl", "none")
        def test_x(streamguard, toxiproxy):
            profile = streamguard.profile
            if profile.name == "slow-dsl":
                assert profile.description == "a slow DSL line"
                assert profile.source.endswith("slow-dsl.json")
                assert [t.type for t in profile.toxics] == ["latency", "bandwidth"]
                # On the proxy, through toxiproxy-python (bound to the session's server by the
                # toxiproxy fixture): the file's toxicity too.
                on_proxy = streamguard.proxy.toxics().values()
                assert sorted((t.type, t.stream, t.toxicity) for t in on_proxy) == [
                    ("bandwidth", "upstream", 1.0), ("latency", "downstream", 0.5)
                ]
            else:
                assert profile.source == "built-in"
        """
    )
    result = run("-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_x[[]slow-dsl[]] PASSED*", "*test_x[[]none[]] PASSED*"])

    (profiles / "broken.json").write_text('[{"type": "latencyy", "attributes": {}}]')
    result = run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*streamguard_profiles: *broken.json: toxic 1 has type 'latencyy'; a profile file is "
            "JSON: a list of Toxiproxy toxics*latency, bandwidth, slow_close, timeout, "
            "reset_peer, slicer, limit_data*"
        ]
    )


def test_matrix_under_xdist_is_merged_into_one_matrix(
    pytester: pytest.Pytester, app_url: str, toxiproxy_url: str
) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.streamguard_matrix("none", "latency-200", "jitter-150", "reset")
        def test_m(streamguard):
            trace = streamguard.stream(json={"max_new_tokens": 4, "interval_s": 0.01})
            assert trace.completed == (streamguard.profile.name != "reset")
        """
    )
    result = pytester.runpytest_subprocess(
        "-n",
        "2",
        "--streamguard",
        "--streamguard-toxiproxy",
        toxiproxy_url,
        "--streamguard-target-url",
        app_url,
        "--streamguard-json",
        "report.json",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=4)
    report = json.loads((pytester.path / "report.json").read_text())
    assert {t["worker"] for t in report["tests"]} == {"gw0", "gw1"}
    assert len(report["matrix"]) == 1
    assert set(report["matrix"][0]["profiles"]) == {"none", "latency-200", "jitter-150", "reset"}
    assert set(report["profiles"]) == {"none", "latency-200", "jitter-150", "reset"}
    result.stdout.fnmatch_lines(["matrix (verdict worst-ttft/gap-p95 in ms, per profile):"])


def test_matrix_ids_next_to_other_parameters(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("n", [1, 2])
        @pytest.mark.streamguard_matrix("none", "stall-1s")
        def test_x(streamguard, n):
            pass
        """
    )
    # The matrix expands with the plugin on (collecting starts no process).
    result = pytester.runpytest("--streamguard", "--collect-only", "-q", "-p", "no:cacheprovider")
    ids = [line for line in result.stdout.lines if "::test_x[" in line]
    assert len(ids) == 4, result.stdout.str()
    for nodeid in ids:
        profile = "stall-1s" if "stall-1s" in nodeid else "none"
        assert matrix_test(nodeid, profile) in (
            "test_matrix_ids_next_to_other_parameters.py::test_x[1]",
            "test_matrix_ids_next_to_other_parameters.py::test_x[2]",
        ), nodeid
    assert matrix_test("t.py::x[latency-200]", "latency-200") == "t.py::x"
    assert matrix_test("t.py::x[a-b-none]", "none") == "t.py::x[a-b]"
