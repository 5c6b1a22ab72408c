"""``probe_interrupted``: a stream that ended normally while the probe waited for its end.

The instrument must leave no mark, and a probe can: llama-cpp-python answers its ready path
``/v1/models`` by taking the model's lock, and at its default ``interrupt_requests=True`` that
ends the stream in progress with a normal ``[DONE]``. Such a stream reads as ``completed``
with fewer tokens than asked for. The plugin's default probe touches no model route
(:meth:`~pytest_streamguard.stream.probe.ProbeSpec.for_target`); where a probe asks one anyway
(``--streamguard-probe /v1/models``, a :func:`~pytest_streamguard.verdict.probe.model_route`),
a completed stream is marked where its protocol gave no reason for its end (llama-cpp-python's
interrupted stream ends with ``[DONE]`` and no ``finish_reason``; a whole answer says ``stop``
or ``length``) and a probe went out before its end, waited :data:`INTERRUPT_PROBE_MIN_S` or
more, and was answered only after its last token: the server held the probe until the stream
ended, so the end may be the probe's doing. A probe that waited longer than two of the
stream's usual gaps waited out a stall (a blocked loop holds its streams and the probe alike),
not a token step: not marked. A probe of another path is not read here: on a busy machine a
free loop's answer crosses a stream's end by chance, and only a model route is known to end
streams.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence

from pytest_streamguard.verdict.findings.base import Finding, Observed
from pytest_streamguard.verdict.probe import Probed, model_route

#: The probe's answer may be stamped this much before the stream's last token and still count
#: as given after it: the server writes both at once, the client reads two sockets.
INTERRUPT_SLACK_S = 0.002
#: A probe held for a stream waited at least this long (a free loop answers a probe in about a
#: millisecond).
INTERRUPT_PROBE_MIN_S = 0.002


def _held(trace: Observed, sent: int, latency: int | None) -> bool:
    """Whether the sample (``sent``, ``latency``) waited like a probe the server held until
    ``trace`` ended (see the module docstring)."""
    stamps = [c.stamp_ns for c in trace.chunks]
    least = INTERRUPT_PROBE_MIN_S * 1e9
    if latency is None or latency < least or trace.end_ns is None:
        return False
    if sent >= trace.end_ns or sent + latency + INTERRUPT_SLACK_S * 1e9 < stamps[-1]:
        return False  # out after the stream's end, or answered before its last token
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    return not gaps or latency <= 2 * statistics.median(gaps) + least


def probe_interrupted(traces: Sequence[Observed], probe: Probed | None) -> Finding | None:
    """The completed streams whose end a probe of the app's own loop waited for."""
    if probe is None or not probe.sees_the_loop or not model_route(probe.target):
        return None
    marked: list[tuple[str, float]] = []
    for trace in traces:
        if not trace.completed or not trace.chunks or getattr(trace, "end_reason", None):
            continue
        held = [lat for sent, lat in probe.samples if lat and _held(trace, sent, lat)]
        if held:
            marked.append((trace.name, max(held) / 1e9))
    if not marked:
        return None
    longest = max(s for _, s in marked)
    return Finding(
        "probe_interrupted",
        f"{len(marked)} completed stream(s) ended while {probe.what} waited for their end (up "
        f"to {longest:.3f} s): a path that takes the model's lock can end a stream early "
        "(llama-cpp-python's interrupt_requests); probe a path that touches no model, or "
        "--streamguard-probe off",
        tuple(name for name, _ in marked),
        {"streams": len(marked), "probe_longest_s": longest, "probe": probe.target},
        cause=f"the probe ({probe.what}) may have ended the stream",
    )
