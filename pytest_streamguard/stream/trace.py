"""What one stream looked like on the wire: chunks with their arrival stamps, and the outcome.

All stamps are ``time.perf_counter_ns()`` values (monotonic, comparable across processes on one
Linux machine); durations are reported in seconds. A trace is plain data: it converts to and
from builtin-typed dicts for the JSON report and for pytest-xdist's ``workeroutput``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, fields
from typing import Any

from pytest_streamguard.stream.recorded import Recorded
from pytest_streamguard.verdict.deadlines import Deadline, assert_traces, check_units
from pytest_streamguard.verdict.findings import Finding, Said, trace_findings
from pytest_streamguard.verdict.hops import at_hops
from pytest_streamguard.verdict.stats import ns_to_s, percentile

# Chunks shown at each end of the timeline and around each offending chunk.
_TIMELINE_EDGE = 3
_TIMELINE_CONTEXT = 1


@dataclass
class Chunk:
    """One token: a frame of the stream that carried generated output (an SSE event, a JSON
    line, or one raw read, for the ``raw`` format).

    ``stamp_ns`` is when the byte that completed the event arrived; ``first_byte_ns`` when its
    first byte arrived (they differ when the network splits an event across reads). ``text`` is
    all the output it carried; ``parts`` splits it by kind (``reasoning``, ``tool``,
    ``refusal``, ``text``) when it is not plain answer text (None then). ``data`` is the
    frame's parsed payload."""

    index: int
    stamp_ns: int
    first_byte_ns: int
    nbytes: int
    text: str
    data: Any = None
    parts: dict[str, str] | None = None

    @property
    def kind(self) -> str:
        """``text``, ``reasoning``, ``tool`` or ``refusal``; kinds joined by ``+`` when the
        frame carried several."""
        return "+".join(self.parts) if self.parts else "text"

    def text_of(self, kind: str) -> str:
        """The part of this chunk's output of ``kind``."""
        if self.parts is None:
            return self.text if kind == "text" else ""
        return self.parts.get(kind, "")

    def to_dict(self) -> dict[str, Any]:
        """Builtin-typed form."""
        return {
            "index": self.index,
            "stamp_ns": self.stamp_ns,
            "first_byte_ns": self.first_byte_ns,
            "nbytes": self.nbytes,
            "text": self.text,
            "data": self.data,
            "parts": dict(self.parts) if self.parts is not None else None,
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Chunk:
        """Inverse of :meth:`to_dict`."""
        return cls(
            index=int(raw["index"]),
            stamp_ns=int(raw["stamp_ns"]),
            first_byte_ns=int(raw.get("first_byte_ns", raw["stamp_ns"])),
            nbytes=int(raw["nbytes"]),
            text=str(raw["text"]),
            data=raw.get("data"),
            parts=dict(raw["parts"]) if raw.get("parts") is not None else None,
        )


@dataclass
class FaultRecord:
    """A fault as applied: its vocabulary word, arguments, toxics and on/off stamps.

    ``on_ns`` is taken just before the fault's first API call (it may act from then on) and
    ``off_ns`` once it is undone. A fault that acts after N chunks (``stall``, ``cut``,
    ``freeze``) is ``armed_ns`` from the call that set it up, and ``on_ns`` once it first acts
    (for a chunk toxic: when the first stream received its chunk N).
    ``fired`` says whether it took effect on a stream it was active on, and ``evidence`` what
    the streams showed either way (judged when the test's body ends; None before that, and in
    reports written before faults were judged). ``applied_by`` says who made it act:
    ``"proxy"`` (a toxic; on the embedded server a chunk toxic acts at the Nth chunk itself) or
    ``"client"`` (the plugin's side does it: a slow reader's pacing, a freeze's signals).
    ``streams``: for a chunk fault aimed with ``streams=``, the indexes of the test's streams
    (0 first, in request order) it was aimed at; None for a fault on every stream."""

    kind: str
    params: dict[str, Any]
    toxics: list[str]
    on_ns: int | None = None
    off_ns: int | None = None
    armed_ns: int | None = None
    fired: bool | None = None
    evidence: str = ""
    applied_by: str = "proxy"
    streams: list[int] | None = None
    #: The inner hop of a stack it was put on (``streamguard.hop(NAME).faults``); None for the
    #: session's own proxy, in front of the target or a stack's entry.
    hop: str | None = None
    #: When the call that undoes it began (a toxic's removal): what arrived before this was
    #: surely under the fault, what arrived after ``off_ns`` surely not. None where not taken.
    lifting_ns: int | None = None

    def describe(self) -> str:
        """``kind(arg=value, ...)`` as a test would have written it (``... at NAME`` for a
        fault on a stack's inner hop)."""
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{self.kind}({args})" + ("" if self.hop is None else f" at {self.hop}")

    def active_during(self, start_ns: int, end_ns: int) -> bool:
        """Whether this fault was on (or armed) at any time in ``[start_ns, end_ns]``."""
        since = self.armed_ns if self.armed_ns is not None else self.on_ns
        if since is None or since > end_ns:
            return False
        return self.off_ns is None or self.off_ns >= start_ns

    def to_dict(self) -> dict[str, Any]:
        """Builtin-typed form."""
        return {
            "kind": self.kind,
            "params": dict(self.params),
            "toxics": list(self.toxics),
            "on_ns": self.on_ns,
            "off_ns": self.off_ns,
            "armed_ns": self.armed_ns,
            "fired": self.fired,
            "evidence": self.evidence,
            "applied_by": self.applied_by,
            "streams": None if self.streams is None else list(self.streams),
            **({} if self.hop is None else {"hop": self.hop}),
            **({} if self.lifting_ns is None else {"lifting_ns": self.lifting_ns}),
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> FaultRecord:
        """Inverse of :meth:`to_dict`."""
        fired = raw.get("fired")
        return cls(
            kind=str(raw["kind"]),
            params=dict(raw.get("params", {})),
            toxics=list(raw.get("toxics", [])),
            on_ns=raw.get("on_ns"),
            off_ns=raw.get("off_ns"),
            armed_ns=raw.get("armed_ns"),
            fired=bool(fired) if fired is not None else None,
            evidence=str(raw.get("evidence", "")),
            applied_by=str(raw.get("applied_by", "proxy")),
            streams=None if raw.get("streams") is None else [int(i) for i in raw["streams"]],
            hop=None if raw.get("hop") is None else str(raw["hop"]),
            lifting_ns=raw.get("lifting_ns"),
        )


def _client_delay(
    request_ns: int, queued_ns: int | None, read_delay_ns: list[int]
) -> dict[str, float | None]:
    write = None if queued_ns is None else ns_to_s(request_ns - queued_ns)
    reads = [ns_to_s(d) for d in read_delay_ns]
    return {
        "write": write,
        "read_p99": percentile(reads, 99),
        "read_max": max(reads) if reads else None,
    }


@dataclass
class StackStamps:
    """A stream's place in a stack (``--streamguard-service``): ``entry``, the service the
    client read from; ``inner``, each inner hop's reads of the answer's body as
    ``(stamp_ns, bytes)`` as the service in front received them, by the name of the service
    the hop reaches, in start order (empty when not paired); ``ended``, by the same names, which
    side closed that hop's connection first (``upstream``: the service behind, ``front``: the
    one in front; absent: neither); ``note``, why it could not be paired (None: paired);
    ``request_id``, the id the client sent (``x-request-id``, and in a ``traceparent``)."""

    entry: str
    inner: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    note: str | None = None
    request_id: str | None = None
    ended: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Builtin-typed form."""
        return {
            "entry": self.entry,
            "inner": {
                name: [[stamp, n] for stamp, n in reads] for name, reads in self.inner.items()
            },
            "note": self.note,
            "request_id": self.request_id,
            "ended": dict(self.ended),
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> StackStamps:
        """Inverse of :meth:`to_dict`."""
        return cls(
            entry=str(raw["entry"]),
            inner={
                str(name): [(int(stamp), int(n)) for stamp, n in reads]
                for name, reads in (raw.get("inner") or {}).items()
            },
            note=raw.get("note"),
            request_id=raw.get("request_id"),
            ended={str(k): str(v) for k, v in (raw.get("ended") or {}).items()},
        )


#: The fields :meth:`StreamTrace.to_dict` writes last, where set (``recorded``: never).
_LAST = ("stack", "said", "recorded")
#: The fields :meth:`StreamTrace.from_dict` converts; it reads the others as they are.
_SET = (
    *("name", "method", "url", "format", "format_auto", "request_ns", "chunks", "reads"),
    *("heartbeats", "heartbeat_ns", "completed", "faults", "caught", "read_delay_ns", "judged"),
    *("proxy_waits", "reader_held", *_LAST),
)


@dataclass
class StreamTrace:
    """The record of one stream read through the plugin.

    ``ttft``, ``gaps``, ``max_gap`` and ``total`` follow the metric definitions: TTFT is
    request sent to the first token (of any kind: text, reasoning, tool-call arguments); a gap
    is the time between two consecutive tokens. Every stream ends in one outcome: ``completed``
    (the format's end arrived; ``error_kind`` is None), or ``completed`` false with
    ``error_kind`` one of ``empty`` (the end arrived before any token), ``truncated``,
    ``protocol``, ``server``, ``http``, ``cut``, ``reset``, ``timeout``, ``connect``,
    ``network``, ``interrupted``, ``client`` (the judging client raised: see
    :mod:`pytest_streamguard.judge`) and ``error`` saying what happened. A failed stream is kept,
    never dropped from the statistics.

    ``format`` is the name of the format the stream was read as: the one recognised when
    ``format_auto`` is true (``format="auto"``, the default; it stays ``auto`` when nothing
    arrived to recognise it by), else the one the test passed."""

    name: str
    method: str
    url: str
    format: str
    request_ns: int
    status_code: int | None = None
    response_ns: int | None = None
    end_ns: int | None = None
    chunks: list[Chunk] = field(default_factory=list)
    reads: list[tuple[int, int]] = field(default_factory=list)
    """Every network read of the body as ``(perf_counter_ns, nbytes)``: when it returned and
    how many bytes it returned (the bytes themselves are in :attr:`chunks`)."""
    heartbeats: int = 0
    heartbeat_ns: list[int] = field(default_factory=list)
    """Arrival stamp of each SSE comment (``: ping``), one per counted heartbeat."""
    completed: bool = False
    error: str | None = None
    error_kind: str | None = None
    faults: list[FaultRecord] = field(default_factory=list)
    format_auto: bool = False
    caught: list[str] = field(default_factory=list)
    """Headlines of violations an explicit :meth:`assert_deadline` raised on this stream, kept
    even when the test expects and catches them, so reports can say the plugin caught them."""
    held_open_s: float | None = None
    """Seconds the body really stayed open after the protocol's end (to its end, or to the read
    limit: a ``timeout``), when not within ``HELD_OPEN_S`` (1 s) of it (an SDK client that
    reads to the body's end waits there); None when the body ended promptly or had no end."""
    end_reason: str | None = None
    """Why generation ended, as the stream's protocol said it: OpenAI's ``finish_reason``
    (``stop``, ``length``, ``tool_calls``), Anthropic's ``stop_reason`` (``end_turn``,
    ``max_tokens``), Ollama's ``done_reason``, Gemini's ``finishReason`` (``STOP``), TGI's
    ``details.finish_reason``, the Responses API's status (``completed``, or an incomplete
    response's reason such as ``max_output_tokens``), the bundled target's ``finish_reason``;
    the last one the stream sent, read from whichever frame carried it (often one with no token).
    None when the stream sent none. A stream cut short for length is ``completed`` all the same:
    test ``end_reason`` to tell a whole answer from a stopped one."""
    expect: str | None = None
    """``"cut"`` when the test said the stream is meant to be cut (``stream(..., expect="cut")``):
    a cut is then no violation, and a stream that completes is one."""
    node: str | None = None
    """Where the stream was read: the Ray node id for a load sharded over a Ray cluster, None
    for a read on this machine (its stamps are on that node's clock)."""
    queued_ns: int | None = None
    """When the request was handed to the client (the stream's coroutine started), where the
    client stamps ``request_ns`` once the request's last byte is written (plain ``http``,
    single streams and loads); None where ``request_ns`` is that start itself (``https``)."""
    local: str | None = None
    """The connection's client side, ``address:port``: the key to match a packet capture, a
    server log or a proxy's log to this stream. None where the client did not say."""
    stamps: str | None = None
    """Where arrival stamps came from: ``kernel`` (the socket's receive stamp, Linux), ``loop``
    (when the event loop read the bytes: no kernel stamp on this platform) or ``client`` (when
    the client took the bytes: ``https``, read by httpx's own transport); None for a trace made
    elsewhere (a shared client of the caller's)."""
    read_delay_ns: list[int] = field(default_factory=list)
    """The client's own delay on each socket read: the kernel's receive stamp to the read."""
    proxy_waits: list[tuple[int, int]] = field(default_factory=list)
    """``(stamp, ns)`` of each read after a silence of 50 ms or more: how long the embedded
    Toxiproxy's loop waited for a CPU over that silence (bytes it held meanwhile, the machine's)."""
    reader_held: list[tuple[int, int]] = field(default_factory=list)
    """``(from, until)`` of each span this client's own loop was held while the stream waited (its
    timer, due at ``from``, ran only after the read at ``until``): bytes that came meanwhile
    waited in the socket, and that read carries its last segment's stamp."""
    client: str | None = None
    """The client library that judged this stream (:mod:`pytest_streamguard.judge`), or None."""
    reader_agrees: bool | None = None
    """Whether the plugin's reader concluded what the client did; None where none judged."""
    judged: dict[str, str | None] | None = None
    """Where reader and client differ: what each concluded (``reader``, ``client``) and the
    stricter ``rule`` keeping the reader's failure (None: a plugin bug), the fields that
    ``differs`` name; ``defect``: what the judge's own code raised (the reader's verdict stands)."""
    stack: StackStamps | None = None
    """Under a stack (``--streamguard-service``): its entry and inner hops' stamps."""
    said: list[Said] = field(default_factory=list)
    """What each hop wrote while it was open (failed tests only): ``verdict/findings/said``."""
    recorded: Recorded | None = field(default=None, repr=False, compare=False)
    """The response as it arrived, for a client judge; None once read back from a report."""

    @property
    def client_delay(self) -> dict[str, float | None]:
        """The client's own delays in seconds: ``write`` (request queued to request written,
        connect included) and ``read_p99``/``read_max`` (bytes arrived to bytes read)."""
        return _client_delay(self.request_ns, self.queued_ns, self.read_delay_ns)

    @property
    def ttft(self) -> float | None:
        """Seconds from the request being sent to the first data event; None if none came."""
        return ns_to_s(self.chunks[0].stamp_ns - self.request_ns) if self.chunks else None

    @property
    def gaps(self) -> list[float]:
        """Seconds between each pair of consecutive data events."""
        stamps = [c.stamp_ns for c in self.chunks]
        return [ns_to_s(b - a) for a, b in itertools.pairwise(stamps)]

    @property
    def max_gap(self) -> float | None:
        """The largest gap; None with fewer than two data events."""
        return max(self.gaps, default=None)

    @property
    def total(self) -> float | None:
        """Seconds from the request being sent to the end of the stream (clean or not)."""
        return None if self.end_ns is None else ns_to_s(self.end_ns - self.request_ns)

    @property
    def text(self) -> str:
        """The answer's text: every token's ``text`` part, in order (reasoning, tool-call
        arguments and refusals are in :meth:`text_of`)."""
        return self.text_of("text")

    def text_of(self, kind: str) -> str:
        """The concatenated output of ``kind`` (``text``, ``reasoning``, ``tool``, ``refusal``)."""
        return "".join(c.text_of(kind) for c in self.chunks)

    @property
    def nbytes(self) -> int:
        """Bytes of response body received."""
        return sum(n for _, n in self.reads)

    def percentile(self, q: float) -> float | None:
        """The nearest-rank ``q``-th percentile of the gaps (see :mod:`.stats`)."""
        return percentile(self.gaps, q)

    def assert_deadline(
        self,
        ttft: float | None = None,
        chunk: float | None = None,
        total: float | None = None,
        percentile: float | None = None,
        *,
        long: bool = False,
    ) -> None:
        """Raise :class:`~pytest_streamguard.verdict.deadlines.DeadlineViolation` on a broken bound.

        A stream that did not complete always violates. Bounds are seconds: one above 60 s is
        a ValueError unless ``long=True`` says it is meant."""
        deadline = Deadline(ttft=ttft, chunk=chunk, total=total, percentile=percentile)
        check_units(deadline, long=long, call="assert_deadline")
        assert_traces([self], deadline)

    def active_faults(self) -> tuple[str, ...]:
        """The faults that were on at any time while this stream was read, as written."""
        end = self.end_ns if self.end_ns is not None else self.request_ns
        return tuple(f.describe() for f in self.faults if f.active_during(self.request_ns, end))

    def timeline(self, marks: dict[int, str] | None = None) -> str:
        """A compact, time-ordered view of the stream (see :func:`timeline_of`)."""
        return timeline_of(self, marks or {})

    @property
    def findings(self) -> list[Finding]:
        """The named incidents this stream shows by itself (``buffered``, ``idle_cut``,
        ``held_open``), with their evidence and, under a stack, the hop each was seen at; see
        :mod:`.findings` and docs/findings.md."""
        return at_hops(trace_findings(self), [self])

    def summary(self) -> dict[str, Any]:
        """The derived statistics, in seconds."""
        gaps = self.gaps
        return {
            "ttft_s": self.ttft,
            "total_s": self.total,
            "chunks": len(self.chunks),
            "bytes": self.nbytes,
            "gap_p50_s": percentile(gaps, 50),
            "gap_p95_s": percentile(gaps, 95),
            "gap_p99_s": percentile(gaps, 99),
            "max_gap_s": max(gaps) if gaps else None,
            "completed": self.completed,
            "error_kind": self.error_kind,
            "error": self.error,
        }

    def to_dict(self) -> dict[str, Any]:
        """Builtin-typed form with raw stamps and derived stats."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _LAST}
        out.update(
            chunks=[c.to_dict() for c in self.chunks],
            reads=[[stamp, n] for stamp, n in self.reads],
            heartbeat_ns=list(self.heartbeat_ns),
            faults=[f.to_dict() for f in self.faults],
            caught=list(self.caught),
            read_delay_ns=list(self.read_delay_ns),
            judged=None if self.judged is None else dict(self.judged),
        )
        return {
            **out,
            "client_delay_s": self.client_delay,
            "stats": self.summary(),
            "findings": [f.to_dict() for f in self.findings],
            **({} if self.stack is None else {"stack": self.stack.to_dict()}),
            **({"said": [s.to_dict() for s in self.said]} if self.said else {}),
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> StreamTrace:
        """Inverse of :meth:`to_dict` (derived stats are recomputed, not read)."""
        return cls(
            name=str(raw["name"]),
            method=str(raw["method"]),
            url=str(raw["url"]),
            format=str(raw["format"]),
            format_auto=bool(raw.get("format_auto", False)),
            request_ns=int(raw["request_ns"]),
            chunks=[Chunk.from_dict(c) for c in raw.get("chunks", [])],
            reads=[(int(s), int(n)) for s, n in raw.get("reads", [])],
            heartbeats=int(raw.get("heartbeats", 0)),
            heartbeat_ns=[int(s) for s in raw.get("heartbeat_ns", [])],
            completed=bool(raw.get("completed", False)),
            faults=[FaultRecord.from_dict(f) for f in raw.get("faults", [])],
            caught=[str(c) for c in raw.get("caught", [])],
            read_delay_ns=[int(d) for d in raw.get("read_delay_ns", [])],
            proxy_waits=[(int(s), int(w)) for s, w in raw.get("proxy_waits", [])],
            reader_held=[(int(a), int(b)) for a, b in raw.get("reader_held", [])],
            judged=None if raw.get("judged") is None else dict(raw["judged"]),
            stack=None if raw.get("stack") is None else StackStamps.from_dict(raw["stack"]),
            said=[Said.from_dict(s) for s in raw.get("said", [])],
            # The rest are None by default, and read back as they were written.
            **{f.name: raw.get(f.name) for f in fields(cls) if f.name not in _SET},
        )


def timeline_of(trace: StreamTrace, marks: dict[int, str]) -> str:
    """A compact, time-ordered view of ``trace``: ends, marked chunks, fault on/off, what the
    hops said, heartbeats left out; ``marks`` puts a note on some chunk indexes. A function of
    its own: how a trace is shown is not what a trace is."""
    t0 = trace.request_ns
    n = len(trace.chunks)
    keep = set(range(min(_TIMELINE_EDGE, n))) | set(range(max(n - _TIMELINE_EDGE, 0), n))
    for index in marks:
        keep.update(range(index - _TIMELINE_CONTEXT, index + _TIMELINE_CONTEXT + 1))
    events: list[tuple[int, int, str]] = [(t0, 0, "request sent")]
    if trace.response_ns is not None:
        events.append((trace.response_ns, 1, f"response headers ({trace.status_code})"))
    previous = None
    for chunk in trace.chunks:
        if chunk.index in keep:
            gap = "" if previous is None else f" +{(chunk.stamp_ns - previous) / 1e6:.1f}"
            mark = f"  <-- {marks[chunk.index]}" if chunk.index in marks else ""
            kind = "" if chunk.kind == "text" else f" {chunk.kind}"
            events.append(
                (chunk.stamp_ns, 2, f"chunk {chunk.index}{kind} ({chunk.nbytes} B){gap}{mark}")
            )
        previous = chunk.stamp_ns
    for fault in trace.faults:
        if fault.on_ns is not None:
            events.append((fault.on_ns, 1, f"fault on: {fault.describe()}"))
        if fault.off_ns is not None:
            events.append((fault.off_ns, 1, f"fault off: {fault.kind}"))
    events += [(said.stamp_ns, 4, said.timeline_text()) for said in trace.said]
    if trace.end_ns is not None:
        outcome = "completed" if trace.completed else f"{trace.error_kind}: {trace.error}"
        events.append((trace.end_ns, 3, f"end: {outcome}"))
    events.sort(key=lambda e: (e[0], e[1]))
    lines = [f"  timeline of {trace.name} (ms since request sent):"]
    last_chunk_shown = -1
    for stamp, kind_rank, text in events:
        if kind_rank == 2:
            index = int(text.split()[1])
            if index > last_chunk_shown + 1:
                lines.append(f"    {'...':>10}  ({index - last_chunk_shown - 1} chunks)")
            last_chunk_shown = index
        lines.append(f"    {(stamp - t0) / 1e6:10.1f}  {text}")
    return "\n".join(lines)
