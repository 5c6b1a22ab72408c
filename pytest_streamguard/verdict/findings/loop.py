"""``blocked_loop``: concurrent streams stalled in the same windows, or queued behind each
other, and the probe (when it ran) waited with them; under a stack, at the hop whose own probe
waited (:func:`_confirmed`).
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics
from collections.abc import Sequence
from typing import Any

from pytest_streamguard.common.display import counted
from pytest_streamguard.verdict.findings.base import Finding, Observed, sent_stamp
from pytest_streamguard.verdict.findings.base import seconds as _s
from pytest_streamguard.verdict.findings.buffered import BUFFERED_MIN_CHUNKS
from pytest_streamguard.verdict.findings.own import explained, own_fault
from pytest_streamguard.verdict.probe import Probed, ProbeWaits, Waited, waits

# The thresholds of the four patterns and of the probe's confirmation; why each is where it is
# (the runs that set it) is docs/findings.md's "blocked_loop" section.
#: shared stalls: a stall is a gap above this many seconds and ``STALL_FACTOR`` times the
#: stream's healthy gap (its ``HEALTHY_QUANTILE`` of gaps between reads, which stalls do not
#: inflate as they do the median), or, with the probe's samples, any gap above it the probe
#: waited through (``PROBE_WAIT_SHARE`` of it) ...
STALL_MIN_S = 0.05
STALL_FACTOR = 4.0
HEALTHY_QUANTILE = 0.25
#: ... an instant inside the stalls of this many streams (and half those open then) ...
SHARED_MIN_STREAMS = 3
#: ... seen this many times (separate windows, or each stream's stalls inside them).
SHARED_MIN_TIMES = 3
#: staircase: this many streams sent together (or within ``SENT_TOGETHER_S`` of the first) ...
STAIR_MIN_STREAMS = 4
SENT_TOGETHER_S = 0.05
#: ... whose heads (or first tokens) arrived in ``STAIR_MIN_STEPS`` steps (and this share of
#: the gaps between arrivals) ``STAIR_STEP_S`` apart (heads in fewer, that a loop running the
#: handlers' sync work back to back let out together: only where the probe waited) ...
STAIR_STEP_SHARE = 1 / 3
STAIR_MIN_STEPS = 3
STAIR_STEP_S = 0.02
#: ... rising by ``STAIR_RISE_FACTOR`` times the streams' healthy gap and ``STAIR_RISE_MIN_S``.
STAIR_RISE_FACTOR = 5.0
STAIR_RISE_MIN_S = 0.1
#: released together: ``STAIR_MIN_STREAMS`` streams' heads and whole answers (each at least
#: ``BUFFERED_MIN_CHUNKS`` chunks) within ``RELEASE_WINDOW_S`` of each other, ``STAIR_RISE_S``
#: or more after the last request, written by the server (``sent_ns``) within
#: ``RELEASE_SENT_SPAN_S`` (a server that wrote them over longer streamed; a hop held them).
STAIR_RISE_S = 0.2
RELEASE_WINDOW_S = 0.05
RELEASE_SENT_SPAN_S = 0.1
#: served in turn: of ``STAIR_MIN_STREAMS`` sent together, this many (and half) got their
#: heads only after another's whole answer, ``QUEUED_MIN_WAIT_S`` or more after their request,
#: and at most ``SERVED_AT_ONCE_MAX`` had theirs before that first answer ended.
QUEUED_MIN_STREAMS = 3
QUEUED_MIN_WAIT_S = 0.5
SERVED_AT_ONCE_MAX = 2

#: The probe's waits (answers of ``PROBE_WAIT_S`` or more, or none): this share of a gap makes
#: it a stall (above), and under it the loop was free (``queued``); whichever pattern matched, it
#: must have waited ``LOOP_HELD_SHARE`` of its windows (a loop only slowed, by threads taking its
#: GIL, is neither). Where they hold no sample (probe off, TCP, unreachable), the pattern decides.
PROBE_WAIT_SHARE = 0.25
LOOP_HELD_SHARE = 0.5


def _healthy_gap(trace: Observed) -> float:
    """The stream's healthy gap (ns): the ``HEALTHY_QUANTILE`` of its gaps between reads
    (chunks framed from one read, 0 apart, left out), which holds when most gaps are stalls."""
    gaps = sorted(
        g for a, b in itertools.pairwise(c.stamp_ns for c in trace.chunks) if (g := b - a)
    )
    return gaps[int(HEALTHY_QUANTILE * (len(gaps) - 1))] if gaps else 0.0


def _stalls(trace: Observed, waited: Waited | None) -> list[tuple[int, int]]:
    stamps = [c.stamp_ns for c in trace.chunks]
    if len(stamps) < 3:
        return []
    floor = max(STALL_MIN_S * 1e9, STALL_FACTOR * _healthy_gap(trace))
    # Every gap may be a stall (a loop blocked by each stream in turn): where the probe waited
    # through it, the target's own loop held it, whatever the stream's usual gap.
    return [
        (a, b)
        for a, b in itertools.pairwise(stamps)
        if b - a > floor
        or (
            b - a > STALL_MIN_S * 1e9
            and waited is not None
            and waited.share(a, b) >= PROBE_WAIT_SHARE
        )
    ]


#: A blocked_loop pattern's finding and the windows (``(start_ns, end_ns)``) in which it says
#: the loop was held, for the probe's samples to confirm.
_Matched = tuple[Finding, list[tuple[int, int]]]


def _shared_windows(
    traces: Sequence[Observed], stalls: dict[str, list[tuple[int, int]]]
) -> list[tuple[int, int, int, int]]:
    """The windows in which at least ``SHARED_MIN_STREAMS`` streams, and at least half of
    those open (from their request to their end), were stalled together: (start, end, most
    stalled together, streams open then)."""
    edges = sorted(
        [
            (stamp, 0, delta)
            for w in stalls.values()
            for a, b in w
            for stamp, delta in ((a, 1), (b, -1))
        ]
        + [
            (stamp, 1, delta)
            for t in traces
            for stamp, delta in ((t.request_ns, 1), (t.end_ns or t.request_ns, -1))
        ],
        key=lambda e: (e[0], e[2]),
    )
    windows: list[tuple[int, int, int, int]] = []
    stalled = open_ = 0
    start: int | None = None
    peak = peak_open = 0
    for stamp, is_open, delta in edges:
        if is_open:
            open_ += delta
        else:
            stalled += delta
        shared = stalled >= max(SHARED_MIN_STREAMS, (open_ + 1) // 2)
        if shared and start is None:
            start, peak, peak_open = stamp, stalled, open_
        elif shared and stalled > peak:
            peak, peak_open = stalled, open_
        elif not shared and start is not None:
            windows.append((start, stamp, peak, peak_open))
            start = None
    return windows


def _shared_stalls(traces: Sequence[Observed], probe: Probed | None) -> _Matched | None:
    waited = Waited(probe) if probe is not None and probe.sees_the_loop and probe.samples else None
    stalls = {t.name: _stalls(t, waited) for t in traces}
    if len(traces) < SHARED_MIN_STREAMS:
        return None
    windows = _shared_windows(traces, stalls)
    if not windows:
        return None
    # Seen again and again: separate windows, or (a loop blocked by each stream in turn holds
    # every stream stalled from one token to the next) each stream's stalls inside them.
    inside = [
        sum(1 for a, b in w if any(a < we and b > ws for ws, we, _, _ in windows))
        for w in stalls.values()
    ]
    times = max(len(windows), int(statistics.median(n for n in inside if n) if any(inside) else 0))
    if times < SHARED_MIN_TIMES:
        return None
    t0 = min(t.request_ns for t in traces)
    longest = max(windows, key=lambda w: w[1] - w[0])
    most, opened = max((w[2], w[3]) for w in windows)
    among = f"{opened} streams" if opened >= len(traces) else f"{opened} open streams"
    of_all = "" if opened >= len(traces) else f" ({len(traces)} in all)"
    stalled = sorted(name for name, w in stalls.items() if w)
    found = Finding(
        "blocked_loop",
        f"up to {most} of {among} stalled together {times} times{of_all}; longest "
        f"{_s(longest[1] - longest[0]):.3f} s at {_s(longest[0] - t0):.3f} s",
        tuple(stalled),
        {
            "streams": len(traces),
            "open": opened,
            "most_stalled": most,
            "times": times,
            "longest_s": _s(longest[1] - longest[0]),
            "at_s": _s(longest[0] - t0),
        },
    )
    return found, [(a, b) for a, b, _, _ in windows]


def sent_together(arrivals: Sequence[tuple[int, Observed]]) -> list[tuple[int, Observed]]:
    """The ``(arrival, stream)`` pairs of the streams sent together, by arrival: each request
    sent before the first arrival, or within ``SENT_TOGETHER_S`` of the first request."""
    first = min(stamp for stamp, _ in arrivals)
    cutoff = max(first, min(t.request_ns for _, t in arrivals) + int(SENT_TOGETHER_S * 1e9))
    return sorted(
        ((stamp, t) for stamp, t in arrivals if t.request_ns <= cutoff), key=lambda a: a[0]
    )


def _staircase(traces: Sequence[Observed], what: str) -> _Matched | None:
    if what == "heads":
        arrivals = [(t.response_ns, t) for t in traces if t.response_ns is not None]
    else:
        arrivals = [(t.chunks[0].stamp_ns, t) for t in traces if t.chunks]
    if len(arrivals) < STAIR_MIN_STREAMS:
        return None
    together = sent_together(arrivals)
    if len(together) < STAIR_MIN_STREAMS:
        return None
    stamps = [stamp for stamp, _ in together]
    steps = [b - a for a, b in itertools.pairwise(stamps)]
    rise = _s(stamps[-1] - stamps[0])
    big = sum(1 for s in steps if s >= STAIR_STEP_S * 1e9)
    healthy = statistics.median(_healthy_gap(t) for t in traces) / 1e9
    least = max(STAIR_RISE_MIN_S, STAIR_RISE_FACTOR * healthy)
    collapsed = big < max(STAIR_MIN_STEPS, STAIR_STEP_SHARE * len(steps))
    if rise < least or big < 1 or (collapsed and what != "heads"):
        return None
    t0 = min(t.request_ns for _, t in together)
    noun = "response heads" if what == "heads" else "first tokens"
    found = Finding(
        "blocked_loop",
        f"{noun} of {len(together)} streams sent together arrived in a staircase of "
        f"{big + 1} steps: {_s(stamps[0] - t0):.3f} s to {_s(stamps[-1] - t0):.3f} s",
        tuple(t.name for _, t in together),
        {
            "streams": len(together),
            "first_s": _s(stamps[0] - t0),
            "last_s": _s(stamps[-1] - t0),
            "steps": big + 1,
            "staircase": what,
            **({"collapsed": True} if collapsed else {}),
        },
    )
    return found, [(t0, stamps[-1])]


def _before_first_head(headed: Sequence[Observed]) -> list[Observed] | None:
    """Those of ``headed`` (streams with a response head) sent before the first head came, if
    at least ``STAIR_MIN_STREAMS`` were: the streams a loop had to serve side by side."""
    if len(headed) < STAIR_MIN_STREAMS:
        return None
    first = min(t.response_ns for t in headed if t.response_ns is not None)
    together = [t for t in headed if t.request_ns <= first]
    return together if len(together) >= STAIR_MIN_STREAMS else None


def _released_together(traces: Sequence[Observed]) -> _Matched | None:
    done = [t for t in traces if t.completed and len(t.chunks) >= BUFFERED_MIN_CHUNKS]
    if any(t.response_ns is None for t in done):
        return None
    together = _before_first_head(done)
    if together is None:
        return None
    stamps = [
        stamp
        for t in together
        for stamp in (t.response_ns, t.chunks[0].stamp_ns, t.chunks[-1].stamp_ns)
        if stamp is not None
    ]
    sent = max(t.request_ns for t in together)
    window = _s(max(stamps) - min(stamps))
    silent = _s(min(stamps) - sent)
    if window > RELEASE_WINDOW_S or silent < STAIR_RISE_S:
        return None
    sends = [ns for t in together for c in t.chunks if (ns := sent_stamp(c)) is not None]
    if sends and _s(max(sends) - min(sends)) >= RELEASE_SENT_SPAN_S:
        return None
    found = Finding(
        "blocked_loop",
        f"response heads and whole answers of {len(together)} streams sent together arrived "
        f"within {window:.3f} s, after {silent:.3f} s in which none of them got a byte",
        tuple(t.name for t in together),
        {"streams": len(together), "window_s": window, "silent_s": silent},
    )
    return found, [(sent, min(stamps))]


def _served_in_turn(traces: Sequence[Observed]) -> _Matched | None:
    together = _before_first_head([t for t in traces if t.response_ns is not None])
    if together is None:
        return None
    ended = [
        (t.chunks[-1].stamp_ns, t)
        for t in together
        if t.completed and len(t.chunks) >= BUFFERED_MIN_CHUNKS
    ]
    queued = []
    for t in together:
        assert t.response_ns is not None
        waited = t.response_ns - t.request_ns >= QUEUED_MIN_WAIT_S * 1e9
        if waited and any(end <= t.response_ns and o is not t for end, o in ended):
            queued.append(t)
    if len(queued) < max(QUEUED_MIN_STREAMS, len(together) / 2):
        return None
    t0 = min(t.request_ns for t in together)
    first_end, served = min(((end, o) for end, o in ended), key=lambda e: e[0])
    under_way = [t for t in together if t.response_ns is not None and t.response_ns < first_end]
    if len(under_way) > SERVED_AT_ONCE_MAX:
        return None
    latest = max(t.response_ns for t in queued if t.response_ns is not None)
    found = Finding(
        "blocked_loop",
        f"{len(queued)} of {len(together)} streams sent together got their response heads only "
        f"after another had its whole answer (the first of them by {_s(first_end - t0):.3f} s, "
        f"{len(served.chunks)} chunks); the last head at {_s(latest - t0):.3f} s",
        tuple(t.name for t in queued),
        {
            "streams": len(together),
            "queued": len(queued),
            "first_answer_s": _s(first_end - t0),
            "last_head_s": _s(latest - t0),
        },
    )
    return found, [(t0, latest)]


def probe_data(seen: ProbeWaits) -> dict[str, Any]:
    """The probe's wait as a finding's ``data``."""
    return {f"probe_{name}": value for name, value in dataclasses.asdict(seen).items()}


def _confirmed(matched: _Matched, probe: Probed | None) -> Finding | None:
    """A blocked_loop pattern as the probes saw it: unchanged where none has a sample in the
    pattern's windows (heads let out together: None); None where none waited ``LOOP_HELD_SHARE``
    there (a loop free or only slowed); else at the hop (``probe.hop``) whose own probe waited,
    the innermost where several did (a ready path may wait on the hop behind it; a hop is probed
    directly, never through the one in front), with that probe's wait added to its evidence."""
    finding, windows = matched
    heard = [(one, seen) for one in (probe.hops if probe else []) if (seen := waits(one, windows))]
    waited = [(one, seen) for one, seen in heard if seen.share >= LOOP_HELD_SHARE]
    if not heard:
        return None if finding.data.get("collapsed") else finding
    if not waited:
        return None
    probe, seen = waited[0]
    streams = counted(len(finding.streams), "stream")
    return Finding(
        finding.name,
        f"{finding.evidence}; {probe.what} took up to {seen.longest_s:.3f} s there, waiting "
        f"{seen.share:.0%} of that time ({seen.waited} of {counted(seen.samples, 'probe')} "
        "waited)",
        finding.streams,
        {**finding.data, **probe_data(seen)},
        cause=(
            f"the event loop was blocked: {probe.what} took {seen.longest_s:.2f} s while "
            f"{streams} stalled"
        ),
        hop=probe.hop,
    )


