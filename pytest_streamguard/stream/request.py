"""What a stream sends and how long its reader waits (:class:`StreamRequest`, :class:`ReadLimits`).

A test's stream gets its limits from the test's ``token_deadline`` (or ``read_timeout``, or
``--streamguard-max-stream-seconds``) through :func:`read_limits`; the request checks its own
arguments, so a bad one is a ValueError before anything is sent.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_streamguard.common.defaults import DEFAULT_MAX_STREAM_SECONDS
from pytest_streamguard.common.numbers import number
from pytest_streamguard.formats import AUTO, StreamFormat, resolve_format
from pytest_streamguard.verdict.deadlines import Deadline

# Limits when no deadline says otherwise: long enough for a cold model, short enough that a
# blackholed stream ends the test instead of hanging CI.
DEFAULT_READ_LIMIT = 30.0
CONNECT_TIMEOUT = 10.0
# A slow reader's receive buffer holds this many seconds of its rate (at least
# SLOW_READER_MIN_RCVBUF bytes), so backpressure reaches the server within about that time.
# A fixed small buffer caps the rate instead: on loopback (MSS about 64 KB) a window smaller
# than two segments is never reopened by a window update, only by the sender's zero-window
# probe every 200 ms, so 4 KB (8 KB once the kernel doubles it) capped any rate at ~45 KB/s.
SLOW_READER_RCVBUF_SECONDS = 0.5
SLOW_READER_MIN_RCVBUF = 4096
#: What ``expect=`` accepts: None (the stream completes) or ``"cut"``.
EXPECTED_OUTCOMES = (None, "cut")
# format="auto": the Accept header sent.
_AUTO_ACCEPT = "text/event-stream, application/x-ndjson;q=0.9, */*;q=0.8"


def read_limit(bound: float | None) -> float:
    """How long the client waits for something bounded by ``bound`` before giving up.

    Longer than the bound itself, so that a violated deadline is measured (how late the chunk
    was) rather than only detected."""
    if bound is None:
        return DEFAULT_READ_LIMIT
    return max(2 * bound, bound + 1.0)


@dataclass(frozen=True)
class ReadLimits:
    """Seconds the client waits for the first token, between tokens, and for the whole stream.

    ``total_reason`` names where the total limit comes from, for the timeout message."""

    first: float = DEFAULT_READ_LIMIT
    gap: float = DEFAULT_READ_LIMIT
    total: float = DEFAULT_MAX_STREAM_SECONDS
    total_reason: str = "--streamguard-max-stream-seconds"

    @classmethod
    def for_deadline(
        cls, deadline: Deadline | None, max_stream: float = DEFAULT_MAX_STREAM_SECONDS
    ) -> ReadLimits:
        """Limits that let ``deadline`` be measured without waiting forever; a stream without
        a ``total`` deadline is bounded by ``max_stream`` seconds."""
        if deadline is None:
            return cls(total=max_stream)
        gap = read_limit(deadline.chunk)
        if deadline.percentile is not None:
            # Single gaps may exceed a percentile bound legitimately; keep reading longer.
            gap = max(gap, 10.0)
        if deadline.total is None:
            return cls(first=read_limit(deadline.ttft), gap=gap, total=max_stream)
        return cls(
            first=read_limit(deadline.ttft),
            gap=gap,
            total=read_limit(deadline.total),
            total_reason="client read limit",
        )


@dataclass
class StreamRequest:
    """What to send and how to read the answer (``format``: ``"auto"``, a built-in name or a
    :class:`~pytest_streamguard.formats.StreamFormat`; ``allow_empty``: an answer without any
    token is expected, so its end completes it instead of making it ``empty``;
    ``require_done``: only the protocol's terminal frame, such as openai's ``data: [DONE]``,
    ends the stream, so a ``finish_reason`` followed by a close without it is ``truncated``;
    ``expect="cut"``: the test expects the connection to end before the protocol's end, so a
    cut is its verdict's pass and a completed stream its failure)."""

    method: str
    url: str
    json_body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    format: str | StreamFormat = AUTO
    limits: ReadLimits = field(default_factory=ReadLimits)
    slow_reader_bps: float | None = None
    allow_empty: bool = False
    require_done: bool = False
    expect: str | None = None
    # Told each time a slow reader waits to keep to its rate (seconds), so the fault can say
    # whether it acted.
    on_pace: Callable[[float], None] | None = None
    # The embedded Toxiproxy's pid, on this machine (None for a server by URL): its waits for a
    # CPU over the stream's silences are kept on the trace (``proxy_waits``).
    proxy_pid: int | None = None

    def __post_init__(self) -> None:
        self.stream_format = resolve_format(self.format)
        if not isinstance(self.allow_empty, bool):
            raise ValueError(f"allow_empty={self.allow_empty!r}: expected True or False")
        if not isinstance(self.require_done, bool):
            raise ValueError(f"require_done={self.require_done!r}: expected True or False")
        if self.expect not in EXPECTED_OUTCOMES:
            raise ValueError(
                f"expect={self.expect!r}: expected None (the stream completes) or 'cut' (the "
                "connection ends before the protocol's end: closed, reset or cut)"
            )
        if self.require_done and self.stream_format is not None and self.stream_format.end_on_eof:
            raise ValueError(
                f"require_done=True: the {self.stream_format.name} format has no terminal frame "
                "(a clean close is its end); require_done applies to protocols that end with "
                "one, such as openai's data: [DONE]"
            )

    def request_headers(self) -> dict[str, str]:
        """Headers to send: the caller's, plus an Accept that fits the format."""
        accept = _AUTO_ACCEPT if self.stream_format is None else self.stream_format.accept
        headers = {"user-agent": "pytest-streamguard", "accept": accept}
        headers.update({k.lower(): v for k, v in self.headers.items()})
        return headers

    def socket_options(self) -> list[tuple[int, int, int]]:
        """A small receive buffer for a slow reader (see :func:`slow_reader_rcvbuf`)."""
        if self.slow_reader_bps is None:
            return []
        return [(socket.SOL_SOCKET, socket.SO_RCVBUF, slow_reader_rcvbuf(self.slow_reader_bps))]


def slow_reader_rcvbuf(bytes_per_second: float) -> int:
    """The receive buffer a slow reader asks for: about half a second of its rate, at least
    4 KB (the kernel doubles it, and caps it at ``net.core.rmem_max``)."""
    return max(SLOW_READER_MIN_RCVBUF, int(bytes_per_second * SLOW_READER_RCVBUF_SECONDS))


def read_limits(
    read_timeout: float | None, deadline: Deadline | None, max_stream: float
) -> ReadLimits:
    """The limits of one stream of a test: ``read_timeout`` seconds for the first token and for
    each next one when given (a number > 0, else a ValueError), else those that let the test's
    ``deadline`` be measured; the whole stream within ``max_stream`` seconds unless a
    ``total`` deadline says otherwise."""
    if read_timeout is None:
        return ReadLimits.for_deadline(deadline, max_stream)
    if not number(read_timeout) or read_timeout <= 0:
        raise ValueError(f"read_timeout={read_timeout!r}: expected a number of seconds > 0")
    return ReadLimits(first=float(read_timeout), gap=float(read_timeout), total=max_stream)


def stream_url(base: str, path: str) -> str:
    """The URL of ``path`` under ``base``, or a ValueError for a path that is not absolute."""
    if not path.startswith("/"):
        raise ValueError(f"stream path {path!r} must start with '/', such as /generate")
    return base + path
