"""``streamguard.headroom()`` end to end, against a server whose capacity is known exactly
(``tests/headroom/capacity_app.py``: ``slots`` generation slots, answers of a fixed length)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

CAPACITY_APP = Path(__file__).resolve().parents[1] / "headroom" / "capacity_app.py"
SLOTS = 3
# Answers of 12 tokens 50 ms apart (0.55 s): a stream over capacity waits that long for its
# first token, against well under 0.1 s within it, on either side of a 0.3 s TTFT bound.
ANSWER = "--tokens 12 --interval 0.05"


def capacity_cmd(slots: int, extra: str = "") -> str:
    """A --streamguard-target-cmd for the capacity app with ``slots`` slots (``extra``: more of
    its flags)."""
    return f"{sys.executable} {CAPACITY_APP} --port {{port}} --slots {slots} {ANSWER} {extra}"


def run_with(
    pytester: pytest.Pytester, slots: int, *args: str, extra: str = ""
) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "--streamguard",
        "--streamguard-target-cmd",
        capacity_cmd(slots, extra),
        "--streamguard-ready-path",
        "/health",
        "--streamguard-seed",
        "7",
        "-p",
        "no:cacheprovider",
        *args,
    )


STREAMS_TEST = """
import json

import pytest


@pytest.mark.token_deadline(ttft=0.3)
def test_capacity(streamguard):
    # A first stream outside the search: the target's cold start is not its capacity.
    streamguard.stream("/generate")
    found = streamguard.headroom(vary="streams", up_to=16)
    print("HEADROOM", json.dumps(found.to_dict()))
    assert found.value == SLOTS, found.describe()
    assert found.broke_at == SLOTS + 1, found.describe()
    assert "TTFT" in found.cause, found.cause
    assert found.runs <= 10  # max_runs(16) and the 3 repeats
    for level in found.levels:
        # The hop's delay, from the app's send stamps to the kernel's receipt at the client:
        # well under the TTFT bound (a generous ceiling: the search's loads share a busy machine).
        assert level.figures["forwarding_events"] == 12 * level.figures["streams"], level
        assert 0 < level.figures["forwarding_p99_s"] < 0.2, level.forwarding
        assert level.forwarding.endswith("(send stamp to kernel receipt)"), level.forwarding
        # The probe went beside every level's load.
        assert level.figures["probe_samples"] > 0, level.figures
"""


def test_streams_finds_the_known_capacity_and_why_the_next_level_broke(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(STREAMS_TEST.replace("SLOTS", str(SLOTS)))
    result = run_with(pytester, SLOTS, "-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            f"*headroom streams: {SLOTS} ({SLOTS + 1} broke: TTFT max * s > 0.3 s*; "
            f"forwarding p99 * ms at {SLOTS + 1} streams)"
        ]
    )


QUEUED_TEST = """
import pytest


@pytest.mark.token_deadline(ttft=0.3, chunk=1.0, percentile=50)
def test_capacity(streamguard):
    streamguard.stream("/generate")
    found = streamguard.headroom(vary="streams", up_to=16)
    # 3 slots: at 7 streams 4 wait a whole answer, more than half (at 6, 3 of 6 wait: the p50
    # is still one that did not).
    assert (found.value, found.broke_at) == (6, 7), found.describe()
    broke = [level for level in found.levels if level.level == 7][-1]
    assert "queued" in broke.findings and "blocked_loop" not in broke.findings, broke.findings
    assert broke.figures["probe_unanswered"] == 0, broke.figures
    assert broke.figures["probe_longest_s"] < 0.25, broke.figures
