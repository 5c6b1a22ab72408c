"""Which hop of a stack a finding was seen at (``finding.hop``).

Under a stack (``--streamguard-service``) every stream's trace names the entry service it was
read from (``trace.stack.entry``) and, where it was paired (by the request id it sent, else by
time when it was the only stream open), each inner hop's reads of its answer's body and which
side ended that hop's connection first (``trace.stack.inner``, ``trace.stack.ended``,
:mod:`pytest_streamguard.services.tap`). A finding names a hop only where evidence puts it:

- its own words, records or probe placed it already (a ``server_error`` at the service that
  wrote it, ``not_cancelled`` at the service whose gauges said so, an ``own_fault`` at the hop
  of the plugin's fault, one of the entry's own faults at the entry; a ``blocked_loop`` at the
  service whose own probe, sent to it directly, waited, :mod:`~.findings.loop`);
- ``buffered``: the stamps, looked at from the entry inwards assuming a chain (each service
  reaches the one started just before it): the first hop whose answer's body came spread over
  at least :data:`SPREAD_S` (from half its bytes to 90 %: :data:`SPREAD_FROM`,
  :data:`SPREAD_TO`) names the service in front of it; when none was, the first service
  started (the model) sent its answer at once (:func:`buffered_at`);
- ``idle_cut``: from the entry inwards, the first hop whose connection was not ended by the
  service behind it names the service in front of it, which cut it (:func:`ended_at`);
- any finding of a stack of one service: that service.

Every other finding (a ``blocked_loop`` no probe confirmed too), one whose streams were not
paired, or whose streams place it at different hops, is at :data:`UNKNOWN` (shown ``at an
unknown hop``); the unpaired streams' ``stack.note`` says why.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from pytest_streamguard.verdict.findings import Finding
from pytest_streamguard.verdict.findings.base import UNKNOWN_HOP
from pytest_streamguard.verdict.findings.buffered import BUFFERED_SENT_SPAN_S

__all__ = ["SPREAD_FROM", "SPREAD_S", "SPREAD_TO", "UNKNOWN", "at_hops", "buffered_at", "ended_at"]

#: An inner hop whose body reads of one answer span at least this many seconds passed it on as
#: it came (the same bound as a server's send stamps spread over for ``buffered``) ...
SPREAD_S = BUFFERED_SENT_SPAN_S
#: ... counted from the read that brought the body past this share of its bytes to the one that
#: brought it past ``SPREAD_TO``: the part a buffered client got in its burst (docs/stacks.md).
SPREAD_FROM = 0.5
SPREAD_TO = 0.9
#: ``finding.hop`` where no evidence places the finding at a hop.
UNKNOWN = UNKNOWN_HOP


class _Stamps(Protocol):
    """What this module reads of a trace's ``stack``."""

    entry: str
    inner: dict[str, list[tuple[int, int]]]
    note: str | None
    ended: dict[str, str]


@runtime_checkable
class _Hopped(Protocol):
    """What this module reads of a trace."""

    name: str

    @property
    def stack(self) -> _Stamps | None:
        """The stream's place in a stack; None without one."""


def _chain(stamps: _Stamps) -> list[tuple[str, str]]:
    """Each inner hop and the service in front of it, from the entry inwards."""
    inner = list(stamps.inner)
    return list(reversed(list(zip(inner, [*inner[1:], stamps.entry], strict=True))))


def _spread_s(reads: list[tuple[int, int]]) -> float:
    """Seconds from the read that brought the answer's body past :data:`SPREAD_FROM` of its
    bytes to the one that brought it past :data:`SPREAD_TO`."""
    total = sum(n for _, n in reads)
    sums = itertools.accumulate(n for _, n in reads)
    arrived = list(zip((stamp for stamp, _ in reads), sums, strict=True))
    start = [stamp for stamp, upto in arrived if upto > SPREAD_FROM * total]
    end = [stamp for stamp, upto in arrived if upto > SPREAD_TO * total]
    return (end[0] - start[0]) / 1e9 if start and end else 0.0


def buffered_at(stamps: _Stamps) -> str:
    """The service that held a stream's answer back, from its ``stack`` stamps (see the
    module docstring)."""
    for name, front in _chain(stamps):
        if _spread_s(stamps.inner[name]) >= SPREAD_S:
            return front
    inner = list(stamps.inner)
    if not inner:
        return stamps.entry
    return inner[0] if all(stamps.inner[name] for name in inner) else UNKNOWN


def ended_at(stamps: _Stamps) -> str:
    """The service that ended a stream, from which side closed each hop's connection first
    (see the module docstring)."""
    for name, front in _chain(stamps):
        if stamps.ended.get(name) != "upstream":
            return front
    return next(iter(stamps.inner), stamps.entry)


_PLACED: dict[str, Callable[[_Stamps], str]] = {"buffered": buffered_at, "idle_cut": ended_at}


def _hop(finding: Finding, stacks: list[_Stamps]) -> str:
    if finding.name == "own_fault":
        return stacks[0].entry
    if any(stamps.note is not None for stamps in stacks):
        return UNKNOWN
    if all(not stamps.inner for stamps in stacks):
        return stacks[0].entry
    rule = _PLACED.get(finding.name)
    hops = {rule(stamps) for stamps in stacks} if rule is not None else {UNKNOWN}
    return hops.pop() if len(hops) == 1 else UNKNOWN


def at_hops(found: list[Finding], traces: Sequence[object]) -> list[Finding]:
    """``found`` with each finding's ``hop`` set from the streams it was seen on (a stream
    without a stack, or without the stack's field, such as a load's shard's, is at no hop; a
    finding whose own evidence placed it keeps its hop)."""
    by_name = {
        trace.name: trace.stack
        for trace in traces
        if isinstance(trace, _Hopped) and trace.stack is not None
    }
    placed = []
    for finding in found:
        stacks = [by_name[name] for name in finding.streams if name in by_name]
        if not stacks or finding.hop is not None:
            placed.append(finding)
            continue
        placed.append(dataclasses.replace(finding, hop=_hop(finding, stacks)))
    return placed
