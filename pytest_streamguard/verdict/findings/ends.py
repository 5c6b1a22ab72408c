"""How a stream ended: ``idle_cut`` (cut after a silence of a round length: a hop's read
timeout) and ``held_open`` (the body stayed open after the protocol's end).
"""

from __future__ import annotations

from pytest_streamguard.verdict.findings.base import Finding, Observed
from pytest_streamguard.verdict.findings.base import seconds as _s
from pytest_streamguard.verdict.findings.own import own_gap

#: idle_cut: a stream that did not complete, cut, reset or timed out after a silence of at
#: least this many seconds ...
IDLE_MIN_S = 0.9
#: ... within this share (or ``IDLE_TOLERANCE_S``) of a whole number of seconds.
IDLE_TOLERANCE = 0.05
IDLE_TOLERANCE_S = 0.1
#: ... counted from the last byte, or from a byte at most this long before it: nginx keeps a
#: running timer whose new deadline would move by under 300 ms (``NGX_TIMER_LAZY_DELAY``), so
#: its read timeout can fire up to 0.3 s early counted from the last read (a busy run saw
#: 0.872 s behind a 1 s ``proxy_read_timeout``, 0.992 s after the response head 0.120 s
#: before the last chunk). The request counts too: a hop arms its read timer when it sends the
#: request on, so a stream whose every byte came within 0.3 s of its request is cut a timeout
#: after the request (nginx, a 1 s timeout: 1.002 s after it, 0.775 s after the last byte).
IDLE_LAZY_S = 0.3
CUT_KINDS = frozenset({"cut", "reset", "timeout", "network", "truncated"})
#: ... and something on the way cut the stream: a ``timeout`` is the plugin's own client giving
#: up (its read limit, or the ``total`` bound), never a hop's read timeout (a 20-stream load
#: whose app blocked its loop 0.1 s every 5 tokens ended on the client's 1.050 s read limit,
#: 1.052 s after the last chunk, and was named ``idle_cut`` with no ingress on the way).
IDLE_CUT_KINDS = CUT_KINDS - {"timeout"}

#: held_open: the body stayed open at least this many seconds after the protocol's end.
HELD_OPEN_MIN_S = 0.1


def idle_cut(trace: Observed) -> Finding | None:
    if trace.completed or trace.error_kind not in IDLE_CUT_KINDS or trace.end_ns is None:
        return None
    head = trace.response_ns if trace.response_ns is not None else trace.request_ns
    stamps = sorted(
        {trace.request_ns, head, *(c.stamp_ns for c in trace.chunks), *trace.heartbeat_ns}
    )
    last = stamps[-1]
    silence = _s(trace.end_ns - last)
    # The byte from which the end is the roundest time (the later one of a tie), among the
    # last byte and those at most IDLE_LAZY_S before it, which a lazy timer may count from.
    candidates = [
        (abs(since - round(since)), -stamp, stamp, since)
        for stamp in stamps
        if _s(last - stamp) <= IDLE_LAZY_S and (since := _s(trace.end_ns - stamp)) >= IDLE_MIN_S
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