def blocked_loop(traces: Sequence[Observed], probe: Probed | None) -> Finding | None:
    """``blocked_loop`` by the first of its patterns that matched and that the probe (where
    it has samples there) confirmed; else ``own_fault`` where a pattern matched in the
    windows of a fault the plugin applied (:mod:`.own`); else None."""
    by_name = {t.name: t for t in traces}
    own: Finding | None = None
    for matched in (
        _shared_stalls(traces, probe),
        _staircase(traces, "heads"),
        _staircase(traces, "tokens"),
        _served_in_turn(traces),
        _released_together(traces),
    ):
        if matched is None:
            continue
        found = _confirmed(matched, probe)
        if found is None:
            continue
        windows = matched[1]
        on = [by_name[name] for name in found.streams if name in by_name]
        # A fault on a hop behind the one whose probe waited may have held that probe (a
        # gateway's ready path that asks the model's): then its wait is no evidence.
        hops = [one.hop for one in probe.hops] if probe is not None else []
        behind = hops[: hops.index(found.hop)] if found.hop in hops else []
        faulted = {getattr(f, "hop", None) for t in on for f in getattr(t, "faults", ())}
        fault = explained(on, windows, probe_waited=bool(found.cause) and not faulted & set(behind))
        if fault is None:
            return found
        longest = max(b - a for a, b in windows)
        own = own or own_fault("blocked_loop", fault, found.streams, _s(longest))
    return own
