"""How a stream that failed ended, in words: the messages of its ``empty``, ``truncated`` and
``timeout`` outcomes, of a connection cut after the protocol's end, and of a read that a pytest
outcome stopped midway (pytest-timeout's ``signal`` method); and how the body ended after the
protocol's end (:class:`AfterEnd`: held open, still open at the read limit, or cut).

Each message says what arrived (how many tokens, when the last one came), what was missing, and
the limit or option involved, so a failed stream's trace explains itself without its bytes.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import time

from pytest_streamguard.common.display import counted
from pytest_streamguard.formats import StreamFormat
from pytest_streamguard.stream.recorded import Recorded
from pytest_streamguard.stream.request import ReadLimits, StreamRequest
from pytest_streamguard.stream.trace import StreamTrace

#: How long the body may stay open after the protocol's end before the trace says it was held
#: open (``held_open_s``, the real time it stayed open): a server ends the body right after its
#: last event (microseconds on loopback, a few ms busy). Not a wait: the reader reads on until
#: the body ends, or until its read limit runs out (see :meth:`AfterEnd.held_past_limit`).
HELD_OPEN_S = 1.0

_DONE = "[DONE]"
# The failure pytest-timeout's signal method raises (its PYTEST_FAILURE_MESSAGE), from its
# SIGALRM handler, wherever the test is: often in the middle of reading a stream.
_PYTEST_TIMEOUT = re.compile(r"Timeout \(>(?P<limit>[^s]+)s\) from pytest-timeout")
# The two usual causes of an empty answer: the test expects one, or the server dropped the
# request for a newer one (llama-cpp-python's server does so by default).
EMPTY_HINT = (
    "pass allow_empty=True if an empty answer is expected; a server that cancels a request when "
    "another arrives ends it empty too, as llama-cpp-python's server (python -m "
    "llama_cpp.server) does unless started with --interrupt_requests False"
)


def empty_message(format_name: str, arrived: list[str], more: bool, looks_note: str) -> str:
    """An ``empty`` stream's message: what ``arrived`` before the end instead of a token (the
    labels of its frames, ``more`` when there were more than those), ``looks_note`` after."""
    if arrived == [_DONE]:
        what = "a bare [DONE] and nothing else"
    elif arrived:
        runs = [(seen, len(list(same))) for seen, same in itertools.groupby(arrived)]
        shown = ", ".join(seen if n == 1 else f"{seen} (x{n})" for seen, n in runs)
        what = "only " + shown + (", ..." if more else "")
    else:
        what = "nothing"
    return (
        f"the {format_name} stream ended before any token: it sent {what}"
        f"{looks_note} ({EMPTY_HINT})"
    )


def truncated_message(
    trace: StreamTrace, fmt: StreamFormat | None, require_done: bool, now_ns: int, looks_note: str
) -> str:
    """A ``truncated`` stream's message: the connection closed cleanly at ``now_ns`` before the
    end of ``fmt`` (None: before a ``format="auto"`` stream's format was recognised)."""
    if fmt is None:
        seen = "an empty body" if trace.nbytes == 0 else "no data event"
        if trace.heartbeats:
            seen = f"only {counted(trace.heartbeats, 'heartbeat')}"
        return (
            f"the connection closed cleanly before any token, after {seen}: nothing to "
            'recognise the stream\'s format by (format="auto")'
        )
    if trace.chunks:
        last = trace.chunks[-1]
        where = f"after {counted(len(trace.chunks), 'token')}, "
        where += f"{(now_ns - last.stamp_ns) / 1e9:.3f} s "
        where += f"after chunk {last.index}"
    else:
        where = "before any token"
    end = f"end ({fmt.end_description})"
    if require_done:
        end = "terminal frame (require_done=True: a finish without it is not the end)"
    return (
        f"the connection closed cleanly {where}, without the {fmt.name} stream's {end}{looks_note}"
    )


def timeout_message(
    trace: StreamTrace, limits: ReadLimits, now_ns: int, slow_reader_bps: float | None
) -> str:
    """A ``timeout`` stream's message at ``now_ns``: which of ``limits`` ran out, after how
    long, and the reader's own rate when it read slowly."""
    elapsed = (now_ns - trace.request_ns) / 1e9
    if trace.chunks:
        token_left = limits.gap - (now_ns - trace.chunks[-1].stamp_ns) / 1e9
    else:
        token_left = limits.first - elapsed
    # The limit that ran out is the one with the least time left (a timer may fire a hair
    # before the clock the limits are computed on says it is due).
    if limits.total - elapsed <= token_left:
        what = f"stream still open {elapsed:.3f} s after the request"
        limit = f"{limits.total_reason} {limits.total:g} s"
    elif trace.chunks:
        last = trace.chunks[-1]
        waited = (now_ns - last.stamp_ns) / 1e9
        what = f"no token for {waited:.3f} s after chunk {last.index}"
        limit = f"client read limit {limits.gap:.3f} s"
    else:
        what = f"no token {elapsed:.3f} s after the request"
        limit = f"client read limit {limits.first:.3f} s"
    rate = slow_reader_bps
    if rate is not None:
        # The reader's own pace is the first suspect: a rate meant as KB/s reads a 1 KB event
        # in minutes.
        limit += f"; the client read at slow_reader({rate:g}), {rate:g} bytes/s"
    return f"{what} ({limit})"


def cut_after_end_message(format_name: str, message: str) -> str:
    """The message of a connection that broke (``message``) after the protocol's end but
    before the body's."""
    return (
        f"the connection was cut after the {format_name} stream's end but before its "
        f"body ended ({message}); an SDK client that reads to the body's end raises here"
    )


def held_open_message(format_name: str, seconds: float, limit: str) -> str:
    """The message of a body still open ``seconds`` after the protocol's end when the read
    ``limit`` (in words) ran out."""
    return (
        f"the body was still open {seconds:.3f} s after the {format_name} stream's end when "
        f"the read limit ran out ({limit}); an SDK client that reads to the body's end "
        "times out there"
    )


def pytest_timeout_limit(stopped_by: BaseException) -> str | None:
    """pytest-timeout's limit (seconds, as it wrote them) where ``stopped_by`` is the failure its
    signal method raised, else None."""
    match = _PYTEST_TIMEOUT.search(str(stopped_by))
    return None if match is None else match["limit"]


def stopped_mid_stream(stopped_by: BaseException, trace: StreamTrace) -> tuple[str, str] | None:
    """How a stream ended whose read ``stopped_by`` (a pytest outcome) broke off: ``timeout``
    when it is pytest-timeout's (its signal method fails the test from inside the read, so its
    limit is what ran out), ``interrupted`` naming any other; None for Ctrl-C or a cancelled
    task, which the recorder's ``finish()`` records as interrupted in its own words."""
    if isinstance(stopped_by, KeyboardInterrupt | asyncio.CancelledError):
        return None
    end = trace.end_ns if trace.end_ns is not None else time.perf_counter_ns()
    elapsed = (end - trace.request_ns) / 1e9
    read = f"{counted(len(trace.chunks), 'chunk')} read in {elapsed:.3f} s"
    limit = pytest_timeout_limit(stopped_by)
    if limit is not None:
        return "timeout", (
            f"pytest-timeout's limit of {limit} s for the whole test ran out while "
            f"this stream was read ({read}); it stopped the test mid-stream"
        )
    return "interrupted", (
        f"the test was stopped while this stream was read ({read}): "
        f"{type(stopped_by).__name__}: {stopped_by}"
    )


class AfterEnd:
    """What the recorder (:class:`~pytest_streamguard.stream.client.StreamRecorder`) records
    of the body after the protocol's end: held open (the real time it stayed open), still open
    when the read limit ran out, or cut before it ended."""

    trace: StreamTrace
    recorded: Recorded
    request: StreamRequest
    stopped: bool

    def held_open(self, seconds: float) -> None:
        """The body ended ``seconds`` after the protocol's end: ``held_open_s`` when that is
        ``HELD_OPEN_S`` or more (a body that ends at once is not held open)."""
        if seconds >= HELD_OPEN_S:
            self.trace.held_open_s = seconds

    def held_past_limit(self, now_ns: int, end_ns: int) -> None:
        """The body was still open at ``now_ns``, when the read limit ran out, after the
        protocol's end at ``end_ns``: an SDK client that reads to the body's end times out
        there (its read timeout), so the stream is a ``timeout``, and a replay of it ends in
        the client's read timeout too. ``held_open_s`` is the real time the body stayed open."""
        seconds = (now_ns - end_ns) / 1e9
        self.trace.held_open_s = seconds
        message = held_open_message(self.trace.format, seconds, self._limit_left(now_ns))
        self.recorded.broke("timeout", message)
        self.trace.completed = False
        self.trace.error_kind = "timeout"
        self.trace.error = message
        self.stopped = True

    def _limit_left(self, now_ns: int) -> str:
        """The read limit that runs out first at ``now_ns``, in words."""
        limits = self.request.limits
        total_left = limits.total - (now_ns - self.trace.request_ns) / 1e9
        if self.trace.chunks:
            gap_left = limits.gap - (now_ns - self.trace.chunks[-1].stamp_ns) / 1e9
        else:
            gap_left = limits.first - (now_ns - self.trace.request_ns) / 1e9
        if total_left <= gap_left:
            return f"{limits.total_reason} {limits.total:g} s"
        return f"client read limit {max(limits.gap, limits.first):.3f} s"

    def cut_after_end(self, kind: str, message: str) -> None:
        """The connection broke after the protocol's end but before the body's: the official
        SDK clients, which read on to the body's end, raise there, so the stream is not
        completed."""
        self.recorded.broke(kind, message)
        self.trace.completed = False
        self.trace.error_kind = kind
        self.trace.error = cut_after_end_message(self.trace.format, message)
