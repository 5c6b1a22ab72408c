"""Which hop of a stack a finding was seen at (``finding.hop``).

Under a stack (``--streamguard-service``) every stream's trace names the entry service it was
read from (``trace.stack.entry``) and, when it was the only stream open, each inner hop's reads
of the answers (``trace.stack.inner``, :mod:`pytest_streamguard.services.tap`). A finding is
seen at the entry unless the stamps say where: a ``buffered`` stream whose answer reached the
entry spread over time was held by the entry itself; one that came to the entry in a burst too
was held further in. Each inner hop is looked at from the entry inwards, assuming a chain (each
service reaches the one started just before it): the first hop whose reads were spread over at
least :data:`SPREAD_S` names the service in front of it; when none was, the first service
started (the model) sent its answer at once. A finding of a stream that could not be paired
stays at the entry (its trace's ``stack.note`` says why).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from pytest_streamguard.verdict.findings import Finding
from pytest_streamguard.verdict.findings.buffered import BUFFERED_SENT_SPAN_S

__all__ = ["SPREAD_S", "at_hops", "buffered_at"]

#: An inner hop whose reads of one answer span at least this many seconds passed it on as it
#: came (the same bound as a server's send stamps spread over for ``buffered``).
SPREAD_S = BUFFERED_SENT_SPAN_S


class _Stamps(Protocol):
    """What this module reads of a trace's ``stack``."""

    entry: str
    inner: dict[str, list[tuple[int, int]]]


@runtime_checkable
class _Hopped(Protocol):
    """What this module reads of a trace."""

    name: str

    @property
    def stack(self) -> _Stamps | None:
        """The stream's place in a stack; None without one."""


def buffered_at(stamps: _Stamps) -> str:
    """The service that held a stream's answer back, from its ``stack`` stamps (see the
    module docstring)."""
    inner = list(stamps.inner)
    if not inner:
        return stamps.entry
    fronts = [*inner[1:], stamps.entry]
    for name, front in reversed(list(zip(inner, fronts, strict=True))):
        reads = stamps.inner[name]
        if len(reads) >= 2 and (reads[-1][0] - reads[0][0]) / 1e9 >= SPREAD_S:
            return front
    return inner[0] if all(stamps.inner[name] for name in inner) else stamps.entry


def at_hops(found: list[Finding], traces: Sequence[object]) -> list[Finding]:
    """``found`` with each finding's ``hop`` set from the streams it was seen on (a stream
    without a stack, or without the stack's field, such as a load's shard's, is at no hop); a
    finding that names its hop itself (``server_error``) keeps it."""
    by_name = {
        trace.name: trace.stack
        for trace in traces
        if isinstance(trace, _Hopped) and trace.stack is not None
    }
    placed = []
    for finding in found:
        stacks = [by_name[name] for name in finding.streams if name in by_name]
        if not stacks or finding.hop is not None:
            placed.append(finding)  # at no hop, or at the hop its own evidence names
            continue
        hop = stacks[0].entry
        if finding.name == "buffered" and len(stacks) == 1:
            hop = buffered_at(stacks[0])
        placed.append(dataclasses.replace(finding, hop=hop))
    return placed
