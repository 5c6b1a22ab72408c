"""The plugin's own faults are evidence, never a cause: ``own_fault``.

A fault a test applies makes gaps on purpose that look like the app's incidents (a stall's held
chunks arrive in one read at the end, as a buffering hop's do). So each finding that blames the
app or a hop checks its windows against those of the faults active on its streams
(:func:`own_windows`); where one explains the pattern (:func:`explained`), the verdict names that
fault instead. Which fault explains which window, and what the probe adds: docs/findings.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_streamguard.common.display import counted
from pytest_streamguard.verdict.findings.base import Finding, Observed
from pytest_streamguard.verdict.findings.base import seconds as _s

#: A latency fault explains a gap of at most this many times its ``ms + jitter`` ...
OWN_HOLD_FACTOR = 2.0
#: ... plus this many seconds (a busy machine's scheduling on the way).
OWN_HOLD_SLACK_S = 0.05

#: The faults that hold or spread bytes for as long as they are on.
_THROTTLING = frozenset({"bandwidth", "slow_reader", "slicer", "profile"})
#: The faults that end a stream.
_ENDING = frozenset({"cut", "reset", "down", "blackhole", "restart"})
#: The faults that stop the target itself (the probe waits under them too).
_STOPPING = frozenset({"freeze", "restart"})


@dataclass(frozen=True)
class OwnWindow:
    """Where one of the plugin's faults acted on one stream: ``[start_ns, end_ns]``, the
    longest gap it can make there (``hold_ns``, None for any), and ``where`` in words
    (``the gap after chunk 5``)."""

    fault: Any
    stream: str
    start_ns: int
    end_ns: int
    hold_ns: int | None
    where: str


def _latency_hold(fault: Any) -> int | None:
    ms = float(fault.params.get("ms", 0)) + float(fault.params.get("jitter", 0))
    return int((OWN_HOLD_FACTOR * ms / 1000 + OWN_HOLD_SLACK_S) * 1e9)


def own_windows(trace: Observed) -> list[OwnWindow]:
    """The windows of the faults the plugin applied that were active on ``trace``."""
    chunks = trace.chunks
    last = chunks[-1].stamp_ns if chunks else (trace.response_ns or trace.request_ns)
    end = trace.end_ns if trace.end_ns is not None else last
    found = []
    for fault in getattr(trace, "faults", ()):
        since = fault.on_ns if fault.on_ns is not None else fault.armed_ns
        since = trace.request_ns if since is None else since
        until = fault.off_ns if fault.off_ns is not None else end
        window: tuple[int, int, int | None, str]
        if fault.kind == "stall":
            n = int(fault.params["after_chunks"])
            if len(chunks) < n:
                continue
            after = chunks[n].stamp_ns if len(chunks) > n else end
            window = (chunks[n - 1].stamp_ns, after, None, f"the gap after chunk {n}")
        elif fault.kind == "freeze":
            if fault.off_ns is None and fault.on_ns is not None:
                until = fault.on_ns + int(float(fault.params["seconds"]) * 1e9)
            window = (since, until, None, "the target's freeze")
        elif fault.kind in _ENDING:
            if trace.completed or trace.end_ns is None:
                continue
            window = (trace.end_ns, trace.end_ns, None, "the stream's end")
        elif fault.kind == "latency":
            window = (since, until, _latency_hold(fault), "a gap while it was on")
        elif fault.kind in _THROTTLING:
            window = (since, until, None, "a gap while it was on")
        else:
            # An ingress the test put on the way (a real nginx) is a hop the findings judge,
            # not a fault that makes gaps of its own.
            continue
        start, stop, hold, where = window
        found.append(OwnWindow(fault, trace.name, start, stop, hold, where))
    return found


def explained(
    traces: Sequence[Observed], windows: Sequence[tuple[int, int]], *, probe_waited: bool = False
) -> OwnWindow | None:
    """The first fault the plugin applied on ``traces`` whose window explains one of
    ``windows`` (the pattern's gaps): it overlaps the gap, and can make a gap that long.
    ``probe_waited``: the probe waited in them, so only a fault that stopped the target
    explains them."""
    for trace in traces:
        for own in own_windows(trace):
            if probe_waited and own.fault.kind not in _STOPPING:
                continue
            for a, b in windows:
                overlaps = own.start_ns <= b and own.end_ns >= a
                if overlaps and (own.hold_ns is None or b - a <= own.hold_ns):
                    return own
    return None


def own_fault(instead_of: str, own: OwnWindow, streams: Sequence[str], gap_s: float) -> Finding:
    """The ``own_fault`` finding that stands where ``instead_of`` would have blamed the app
    for a gap of ``gap_s`` seconds on ``streams`` that ``own`` explains."""
    fault = own.fault.describe()
    on = own.stream if len(streams) <= 1 else f"{own.stream} and {len(streams) - 1} more"
    return Finding(
        "own_fault",
        f"{own.where} of {on}, {gap_s:.3f} s, is the plugin's own {fault}, not {instead_of}",
        tuple(streams),
        {"fault": fault, "instead_of": instead_of, "gap_s": gap_s, "where": own.where},
        cause=(
            f"the plugin's own fault {fault} held {counted(len(streams), 'stream')}, "
            f"not the app ({own.where})"
        ),
        # An inner hop's fault is at its hop; the entry's own (no hop) is placed at the entry.
        hop=getattr(own.fault, "hop", None),
    )


def own_gap(trace: Observed, start_ns: int, end_ns: int, instead_of: str) -> Finding | None:
    """``own_fault`` for one stream's gap ``[start_ns, end_ns]`` that one of the plugin's
    faults explains, or None."""
    own = explained([trace], [(start_ns, end_ns)])
    if own is None:
        return None
    # A stall's own gap is the one it made; another fault's, the pattern's.
    gap = own.end_ns - own.start_ns if own.fault.kind == "stall" else end_ns - start_ns
    return own_fault(instead_of, own, [trace.name], _s(gap))