"""


def test_the_level_that_broke_names_a_full_server_by_the_probes_evidence(
    pytester: pytest.Pytester,
) -> None:
    # The probe beside each level's load answered at once while streams waited for a slot:
    # the server was full (queued), its loop was not blocked.
    pytester.makepyfile(QUEUED_TEST)
    # A 0.1 s prefill: every stream of a level is sent before the first token arrives, so the
    # findings read them all as sent together however busy the machine.
    result = run_with(
        pytester,
        SLOTS,
        *("--streamguard-json", "out.json", "--streamguard-html", "out.html"),
        extra="--first-token 0.1",
    )
    result.assert_outcomes(passed=1)
    # The JSON keeps each level with its forwarding and probe figures; the HTML plots them.
    (record,) = json.loads((pytester.path / "out.json").read_text())["tests"]
    (found,) = record["headroom"]
    assert all(level["figures"]["forwarding_events"] > 0 for level in found["levels"])
    assert all(level["figures"]["probe_samples"] > 0 for level in found["levels"])
    page = (pytester.path / "out.html").read_text()
    ttft_plot = re.search(r'<svg class="headroom" [^>]*aria-label="TTFT p50.*?</svg>', page)
    assert ttft_plot is not None
    drawn = re.findall(r'<g class="(held|broke)"[^>]*>(.*?)</g>', ttft_plot.group(0))
    marks = sum(len(re.findall(r"<(?:circle|path) ", inner)) for _, inner in drawn)
    assert marks == found["runs"]
    assert page.count('<table class="headroom-levels">') == 1
    result.stdout.fnmatch_lines(
        [
            "*headroom streams: 6 (7 broke: TTFT p50 * s > 0.3 s; likely cause: queued: 4 of 7 "
            "streams sent together waited up to * s for a slot*the ready path /health answered "
            "meanwhile*"
        ]
    )


LATENCY_TEST = """
import pytest


@pytest.mark.token_deadline(ttft=0.3)
def test_latency(streamguard):
    streamguard.stream("/generate")
    found = streamguard.headroom(vary="latency", up_to=1000)
    # The TTFT is the added latency plus the target's own few milliseconds: the boundary is
    # just under 300 ms, found to the 5 ms precision (generous room for a busy machine).
    assert 230 <= found.value < 300, found.describe()
    assert found.broke_at == found.value + 5, found.describe()
    # Above the spread's top nothing held (a repeat of the boundary may hold: its spread).
    assert all(not level.held for level in found.levels if level.level > found.span[1])
    # The levels' faults were the search's, undone and not among the test's.
    assert streamguard.faults.records == []
    for level in found.levels:
        # The proxy's own share, the level's latency taken off: a few ms, under a generous
        # ceiling far below the levels' hundreds of ms (a busy machine's scheduling included).
        assert -0.005 < level.figures["forwarding_p50_s"] < 0.1, level.forwarding
        assert f"less the level's {level.level:g} ms latency toxic" in level.forwarding
"""


def test_latency_finds_what_a_ttft_bound_tolerates_within_the_precision(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(LATENCY_TEST)
    result = run_with(pytester, 8)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*headroom latency: * ms (* ms broke: TTFT max *"])


BLOCKED_TEST = """
import pytest


@pytest.mark.token_deadline(ttft=2.0)
def test_capacity(streamguard):
    streamguard.stream("/generate")
    # Served one whole answer (0.55 s) after another: the k-th stream's first token comes
    # after k - 1 answers, so 4 streams hold 2 s and 5 do not (enough streams sent together
    # for the findings to read a pattern).
    found = streamguard.headroom(vary="streams", up_to=8)
    assert (found.value, found.broke_at) == (4, 5), found.describe()
    # The boundary's level runs more than once (its repeats give the spread): none reads as a
    # full server, and the probe waited in a run that named the blocked loop (a run's two or
    # three probes, each held up to 2 s by the block, need not all fall in its window: a run
    # whose window holds none has no probe figure, None).
    broke = [level for level in found.levels if level.level == found.broke_at]
    assert not any("queued" in level.findings for level in broke), [l.findings for l in broke]
    named = [level for level in broke if "blocked_loop" in level.findings]
    assert named, [level.findings for level in broke]
    waited = [l.figures["probe_longest_s"] or 0.0 for l in named]
    assert max(waited) >= 0.04, [l.figures for l in named]
"""


def test_the_level_that_broke_names_a_blocked_loop_by_the_probes_evidence(
    pytester: pytest.Pytester,
) -> None:
    # The same slots, but each pause blocks the server's loop: the probe waited with the
    # streams, so the level that broke names a blocked loop, not a full server.
    pytester.makepyfile(BLOCKED_TEST)
    result = pytester.runpytest_subprocess(
        "--streamguard",
        "--streamguard-target-cmd",
        capacity_cmd(16, "--blocking"),
        "--streamguard-ready-path",
        "/health",
        "-p",
        "no:cacheprovider",
        "-s",
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*headroom streams: * broke: TTFT max *; likely cause: blocked_loop*"]
    )


PROCESSES_TEST = """
import pytest


