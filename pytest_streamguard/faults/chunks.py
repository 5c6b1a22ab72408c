"""Faults that land right after chunk N: the embedded Toxiproxy server's chunk toxics.

This module owns ``stall`` and ``cut``/``reset`` with ``after_chunks=N``
(:class:`ChunkToxic`: ``chunk_stall``, ``chunk_cut``, ``chunk_reset``) and their aiming at some
of the test's streams (``streams=``: :func:`aimed_streams`, :func:`chosen`, :data:`AIM_HEADER`).
The embedded server counts each response's events itself and acts right after the Nth (see
:mod:`pytest_streamguard.toxiproxy_server.events`); a real Toxiproxy has no such toxic, so there
these faults are refused with :class:`~pytest_streamguard.errors.NeedsEmbeddedToxiproxy`, which
the plugin reports as the test's skip reason. The client only notes which streams reached
chunk N, to judge them.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Sequence
from typing import Any

from pytest_streamguard.common.display import counted
from pytest_streamguard.common.numbers import whole
from pytest_streamguard.errors import NeedsEmbeddedToxiproxy, ToxiproxyError
from pytest_streamguard.faults.fired import judge
from pytest_streamguard.faults.mechanism import Mechanism, active_on, checked_number
from pytest_streamguard.faults.toxics import ProxyControl
from pytest_streamguard.stream.trace import FaultRecord, StreamTrace

#: The request header that aims a chunk toxic of the embedded server at a stream: it names
#: the toxics aimed at that stream (``aimed`` toxics act on no other request; see
#: :mod:`pytest_streamguard.toxiproxy_server.events`).
AIM_HEADER = "x-streamguard-aim"

_STREAMS_ACCEPTED = (
    "expected a list of the test's stream indexes (0 is its first stream, in request order "
    "across stream(), astream(), load() and aload()), such as [2, 7], or a fraction of its "
    "streams above 0 and at most 1, such as 0.3"
)

#: What ``streams=`` holds once checked: indexes, a fraction, or None for every stream.
Aim = tuple[int, ...] | float | None


def aimed_streams(call: str, streams: Any) -> Aim:
    """Check a chunk fault's ``streams=`` (``call`` names the fault for the error)."""
    where = f"faults.{call}(streams={streams!r})"
    if streams is None:
        return None
    if isinstance(streams, bool):
        raise ValueError(f"{where}: {_STREAMS_ACCEPTED}")
    if isinstance(streams, int):
        raise ValueError(
            f"{where}: {_STREAMS_ACCEPTED}; for the stream at index {streams} alone write "
            f"streams=[{streams}]"
        )
    if isinstance(streams, float):
        if not math.isfinite(streams) or not 0 < streams <= 1:
            raise ValueError(
                f"{where}: a fraction must be above 0 and at most 1; {_STREAMS_ACCEPTED}"
            )
        return streams
    if isinstance(streams, list | tuple | set | frozenset | range):
        indexes = list(streams)
        if not indexes:
            raise ValueError(f"{where}: an empty list aims at no stream; {_STREAMS_ACCEPTED}")
        for index in indexes:
            if not whole(index) or index < 0:
                raise ValueError(
                    f"{where}: {index!r} is not a stream index (an integer >= 0); "
                    f"{_STREAMS_ACCEPTED}"
                )
        return tuple(sorted(set(indexes)))
    raise ValueError(f"{where}: {_STREAMS_ACCEPTED}")


def chosen(seed: int, index: int, fraction: float) -> bool:
    """Whether ``streams=fraction`` aims at the stream at ``index``: a draw from the session's
    seed (``--streamguard-seed``) and the index alone, so a rerun with the same seed aims at
    the same streams, whatever else the test does."""
    digest = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < fraction * 2**64


