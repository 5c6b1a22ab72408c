"""Whether a fault took effect, judged from the streams it was active on.

A test under a fault that never acted proved nothing, so every fault of a test is judged when
its body ends (:meth:`~pytest_streamguard.faults.inject.Faults.judge`): ``fired`` and a sentence of
``evidence`` on its :class:`~pytest_streamguard.stream.trace.FaultRecord`. What counts as taking
effect, by fault, is the table in docs/faults.md ("Did the fault fire?"); a fault active on no
stream did not fire.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from pytest_streamguard.common.codings import DECODABLE
from pytest_streamguard.common.display import counted
from pytest_streamguard.errors import FaultsNotFired
from pytest_streamguard.faults.profiles import Toxic
from pytest_streamguard.stream.trace import FaultRecord, StreamTrace

# How a stream ends when the proxy closes its connection (a FIN from limit_data, or a
# disabled proxy): httpx's RemoteProtocolError mid-body or before the answer, a clean close of
# a close-delimited body, or another broken connection.
CLOSED = frozenset({"cut", "truncated", "network"})
RESET = frozenset({"reset", "cut", "network"})
DOWN = frozenset({"connect", "cut", "reset", "network", "truncated"})
SILENCED = frozenset({"timeout", "cut", "reset", "network", "truncated"})


def _n(value: float) -> str:
    return f"{value:,.0f}"


def _largest(traces: Sequence[StreamTrace]) -> str:
    return f"largest {_n(max(t.nbytes for t in traces))} bytes"


def _window(record: FaultRecord) -> tuple[int, float]:
    start = record.on_ns if record.on_ns is not None else record.armed_ns
    return (start or 0), (record.off_ns if record.off_ns is not None else float("inf"))


def _passed(record: FaultRecord, traces: Sequence[StreamTrace], stream: str) -> tuple[bool, str]:
    """Fired when bytes passed while the fault was on (downstream: the answer; upstream: the
    request)."""
    start, end = _window(record)
    if stream == "upstream":
        sent = [t for t in traces if start <= t.request_ns <= end]
        if sent:
            return (
                True,
                f"{counted(len(sent), 'request')} {'was' if len(sent) == 1 else 'were'} sent "
                "while it was on",
            )
        return False, "no request was sent while it was on"
    moved = 0
    streams = 0
    for trace in traces:
        during = sum(n for stamp, n in trace.reads if start <= stamp <= end)
        headers = trace.response_ns is not None and start <= trace.response_ns <= end
        if during or headers:
            moved += during
            streams += 1
    if streams:
        return (
            True,
            f"{_n(moved)} response bytes of {counted(streams, 'stream')} passed while it was on",
        )
    return False, "no response byte passed while it was on"


def _ended(
    traces: Sequence[StreamTrace], kinds: frozenset[str], how: str, *, since: int | None = None
) -> tuple[bool, str]:
    """Fired when a stream it was active on ended in one of ``kinds`` (after ``since``)."""
    for trace in traces:
        late = since is None or (trace.end_ns is not None and trace.end_ns >= since)
        if not trace.completed and trace.error_kind in kinds and late:
            return True, f"{trace.name} ended {trace.error_kind} after {_n(trace.nbytes)} bytes"
    if all(t.completed for t in traces):
        return False, f"every stream it was active on completed ({_largest(traces)})"
    outcomes = sorted({str(t.error_kind) for t in traces if not t.completed})
    return False, (
        f"no stream it was active on was {how} (outcomes: completed or "
        f"{', '.join(outcomes)}; {_largest(traces)})"
    )


def _slow_reader(
    record: FaultRecord, traces: Sequence[StreamTrace], waited: float
) -> tuple[bool, str]:
    rate = float(record.params["bytes_per_second"])
    if waited > 0:
        return True, f"the reader waited {waited:.3f} s in all to keep to {_n(rate)} B/s"
    fastest = max(traces, key=lambda t: t.nbytes / max(t.total or 0.0, 1e-9))
    return False, (
        f"no stream came faster than {_n(rate)} B/s, so the reader never waited "
        f"(fastest: {_n(fastest.nbytes)} bytes in {fastest.total or 0.0:.3f} s)"
    )


def _reached(record: FaultRecord, traces: Sequence[StreamTrace], hits: int) -> str:
    after = int(record.params["after_chunks"])
    if hits:
        return ""
    longest = max(len(t.chunks) for t in traces)
    return f"no stream reached chunk {after} (longest: {counted(longest, 'chunk')})"


def _frozen(record: FaultRecord, traces: Sequence[StreamTrace]) -> tuple[bool, str]:
    """A freeze stopped the target from ``on_ns`` to ``off_ns``: fired when a stream waited
    at least 90 % of its seconds across that time (between two events, or before its first),
    or ended by it (a read timeout while the target was stopped)."""
    seconds = float(record.params["seconds"])
    on, off = record.on_ns, record.off_ns
    if on is None:
        return False, "the target was never stopped (no stream reached the chunk to freeze at)"
    longest = 0.0
    for trace in traces:
        end = trace.end_ns
        if not trace.completed and end is not None and on <= end and (off is None or end <= off):
            return True, f"{trace.name} ended {trace.error_kind} while the target was stopped"
        stamps = [trace.request_ns, *(c.stamp_ns for c in trace.chunks)]
        if trace.end_ns is not None:
            stamps.append(trace.end_ns)
        for before, after in itertools.pairwise(stamps):
            if after < on or (off is not None and before > off):
                continue
            gap = (after - before) / 1e9
            longest = max(longest, gap)
            if gap >= 0.9 * seconds:
                return True, f"{trace.name} waited {gap:.3f} s while the target was stopped"
    return False, (
        f"no stream waited {0.9 * seconds:.3f} s while the target was stopped "
        f"(longest wait then: {longest:.3f} s)"
    )


def _held_at_chunk(record: FaultRecord, hits: Sequence[StreamTrace]) -> tuple[bool, str]:
    """A stall the proxy applied right after chunk N of each stream: held if a stream's next
    event (or its end) came at least 90 % of the stall's seconds after its chunk N."""
    after = int(record.params["after_chunks"])
    seconds = float(record.params["seconds"])
    held: list[float] = []
    for hit in hits:
        stamps = [c.stamp_ns for c in hit.chunks[after:]]
        following = stamps[0] if stamps else hit.end_ns
        if following is not None and len(hit.chunks) >= after:
            held.append((following - hit.chunks[after - 1].stamp_ns) / 1e9)
    enough = [gap for gap in held if gap >= 0.9 * seconds]
    if enough:
        return True, (
            f"{len(enough)} of {counted(len(hits), 'stream')} that reached chunk {after} "
            f"waited {min(enough):.3f} s or more after it"
        )
    longest = max(held, default=0.0)
    return False, (
        f"{counted(len(hits), 'stream')} reached chunk {after}, but none waited "
        f"{0.9 * seconds:.3f} s after it (longest wait: {longest:.3f} s)"
    )


