"""Thresholds that hold when most of a stream is stalls, on a soak load's open streams, and
around a staircase's edge (streams built by hand; the constants are in
:mod:`pytest_streamguard.verdict.findings.loop`)."""

from __future__ import annotations

import itertools

import pytest
from test_finding_patterns import MS, every_50_ms, make, names, probed

from pytest_streamguard.stream.trace import StreamTrace
from pytest_streamguard.verdict.findings import findings_of
from pytest_streamguard.verdict.probe import Waited

# When the tokens of every stream came: 0.75 to 1.5 s apart, in the same windows.
TOKENS_MS = [0]
for step in [750, 1200, 900, 1500, 800, 1100, 1350, 760, 1000, 1450, 950, 1250]:
    TOKENS_MS.append(TOKENS_MS[-1] + step)


def every_gap_a_stall() -> list[StreamTrace]:
    # 10 streams on a loop blocked 0.25 s every 5 tokens by each stream in turn: every gap of
    # every stream is a stall, so each stream's median (and any quantile) of gaps is one too.
    return [make(f"stream {k}", 0, [100 + ms + k for ms in TOKENS_MS]) for k in range(10)]


def test_streams_whose_every_gap_is_a_stall_are_blocked_loop_with_the_probes_wait() -> None:
    traces = every_gap_a_stall()
    # The loop was free only for the moment each token went out.
    held = [(100 + a + 15, 100 + b) for a, b in itertools.pairwise(TOKENS_MS)]
    (finding,) = findings_of(traces, probed(every_50_ms(TOKENS_MS[-1] + 200, held)))
    assert finding.name == "blocked_loop"
    assert finding.evidence.startswith("up to 10 of 10 streams stalled together 12 times"), finding
    assert "; the ready path /readyz took up to " in finding.evidence
    assert finding.cause.startswith("the event loop was blocked: the ready path /readyz took")
    # The same streams while the probe answered at once: a slow server, not a blocked loop.
    assert findings_of(traces, probed(every_50_ms(TOKENS_MS[-1] + 200))) == []


def stalled_wave(first: int, sent_ms: int) -> list[StreamTrace]:
    # 8 streams, 20 ms a token, all held 150 ms after every fourth token.
    def stamps(k: int) -> list[int]:
        out, t = [], 2 * k
        for i in range(16):
            t += 20 + (150 if i in (4, 8, 12) else 0)
            out.append(t)
        return out

    return [make(f"stream {first + k}", sent_ms, stamps(k)) for k in range(8)]


def test_a_soak_load_is_judged_on_the_streams_open_at_each_instant() -> None:
    # 24 streams in all, 8 open at a time: never half of all 24 stalled at once.
    soak = [t for wave in range(3) for t in stalled_wave(8 * wave, 1000 * wave)]
    (finding,) = findings_of(soak)
    assert finding.name == "blocked_loop"
    assert finding.evidence.startswith(
        "up to 8 of 8 open streams stalled together 9 times (24 in all)"
    ), finding
    assert (finding.data["open"], finding.data["streams"]) == (8, 24)
    free = [
        make(f"stream {8 * w + k}", 1000 * w, [2 * k + 20 * i for i in range(1, 17)])
        for w in range(3)
        for k in range(8)
    ]
    assert findings_of(free) == []


def staircase(step_ms: int) -> list[StreamTrace]:
    # 6 streams sent together; the heads 1 step apart; 20 ms a token after each head.
    return [
        make(f"stream {k}", 0, [step_ms * k + 20 * i for i in range(1, 9)], head_ms=step_ms * k + 2)
        for k in range(6)
    ]


def test_a_staircase_near_the_old_threshold_is_named_in_every_run() -> None:
    # Rising 0.160 s in one run and 0.190 s in the next: both above 5 healthy gaps (0.1 s).
    for step_ms in (32, 35, 38):
        found = findings_of(staircase(step_ms))
        assert names(found) == ["blocked_loop"], (step_ms, found)
        assert "response heads of 6 streams sent together arrived in a staircase" in (
            found[0].evidence
        )
    # Steps under 20 ms: heads spread by a busy machine, not a staircase.
    assert findings_of(staircase(12)) == []


def test_the_probes_waits_are_weighed_against_many_windows_at_once() -> None:
    # Answered in 1 ms, then none until the next probe 350 ms later, then 1 ms again.
    waited = Waited(probed([(0, 1), (50, None), (400, 1)]))
    assert waited.spans == [(50 * MS, 400 * MS)]
    assert waited.share(100 * MS, 300 * MS) == 1.0
    assert waited.share(0, 800 * MS) == pytest.approx(350 / 800)
    assert waited.share(500 * MS, 600 * MS) == 0.0