class ChunkToxic(Mechanism):
    """A chunk toxic of the embedded server (``chunk_stall``, ``chunk_cut``, ``chunk_reset``;
    see the module docstring). The client only notes the streams that reached chunk N, for the
    judgement; ``on_ns`` is when the first of them received it."""

    def __init__(
        self,
        control: ProxyControl,
        seed: int,
        kind: str,
        params: dict[str, Any],
        type_: str,
        attributes: dict[str, int],
        streams: Aim = None,
    ) -> None:
        if streams is not None:
            params["streams"] = list(streams) if isinstance(streams, tuple) else streams
            attributes = {**attributes, "aimed": 1}
        super().__init__(FaultRecord(kind=kind, params=params, toxics=[]))
        if streams is not None:
            self.record.streams = []
        self.control = control
        self.seed = seed
        self.type = type_
        self.attributes = attributes
        self.after_chunks = int(attributes["after_chunks"])
        self.hits: dict[int, StreamTrace] = {}
        # streams=: which of the test's streams it is aimed at (None: all), and the traces
        # (by id) of those opened while it was on.
        self.streams = streams
        self.aimed: set[int] = set()

    def apply(self) -> None:
        """Add the toxic; refuse the fault where the server does not know the type (a real
        Toxiproxy), as nothing there lands at chunk N: :class:`NeedsEmbeddedToxiproxy`, which
        the plugin turns into the test's skip."""
        name = self.control.name(self.type)
        self.record.armed_ns = time.perf_counter_ns()
        try:
            self.control.api.add_toxic(
                self.control.proxy, name, self.type, "downstream", self.attributes
            )
        except ToxiproxyError as exc:
            if "invalid toxic type" not in str(exc).lower():
                raise
            call = ", ".join(f"{k}={v!r}" for k, v in self.record.params.items())
            raise NeedsEmbeddedToxiproxy(
                f"faults.{self.record.kind}({call}) needs the embedded Toxiproxy server (the "
                f"default, without --streamguard-toxiproxy URL): it acts right after chunk N "
                f"itself, and this Toxiproxy ({self.control.api.url}) has no such toxic (its "
                f"answer: {exc}); a toxic the client adds once it has seen chunk N lands chunks "
                "late on a fast stream, so it is refused rather than late"
            ) from None
        self.record.toxics.append(name)

    def aims(self, index: int) -> bool:
        """Whether this fault is aimed at the test's stream at ``index``."""
        if self.streams is None:
            return True
        if isinstance(self.streams, float):
            return chosen(self.seed, index, self.streams)
        return index in self.streams

    def covers(self, trace: StreamTrace) -> bool:
        """Whether the fault can act on ``trace`` (every stream, or one it was aimed at)."""
        return self.streams is None or id(trace) in self.aimed

    @property
    def triggered(self) -> list[StreamTrace]:
        """The streams that reached chunk N."""
        return list(self.hits.values())

    def on_chunk(self, trace: StreamTrace) -> None:
        """Note ``trace`` when this chunk is its Nth."""
        if len(trace.chunks) != self.after_chunks:
            return
        self.reached(trace)

    def reached(self, trace: StreamTrace) -> None:
        """Note ``trace`` if it reached chunk N (also for a stream read in a shard process)."""
        if len(trace.chunks) < self.after_chunks or id(trace) in self.hits:
            return
        if not self.covers(trace):
            return
        self.hits[id(trace)] = trace
        stamp = trace.chunks[self.after_chunks - 1].stamp_ns
        if self.record.on_ns is None or stamp < self.record.on_ns:
            self.record.on_ns = stamp

    def remove(self) -> list[str]:
        """Remove the toxic (the server acted on each response by itself)."""
        problems: list[str] = []
        if self.record.toxics:
            try:
                self.control.api.remove_toxic(self.control.proxy, self.record.toxics[0])
            except ToxiproxyError as exc:
                problems.append(f"{self.record.kind}: {exc}")
        if self.record.off_ns is None:
            self.record.off_ns = time.perf_counter_ns()
        return problems

    def judge(self, traces: Sequence[StreamTrace]) -> tuple[bool, str]:
        """Not fired when aimed at streams of which none was read while it was on; otherwise
        by the streams that reached chunk N."""
        active = active_on(self.record, traces)
        if self.record.streams is not None and not active:
            return False, (
                f"aimed at streams={self.record.params['streams']!r}, but no stream it aimed "
                f"at was read while it was on (the test read {counted(len(traces), 'stream')})"
            )
        return judge(self.record, active, triggered=self.triggered)


def stall_at_chunk(
    control: ProxyControl, seed: int, after_chunks: int, seconds: float, streams: Any
) -> ChunkToxic:
    """``stall``: a ``chunk_stall`` toxic holding each stream ``seconds`` after chunk N."""
    checked_number("stall", "after_chunks", after_chunks, minimum=1, integer=True)
    checked_number("stall", "seconds", seconds, minimum=0, unit="seconds")
    if seconds <= 0:
        raise ValueError(f"faults.stall(seconds={seconds!r}): expected a number > 0")
    return ChunkToxic(
        control,
        seed,
        "stall",
        {"after_chunks": after_chunks, "seconds": seconds},
        "chunk_stall",
        {"after_chunks": int(after_chunks), "duration": round(seconds * 1000)},
        aimed_streams("stall", streams),
    )


def end_at_chunk(
    control: ProxyControl, seed: int, kind: str, after_chunks: int, streams: Any
) -> ChunkToxic:
    """``cut``/``reset`` right after chunk ``after_chunks``: the embedded server's
    ``chunk_cut``/``chunk_reset`` toxic, aimed at ``streams`` when given."""
    checked_number(kind, "after_chunks", after_chunks, minimum=1, integer=True)
    return ChunkToxic(
        control,
        seed,
        kind,
        {"after_chunks": after_chunks},
        f"chunk_{kind}",
        {"after_chunks": int(after_chunks)},
        aimed_streams(kind, streams),
    )