def _at_chunk(
    record: FaultRecord, traces: Sequence[StreamTrace], triggered: Sequence[StreamTrace]
) -> tuple[bool, str]:
    """A stall, cut or reset the proxy applies right after chunk N of each stream."""
    missing = _reached(record, traces, len(triggered))
    if missing:
        return False, missing
    if record.kind == "stall":
        return _held_at_chunk(record, triggered)
    kinds = CLOSED if record.kind == "cut" else RESET
    fired, evidence = _ended(triggered, kinds, record.kind, since=record.on_ns)
    if fired:
        return fired, evidence
    return False, (
        f"{counted(len(triggered), 'stream')} reached chunk {record.params['after_chunks']} "
        f"but ended before the {record.kind} took effect ({evidence})"
    )


def _undecoded(traces: Sequence[StreamTrace]) -> str:
    """Where streams came in a content coding this environment cannot decode, what that
    means for a fault the proxy counts chunks for (it counts in a decoded copy)."""
    codings = (
        {
            value.strip().lower()
            for trace in traces
            if trace.recorded is not None
            for name, value in trace.recorded.headers
            if name.lower() == "content-encoding"
        }
        - DECODABLE
        - {"", "identity"}
    )
    if not codings:
        return ""
    return (
        f"; the proxy cannot decode a {', '.join(sorted(codings))}-coded body, so it never "
        "counted its chunks (install its decoder, e.g. brotli for br, zstandard for zstd, or "
        "have the client not ask for it)"
    )


