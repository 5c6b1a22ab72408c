"""How a stream ended: ``idle_cut`` (cut after a silence of a round length, or several streams
ended by a hop after the same silence: a hop's read timeout) and ``held_open`` (the body stayed
open after the protocol's end).
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_streamguard.common.display import counted
from pytest_streamguard.verdict.findings.base import Finding, Observed
from pytest_streamguard.verdict.findings.base import seconds as _s
from pytest_streamguard.verdict.findings.own import own_gap

#: idle_cut: a stream that did not complete, cut, reset or timed out after a silence of at
#: least this many seconds ...
IDLE_MIN_S = 0.9
#: ... within this share (or ``IDLE_TOLERANCE_S``) of a whole number of seconds.
IDLE_TOLERANCE = 0.05
IDLE_TOLERANCE_S = 0.1
#: ... counted from the last byte, a byte at most this long before it (nginx's lazy timers:
#: docs/findings.md, "idle_cut"), or the request (a hop arms its read timer as it sends it on).
IDLE_LAZY_S = 0.3
CUT_KINDS = frozenset({"cut", "reset", "timeout", "network", "truncated"})
#: ... and something on the way cut the stream: a ``timeout`` is the plugin's own client giving
#: up (its read limit, or the ``total`` bound), never a hop's read timeout.
IDLE_CUT_KINDS = CUT_KINDS - {"timeout"}

#: idle_cut (the same silence): at least this many streams, and at least half of those ended
#: by a hop (``IDLE_CUT_KINDS``, or answered HTTP 502 or 504 instead of the stream) ...
IDLE_SAME_MIN_STREAMS = 3
#: ... ended after silences within this share (or ``IDLE_SAME_TOLERANCE_S``) of one another,
#: whatever their length, each counted as :func:`idle_cut` counts ...
IDLE_SAME_SHARE = 0.1
IDLE_SAME_TOLERANCE_S = 0.05
#: ... of at least this many seconds from each stream's last byte.
IDLE_SAME_MIN_S = 0.1
_GATEWAY_ERRORS = frozenset({502, 504})

#: held_open: the body stayed open at least this many seconds after the protocol's end.
HELD_OPEN_MIN_S = 0.1


def _counted_from(trace: Observed, end_ns: int) -> list[tuple[int, float]]:
    """``(stamp, seconds to the end)`` of each byte a hop's read timer may have counted from:
    the last byte before ``end_ns`` (chunk, heartbeat, or a response head that is not the end
    itself) and those at most ``IDLE_LAZY_S`` before it (a lazy timer), the request among them."""
    heads = [] if trace.response_ns in (None, end_ns) else [trace.response_ns]
    stamps = sorted(
        {trace.request_ns, *heads, *(c.stamp_ns for c in trace.chunks), *trace.heartbeat_ns}
    )
    stamps = [stamp for stamp in stamps if stamp <= end_ns]
    return [(at, _s(end_ns - at)) for at in stamps if _s(stamps[-1] - at) <= IDLE_LAZY_S]


def idle_cut(trace: Observed) -> Finding | None:
    if trace.completed or trace.error_kind not in IDLE_CUT_KINDS or trace.end_ns is None:
        return None
    counted_from = _counted_from(trace, trace.end_ns)
    last = counted_from[-1][0]
    silence = _s(trace.end_ns - last)
    # The byte from which the end is the roundest time (the later one of a tie), among the
    # last byte and those at most IDLE_LAZY_S before it, which a lazy timer may count from.
    candidates = [
        (abs(since - round(since)), -stamp, stamp, since)
        for stamp, since in counted_from
        if since >= IDLE_MIN_S
    ]
    if not candidates:
        return None
    off, _, stamp, since = min(candidates)
    whole = round(since)
    if off > max(IDLE_TOLERANCE * whole, IDLE_TOLERANCE_S):
        return None
    own = own_gap(trace, stamp, trace.end_ns, "idle_cut")
    if own is not None:
        return own
    evidence = f"{trace.error_kind} after {silence:.3f} s of silence"
    if stamp == trace.request_ns and stamp != last:
        evidence += f", {since:.3f} s after its request, {_s(last - stamp):.3f} s before the last"
    elif stamp != last:
        evidence += f", {since:.3f} s after a read {_s(last - stamp):.3f} s before the last"
    return Finding(
        "idle_cut",
        f"{evidence} (a {whole} s read timeout?)",
        (trace.name,),
        {"silence_s": silence, "since_s": since, "round_s": whole, "error_kind": trace.error_kind},
    )


def _hop_ended(trace: Observed) -> int | None:
    """When a hop ended ``trace``: its end for a cut (``IDLE_CUT_KINDS``), its response head
    for an HTTP 502 or 504 answered instead of the stream; None otherwise."""
    if trace.completed:
        return None
    if trace.error_kind == "http" and getattr(trace, "status_code", None) in _GATEWAY_ERRORS:
        return trace.response_ns
    return trace.end_ns if trace.error_kind in IDLE_CUT_KINDS else None


def _near(since: float) -> float:
    return max(IDLE_SAME_SHARE * since, IDLE_SAME_TOLERANCE_S)


def _largest(left: dict[str, list[float]]) -> tuple[int, list[float]]:
    """How many streams of ``left`` the largest group holds, and the silences that gather
    that many (one pass over them all, sorted: a window's edges only move on)."""
    pairs = sorted((x, n) for n, v in left.items() for x in v)
    inside: dict[str, int] = {}
    lo = hi = 0
    counts = []
    for since, _ in pairs:
        while hi < len(pairs) and pairs[hi][0] <= since + _near(since):
            inside[pairs[hi][1]] = inside.get(pairs[hi][1], 0) + 1
            hi += 1
        while pairs[lo][0] < since - _near(since):
            name = pairs[lo][1]
            inside[name] -= 1
            if not inside[name]:
                del inside[name]
            lo += 1
        counts.append((len(inside), since))
    most = max((c for c, _ in counts), default=0)
    return most, [since for c, since in counts if c == most]


def _groups(silences: dict[str, list[float]]) -> list[tuple[float, list[str]]]:
    """The streams of ``silences`` (each one's candidate silences) in groups of at least
    ``IDLE_SAME_MIN_STREAMS`` that share one silence, the largest first: of groups as large,
    the one whose silences lie closest together, then the shortest (from the last bytes)."""
    groups = []
    left = dict(silences)
    while left:
        most, shared = _largest(left)
        if most < IDLE_SAME_MIN_STREAMS:
            break
        best: tuple[float, float, list[str]] | None = None
        # To the millisecond: a timer's length is not known finer on a busy machine.
        for since in sorted({round(x, 3) for x in shared}):
            off = {n: min(abs(x - since) for x in v) for n, v in left.items()}
            names = [n for n, d in off.items() if d <= _near(since)]
            key = (sum(off[n] for n in names), since, names)
            best = key if best is None or key[:2] < best[:2] else best
        assert best is not None
        groups.append((best[1], best[2]))
        left = {n: v for n, v in left.items() if n not in best[2]}
    return groups


def same_silence(traces: Sequence[Observed]) -> list[Finding]:
    """``idle_cut`` for each group of streams a hop ended after the same silence (see the
    thresholds above); where one of the plugin's faults made a stream's silence, ``own_fault``
    for that stream instead. Empty when the groups hold under half the streams a hop ended."""
    ended = {t.name: (t, end) for t in traces if (end := _hop_ended(t)) is not None}
    # A stream still flowing when it was cut (its last byte under IDLE_SAME_MIN_S before
    # the end) was not silent, whatever a lazy timer may count from.
    silences = {
        name: [since for _, since in counted_from]
        for name, (t, end) in ended.items()
        if (counted_from := _counted_from(t, end))[-1][1] >= IDLE_SAME_MIN_S
    }
    groups = _groups(silences)
    if sum(len(names) for _, names in groups) < len(ended) / 2:
        return []
    found: list[Finding] = []
    for silence, names in groups:
        cut = []
        for name in names:
            trace, end = ended[name]
            own = own_gap(trace, end - int(silence * 1e9), end, "idle_cut")
            found += [own] if own is not None else []
            cut += [] if own is not None else [name]
        if len(cut) < IDLE_SAME_MIN_STREAMS:
            continue
        kinds = sorted({_ended_as(ended[n][0]) for n in cut})
        found.append(
            Finding(
                "idle_cut",
                f"{counted(len(cut), 'stream')} ended {' or '.join(kinds)} after the same "
                f"{silence:.3f} s of silence (a {silence:.3f} s read timeout on the way?)",
                tuple(cut),
                {"silence_s": silence, "streams": len(cut), "error_kinds": kinds},
            )
        )
    return found


def _ended_as(trace: Observed) -> str:
    status = getattr(trace, "status_code", None)
    return f"HTTP {status}" if trace.error_kind == "http" else str(trace.error_kind)


def held_open(trace: Observed) -> Finding | None:
    held = getattr(trace, "held_open_s", None)
    if not isinstance(held, int | float) or held < HELD_OPEN_MIN_S:
        return None
    return Finding(
        "held_open",
        f"body held open {held:.3f} s after the protocol's end",
        (trace.name,),
        {"held_open_s": float(held)},
    )