@pytest.mark.token_deadline(ttft=0.3)
def test_capacity(streamguard):
    streamguard.stream("/generate")
    found = streamguard.headroom(vary="streams", up_to=8, processes=2)
    assert (found.value, found.broke_at) == (SLOTS, SLOTS + 1), found.describe()
    # Read in two shard processes on this machine: the stamps are still this clock's.
    assert all(level.figures["forwarding_events"] > 0 for level in found.levels)
    assert all(level.figures["probe_samples"] > 0 for level in found.levels)
    # The levels' streams are the search's, not the test's (its one stream above).
    assert len(streamguard.traces) == 1
    with pytest.raises(ValueError, match="processes"):
        streamguard.headroom(vary="streams", up_to=8, processes=0)
"""


def test_each_level_is_read_in_the_load_processes_asked_for(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PROCESSES_TEST.replace("SLOTS", str(SLOTS)))
    result = run_with(pytester, SLOTS)
    result.assert_outcomes(passed=1)


MARKER_TEST = """
import pytest


@pytest.mark.token_deadline(ttft=0.3)
@pytest.mark.headroom(vary="streams", at_least=SLOTS)
def test_enough(streamguard):
    streamguard.stream("/generate")
    streamguard.headroom(vary="streams", up_to=8)


@pytest.mark.token_deadline(ttft=0.3)
@pytest.mark.headroom(vary="streams", at_least=SLOTS + 1)
def test_short(streamguard):
    streamguard.stream("/generate")
    streamguard.headroom(vary="streams", up_to=8)


@pytest.mark.token_deadline(ttft=0.3)
@pytest.mark.headroom(vary="latency", at_least=10)
def test_unmeasured(streamguard):
    streamguard.stream("/generate")


@pytest.mark.headroom(vary="speed", at_least=1)
def test_bad_marker(streamguard):
    raise AssertionError("a bad marker stops the test at setup")
"""


def test_the_marker_fails_a_test_whose_headroom_is_below_its_bound(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(MARKER_TEST.replace("SLOTS", str(SLOTS)))
    result = run_with(pytester, SLOTS, "-p", "no:randomly", "--strict-markers")
    result.assert_outcomes(passed=1, failed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*streamguard headroom short:",
            f"*headroom streams: {SLOTS} ({SLOTS + 1} broke: TTFT max *): below at_least="
            f"{SLOTS + 1} streams",
        ]
    )
    result.stdout.fnmatch_lines(
        ["*headroom(vary='latency', at_least=10): the test measured no headroom of latency*"]
    )
    result.stdout.fnmatch_lines(
        ["*headroom(vary='speed') is not known. headroom accepts only keyword arguments vary*"]
    )


BASELINE_TEST = """
import pytest


@pytest.mark.token_deadline(ttft=0.3)
def test_capacity(streamguard):
    streamguard.stream("/generate")
    streamguard.headroom(vary="streams", up_to=8)
"""


def test_a_baseline_compare_passes_on_the_same_capacity_and_fails_on_half(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(BASELINE_TEST)
    saved = run_with(pytester, 4, "--streamguard-save", "base.json")
    saved.assert_outcomes(passed=1)
    saved.stdout.fnmatch_lines(["*headroom streams: 4 (5 broke: *"])
    # The same capacity passes: the steady app gives a spread of none, in the saved search and
    # in this one (each search already runs its boundary levels 3 times).
    same = run_with(
        pytester,
        4,
        *("--streamguard-compare", "base.json", "--streamguard-compare-fail", "headroom:20%"),
    )
    assert same.ret == 0
    same.stdout.fnmatch_lines(["*headroom streams 4 -> 4 streams (+0%) (spread 4-4 -> 4-4)"])
    halved = run_with(
        pytester,
        2,
        *("--streamguard-compare", "base.json", "--streamguard-compare-fail", "headroom:20%"),
    )
    halved.assert_outcomes(passed=1)
    assert halved.ret == pytest.ExitCode.TESTS_FAILED
    halved.stdout.fnmatch_lines(
        [
            "1 regression over --streamguard-compare-fail:",
            "*headroom streams 4 -> 2 streams (-50%) (spread 4-4 -> 2-2) "
            "REGRESSION over headroom:20%",
        ]
    )
