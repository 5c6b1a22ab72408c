"""The interface every fault mechanism implements, and the argument check they share.

A fault of a test is one :class:`Mechanism`: it owns the fault's
:class:`~pytest_streamguard.stream.trace.FaultRecord`, puts the fault on (:meth:`~Mechanism.apply`)
and takes it off (:meth:`~Mechanism.remove`), hears the test's streams (a chunk read, a stream
ended) when it waits for one of them to set it off, and says whether it took effect
(:meth:`~Mechanism.judge`, by the rules of :mod:`pytest_streamguard.faults.fired`).
:class:`~pytest_streamguard.faults.inject.Faults` keeps the test's mechanisms and calls them;
each kind lives beside this interface in a module of its own (:mod:`.toxics`, :mod:`.chunks`,
:mod:`.signals`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from pytest_streamguard.common.numbers import finite
from pytest_streamguard.faults.fired import judge
from pytest_streamguard.stream.trace import FaultRecord, StreamTrace


def checked_number(
    fault: str,
    name: str,
    value: Any,
    *,
    minimum: float,
    integer: bool = False,
    unit: str = "",
) -> float:
    """``value`` as a float, or a ValueError that names ``faults.<fault>(<name>=...)`` and what
    it accepts (a number, or an integer, of ``unit``, at least ``minimum``)."""
    kind = ("an integer" if integer else "a number") + (f" of {unit}" if unit else "")
    if not finite(value) or value < minimum or (integer and value != int(value)):
        raise ValueError(f"faults.{fault}({name}={value!r}): expected {kind} >= {minimum:g}")
    return float(value)


def active_on(record: FaultRecord, traces: Sequence[StreamTrace]) -> list[StreamTrace]:
    """The streams among ``traces`` that ``record`` was active on (it is among their faults)."""
    return [t for t in traces if any(f is record for f in t.faults)]


class Mechanism(ABC):
    """One fault of a test and how it is put on, set off, taken off and judged.

    :class:`~pytest_streamguard.faults.inject.Faults` calls :meth:`apply` and keeps the record
    among the test's faults (put there first, so a fault applied in part is undone too; a chunk
    toxic the proxy refuses is never one); while the fault is on, it passes on every chunk the
    test's client reads (:meth:`on_chunk`) and every stream that ends (:meth:`on_end`); when the
    test ends it calls :meth:`remove`, then :meth:`judge` with the test's streams."""

    def __init__(self, record: FaultRecord) -> None:
        #: What the test's report says of the fault: its stamps, toxics and verdict.
        self.record = record

    @abstractmethod
    def apply(self) -> None:
        """Put the fault on now, or arm it to act on a stream's chunk N (a ValueError says why
        it cannot be)."""

    @abstractmethod
    def remove(self) -> list[str]:
        """Take the fault off and stamp ``record.off_ns``; return what could not be undone (a
        sentence each; none when all was)."""

    # Hooks, not abstract: a fault on at once hears nothing.
    def on_chunk(self, trace: StreamTrace) -> None:  # noqa: B027
        """The client read a data event of ``trace`` (``trace.chunks`` holds it): a fault set
        off at chunk N acts here."""

    def on_end(self, trace: StreamTrace) -> None:  # noqa: B027
        """``trace`` has ended (none of the mechanisms holds anything per stream: by default
        nothing to do)."""

    @property
    def triggered(self) -> list[StreamTrace]:
        """The streams that set the fault off at their chunk N (none for a fault on at once)."""
        return []

    def judge(self, traces: Sequence[StreamTrace]) -> tuple[bool, str]:
        """``(fired, evidence)``: whether the fault acted on the streams of ``traces`` it was
        active on (:func:`~pytest_streamguard.faults.fired.judge`)."""
        return judge(self.record, active_on(self.record, traces), triggered=self.triggered)
