"""Gates that could not be checked: a finding a test's ``fail_on`` names that this test, on
this target, could not have shown whatever happened (``unchecked``).

A gate that cannot fire passes green without a word, which reads as "checked, and fine". So
each name of ``fail_on`` is checked against what the rule needs (:func:`unchecked_gates`):

- ``not_cancelled``: the target's engine gauges, read only from a target the plugin started
  that exports them (:data:`~.server.ENGINE_GAUGE`, :data:`~.server.OPEN_GAUGE`);
- ``backpressure``: a ``bandwidth`` or ``slow_reader`` fault on a stream, and the server's
  send stamps (``sent_ns``) on its chunks;
- ``queued``: the probe's answers from the target's own loop (not ``off``, not ``tcp``);
- ``blocked_loop``, ``cold_start``, ``queued``: enough streams read together;
- ``server_error``: what the target writes (read in ``report/recording.py``: a target the
  plugin started, or one given by URL with ``streamguard_log_files``);
- every finding: at least one stream read.

Each one that cannot be checked is an :class:`Unchecked` on the test's record (JSON key
``unchecked``), a ``not checked: <finding> (<reason>)`` line in the summary, and, under
``--streamguard-unchecked fail``, the test's failure.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_streamguard.verdict.findings.backpressure import THROTTLES
from pytest_streamguard.verdict.findings.base import Observed, sent_stamp
from pytest_streamguard.verdict.findings.capacity import COLD_MIN_STREAMS
from pytest_streamguard.verdict.findings.loop import SHARED_MIN_STREAMS, STAIR_MIN_STREAMS
from pytest_streamguard.verdict.findings.server import ENGINE_GAUGE, OPEN_GAUGE
from pytest_streamguard.verdict.probe import Probed

#: The fewest streams read together each group finding needs.
_MIN_STREAMS = {
    "blocked_loop": SHARED_MIN_STREAMS,
    "cold_start": COLD_MIN_STREAMS,
    "queued": STAIR_MIN_STREAMS,
}


@dataclass(frozen=True)
class Unchecked:
    """A finding a test's ``fail_on`` names that could not be checked, and why."""

    finding: str
    reason: str

    def describe(self) -> str:
        """``not checked: <finding> (<reason>)``, as the summary shows it."""
        return f"not checked: {self.finding} ({self.reason})"

    def to_dict(self) -> dict[str, Any]:
        """Builtin-typed form."""
        return {"finding": self.finding, "reason": self.reason}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Unchecked:
        """Inverse of :meth:`to_dict`."""
        return cls(finding=str(raw["finding"]), reason=str(raw["reason"]))


def _backpressure(traces: Sequence[Observed]) -> str:
    throttled = [t for t in traces if any(f.kind in THROTTLES for f in getattr(t, "faults", ()))]
    if not throttled:
        return (
            "no bandwidth or slow_reader fault throttled a stream: it is read only under a "
            "throttle of the client's side"
        )
    if not any(sent_stamp(chunk) is not None for t in throttled for chunk in t.chunks):
        return "the target's events carry no send stamps (sent_ns): the server's side is unseen"
    return ""


def _not_cancelled(gauges: bool | None) -> str:
    if gauges is None:
        return (
            "the plugin did not start the target: it reads the engine's gauges only of a target "
            "no other client uses"
        )
    if not gauges:
        return f"the target exports no {ENGINE_GAUGE} and {OPEN_GAUGE} gauges at /metrics"
    return ""


def _why(name: str, traces: Sequence[Observed], probe: Probed | None, gauges: bool | None) -> str:
    if not traces:
        return "the test read no stream"
    least = _MIN_STREAMS.get(name, 0)
    if len(traces) < least:
        return f"it is read across at least {least} streams; the test read {len(traces)}"
    if name == "backpressure":
        return _backpressure(traces)
    if name == "not_cancelled":
        return _not_cancelled(gauges)
    if name == "queued" and (probe is None or not probe.sees_the_loop):
        kind = "off" if probe is None else "a TCP connect"
        return f"the probe was {kind}: it needs the answers of the target's own loop"
    return ""


def unchecked_gates(
    fail_on: Collection[str],
    traces: Sequence[Observed],
    probe: Probed | None,
    *,
    gauges: bool | None,
) -> list[Unchecked]:
    """The findings of ``fail_on`` that ``traces`` (with the ``probe``'s samples) could not
    have shown, each with its reason. ``gauges``: whether the target's engine gauges could be
    read (None: the plugin did not start the target)."""
    found = []
    for name in fail_on:
        reason = _why(name, traces, probe, gauges)
        if reason:
            found.append(Unchecked(name, reason))
    return found