def judge_toxic(
    toxic: Toxic, record: FaultRecord, traces: Sequence[StreamTrace]
) -> tuple[bool, str]:
    """One toxic of a profile, by its type."""
    if toxic.type == "limit_data":
        return _ended(traces, CLOSED, "cut")
    if toxic.type == "reset_peer":
        return _ended(traces, RESET, "reset")
    if toxic.type == "timeout":
        return _ended(traces, SILENCED, "held silent")
    quiet = not toxic.attributes.get("latency") and not toxic.attributes.get("jitter")
    if toxic.type == "latency" and quiet:
        return False, "a 0 ms latency delays nothing"
    return _passed(record, traces, toxic.stream)


def judge(
    record: FaultRecord,
    traces: Sequence[StreamTrace],
    *,
    triggered: Sequence[StreamTrace] = (),
    toxics: Sequence[Toxic] = (),
    waited: float = 0.0,
) -> tuple[bool, str]:
    """(fired, evidence) for ``record`` from the ``traces`` it was active on.

    ``triggered``: for a fault the client triggers after N chunks, the streams that reached
    chunk N; ``toxics``: for a ``profile`` record, the profile's toxics; ``waited``: for a
    ``slow_reader``, the seconds its reader waited to keep to the rate."""
    if not traces:
        return False, "active on no stream (none was read while it was on)"
    kind = record.kind
    if kind == "latency":
        if not record.params.get("ms") and not record.params.get("jitter"):
            return False, "a 0 ms latency delays nothing"
        return _passed(record, traces, str(record.params.get("stream", "downstream")))
    if kind == "slow_reader":
        return _slow_reader(record, traces, waited)
    if kind == "freeze":
        return _frozen(record, traces)
    if kind == "restart":
        if record.on_ns is None:
            # Only a restart after N chunks waits to act.
            return False, f"the target was never killed: {_reached(record, traces, 0)}"
        return _ended(traces, DOWN, "cut by the kill", since=record.on_ns)
    if kind == "stall" or (kind in ("cut", "reset") and "after_chunks" in record.params):
        fired, evidence = _at_chunk(record, traces, triggered)
        return fired, evidence if fired else evidence + _undecoded(traces)
    if kind == "cut":
        return _ended(traces, CLOSED, "cut")
    if kind == "reset":
        return _ended(traces, RESET, "reset")
    if kind == "down":
        return _ended(traces, DOWN, "refused or cut", since=record.on_ns)
    if kind == "blackhole":
        return _ended(traces, SILENCED, "held silent")
    if kind == "profile":
        if not toxics:
            return False, "the profile has no toxic of its own"
        verdicts = [(t, *judge_toxic(t, record, traces)) for t in toxics]
        took = [f"{t.type}: {why}" for t, ok, why in verdicts if ok]
        if took:
            return True, "; ".join(took)
        return False, "; ".join(
            f"{t.type}({', '.join(f'{k}={v}' for k, v in t.attributes.items())}): {why}"
            for t, _, why in verdicts
        )
    return _passed(record, traces, "downstream")


def faults_not_fired(faults: list[FaultRecord]) -> FaultsNotFired:
    """The :class:`~pytest_streamguard.errors.FaultsNotFired` to raise for ``faults`` (under
    ``--streamguard-strict-faults``): each fault with what its streams showed."""
    lines = [f"  {f.describe()}: {f.evidence}" for f in faults]
    return FaultsNotFired(
        f"{counted(len(faults), 'fault')} never fired, so the test proved nothing about "
        f"{'it' if len(faults) == 1 else 'them'} "
        "(--streamguard-strict-faults):\n" + "\n".join(lines),
        faults,
    )
