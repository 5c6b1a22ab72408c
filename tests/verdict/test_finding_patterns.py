"""Each finding on streams built by hand: it fires on its pattern, with its evidence, and not on
the pattern's fixed twin (the thresholds are in :mod:`pytest_streamguard.verdict.findings`)."""

from __future__ import annotations

import contextlib
import http.server
import itertools
import json
import threading
import time
from collections.abc import Sequence

import pytest

from pytest_streamguard.report.records import TestRecord
from pytest_streamguard.stream.trace import Chunk, FaultRecord, StreamTrace
from pytest_streamguard.verdict.deadlines import Deadline, check_traces, format_violations
from pytest_streamguard.verdict.findings import (
    Finding,
    findings_failed,
    findings_of,
    not_cancelled,
    parse_fail_on,
    target_gauges,
)
from pytest_streamguard.verdict.probe import Probed, ProbeWaits, Waited, merge, waits

MS = 1_000_000


def make(
    name: str,
    request_ms: int,
    chunk_ms: list[int],
    *,
    reads_ms: list[int] | None = None,
    completed: bool = True,
    end_ms: int | None = None,
    kind: str | None = None,
    head_ms: int = 5,
) -> StreamTrace:
    """A stream sent at ``request_ms`` whose chunks arrived ``chunk_ms`` after it."""
    trace = StreamTrace(
        name=name,
        method="POST",
        url="/generate",
        format="sse",
        request_ns=request_ms * MS,
        response_ns=(request_ms + head_ms) * MS,
        completed=completed,
        error_kind=kind,
    )
    for index, ms in enumerate(chunk_ms):
        stamp = (request_ms + ms) * MS
        trace.chunks.append(Chunk(index, stamp, stamp, 30, f"t{index}"))
    for ms in sorted(set(reads_ms if reads_ms is not None else chunk_ms)):
        trace.reads.append(((request_ms + ms) * MS, 30))
    last = end_ms if end_ms is not None else (chunk_ms[-1] + 1 if chunk_ms else head_ms)
    trace.end_ns = (request_ms + last) * MS
    return trace


def names(found: list[Finding]) -> list[str]:
    return [f.name for f in found]


def test_buffered_fires_on_chunks_in_one_read_at_the_end() -> None:
    trace = make("stream 1", 0, [400] * 8)
    (finding,) = trace.findings
    assert finding.describe() == (
        "buffered: 8 of 8 chunks in 1 read, the last at 0.400 s (1 read in all)"
    )
    assert finding.data["held"] == 8
    assert finding.streams == ("stream 1",)
    # The body closed 0.2 s after the answer's last token (every hop's close to make, late on a
    # busy machine): the answer still came whole at its end. A stream cut 0.2 s later was not.
    assert names(make("closed late", 0, [400] * 8, end_ms=600).findings) == ["buffered"]
    cut = make("cut later", 0, [400] * 8, end_ms=600, completed=False, kind="truncated")
    assert "buffered" not in names(cut.findings)


def test_buffered_stays_quiet_on_a_flowing_stream_and_a_short_one() -> None:
    assert make("flowing", 0, [20 * i for i in range(1, 9)]).findings == []
    assert make("short", 0, [50, 50, 50]).findings == []
    # A whole answer in one read 0.126 s after the request: within a busy machine's delay.
    assert make("quick", 0, [126] * 32).findings == []
    # Most chunks together, but early, and the rest flowing after: not buffered at the end.
    assert make("burst first", 0, [10] * 6 + [30, 50, 70, 90]).findings == []
    # A fast server's first tokens coalesced into one read, then a long wait to the end (a
    # stall carried by heartbeats, or a cut): the burst was not at the stream's end.
    assert make("early burst", 0, [10] * 6 + [1500] * 6, end_ms=1510).findings == []


def test_buffered_takes_reads_a_few_ms_apart_as_one_arrival() -> None:
    # A gateway passing on an answer it got whole writes its 20 events back to back; a client
    # on a crowded machine read them over 4 reads in 3 ms (a fresh clone's make test).
    crowded = make("crowded", 0, [409] * 5 + [410] * 5 + [411] * 5 + [412] * 5)
    (finding,) = crowded.findings
    assert finding.describe() == (
        "buffered: 20 of 20 chunks in 4 reads within 3 ms, the last at 0.412 s (4 reads in all)"
    )
    # Two arrivals 78 ms apart: no span is said (it would be the gap between them).
    (two,) = make("two arrivals", 0, [400] * 4 + [402] * 4 + [480] * 8).findings
    assert two.describe() == (
        "buffered: 16 of 16 chunks in 3 reads, the last at 0.480 s (3 reads in all)"
    )
    # Two early tokens in one read (a busy machine), the answer held to the end: the pair is
    # not the second arrival that held it (it once made the whole answer look early).
    (paired,) = make("early pair", 0, [20, 40, 60, 60, 80] + [1080] * 19).findings
    assert paired.describe() == (
        "buffered: 19 of 24 chunks in 1 read, the last at 1.080 s (5 reads in all)"
    )
    # A model whose tokens come 6 ms apart after a long first token is flowing: never two of
    # its reads to an arrival.
    assert make("fast tokens", 0, [400 + 6 * i for i in range(20)]).findings == []


def test_buffered_believes_the_servers_send_stamps_where_the_chunks_carry_them() -> None:
    # All 16 chunks in one read 1 s after the request. The server sent them 50 ms apart: a hop
    # held them, buffered. The server sent them within 15 ms (a fast answer after a 1 s cold
    # start): they arrived as sent, nothing held them.
    held = make("held", 0, [1000] * 16)
    for i, chunk in enumerate(held.chunks):
        chunk.data = {"sent_ns": (250 + 50 * i) * MS}
    (finding,) = held.findings
    assert finding.describe().endswith("; the server sent them over 0.750 s")
    together = make("sent together", 0, [1000] * 16)
    for i, chunk in enumerate(together.chunks):
        chunk.data = {"sent_ns": (985 + i) * MS}
    assert together.findings == []


def test_a_hold_with_the_head_in_it_counts_from_the_request() -> None:
    # Head and answer in one read 554 ms after the request, under a 150 ms latency fault: the
    # hold is 554 ms, more than such a latency makes (2 x 170 ms + 50 ms), so the verdict names
    # buffered; under a 1 s latency, the fault's, for the 0.554 s it held (it said 0.000 s).
    for ms, found in ((150, "buffered"), (1000, "own_fault")):
        trace = make("held", 0, [554] * 20, head_ms=554)
        trace.faults = [FaultRecord("latency", {"ms": ms, "jitter": 20}, [], 0)]
        (finding,) = trace.findings
        assert finding.name == found, finding.describe()
        assert "0.554 s" in finding.evidence, finding
        assert "0.000 s" not in finding.evidence, finding


def test_buffered_is_not_named_where_the_plugins_toxiproxy_waited_for_a_cpu_meanwhile() -> None:
    # 47 of 48 chunks at the end, 250 ms after the first (the server sent them 4 ms apart). The
    # embedded Toxiproxy's loop waited 150 ms for a CPU over that silence: the busy machine
    # held them. 20 ms does not explain it, nor a wait over another read's silence.
    cases = ((150, 290, []), (20, 290, ["buffered"]), (150, 40, ["buffered"]))
    for waited_ms, at_ms, found in cases:
        trace = make("busy", 0, [40] + [290] * 47)
        for i, chunk in enumerate(trace.chunks):
            chunk.data = {"sent_ns": (36 + 4 * i) * MS}
        trace.proxy_waits = [(at_ms * MS, waited_ms * MS)]
        assert names(trace.findings) == found, (waited_ms, at_ms)
        # The waits are kept in the JSON, and read back.
        back = StreamTrace.from_dict(json.loads(json.dumps(trace.to_dict())))
        assert names(back.findings) == found
        # Under a latency fault of the plugin's the busy machine comes first: the fault did not
        # hold them (a resilience run named its latency(200) for such a hold, 0.397 s).
        trace.faults = [FaultRecord("latency", {"ms": 200, "jitter": 0}, [], 0)]
        assert names(trace.findings) == (found and ["own_fault"]), (waited_ms, at_ms)


def test_a_readers_loop_held_as_a_hop_let_a_whole_answer_through_does_not_excuse_it() -> None:
    """nginx held a whole answer, its head too, 0.663 s (a confusion run's record): the client's
    loop held 12 ms as it came is 2 % of that silence, not most of the 4 ms between the head
    and the chunks, which came together."""
    trace = make("stream 1", 0, [667] * 30, head_ms=663)
    trace.reader_held = [(654 * MS, 666 * MS)]
    assert names(trace.findings) == ["buffered"]
    # Held over most of the silence, the reader's own loop kept them.
    trace.reader_held = [(20 * MS, 666 * MS)]
    assert names(trace.findings) == []


def test_the_proxys_wait_is_weighed_over_the_held_chunks_time_on_the_way() -> None:
    # A resilience run with a core kept busy: the head at 10 ms, the server's first token sent
    # at 78 ms (after the prefill), every chunk held to 258 ms. The proxy waited 101 ms for a
    # CPU over the 248 ms since the head, 56 % of the 180 ms the chunks were on the way: the
    # busy machine held them (it read as buffered against the whole silence). 60 ms is not.
    for waited_ms, found in ((101, []), (60, ["buffered"])):
        trace = make("busy", 0, [258] * 48, head_ms=10)
        for i, chunk in enumerate(trace.chunks):
            chunk.data = {"sent_ns": (78 + 3 * i) * MS}
        trace.proxy_waits = [(258 * MS, waited_ms * MS)]
        assert names(trace.findings) == found, waited_ms


def test_idle_cut_names_a_round_silence_and_not_another() -> None:
    cut = make("stream 1", 0, [10, 20, 30], completed=False, end_ms=5030, kind="cut")
    assert [f.describe() for f in cut.findings] == [
        "idle_cut: cut after 5.000 s of silence (a 5 s read timeout?)"
    ]
    odd = make("stream 1", 0, [10, 20, 30], completed=False, end_ms=1730, kind="cut")
    assert odd.findings == []
    fine = make("stream 1", 0, [10, 20, 30], end_ms=5030)
    assert fine.findings == []


def test_idle_cut_never_names_the_clients_own_read_limit() -> None:
    # The plugin's client gave up after its 1.050 s read limit: a round silence, but nothing on
    # the way cut the stream, so no hop's read timeout is suspected.
    own = make("stream 1", 0, [10, 20, 30], completed=False, end_ms=1082, kind="timeout")
    assert own.findings == []
    cut = make("stream 1", 0, [10, 20, 30], completed=False, end_ms=1082, kind="reset")
    assert names(cut.findings) == ["idle_cut"]


def test_idle_cut_counts_from_a_read_a_lazy_timer_kept() -> None:
    # nginx does not move a running timer by under 300 ms: behind a 1 s read timeout, a token
    # that came 0.242 s after the one before is followed by the cut 0.760 s later, 1 s after
    # the earlier read (a busy run: 0.872 s of silence, the response head 0.120 s before the
    # last chunk). The roundest of the candidate reads is named.
    lazy = make("stream 1", 0, [20, 262], completed=False, end_ms=1022, kind="cut")
    assert [f.describe() for f in lazy.findings] == [
        "idle_cut: cut after 0.760 s of silence, 1.002 s after a read 0.242 s before the last"
        " (a 1 s read timeout?)"
    ]
    assert lazy.findings[0].data["round_s"] == 1
    # A read further back than 0.3 s is one no timer still counts from.
    far = make("stream 1", 0, [10, 20, 400], completed=False, end_ms=1015, kind="cut")
    assert far.findings == []
    # A hop arms its timer when it sends the request on: every byte within 0.3 s of the
    # request, the cut comes a timeout after the request (nginx, seen 1.002 s after it).
    quick = make(
        "stream 1", 0, [150, 190, 227], head_ms=140, completed=False, end_ms=1002, kind="cut"
    )
    assert [f.describe() for f in quick.findings] == [
        "idle_cut: cut after 0.775 s of silence, 1.002 s after its request, 0.227 s before the"
        " last (a 1 s read timeout?)"
    ]


def test_held_open_reads_the_field_when_a_trace_has_it() -> None:
    trace = make("stream 1", 0, [10, 20, 30])
    assert trace.findings == []
    trace.held_open_s = 2.0  # type: ignore[attr-defined]
    assert [f.describe() for f in trace.findings] == [
        "held_open: body held open 2.000 s after the protocol's end"
    ]
    trace.held_open_s = 0.01  # type: ignore[attr-defined]
    assert trace.findings == []


def test_cold_start_compares_the_first_stream_with_the_later_ones() -> None:
    warm = [make(f"stream {k}", 1400 + 100 * k, [60 + 20 * i for i in range(8)]) for k in (2, 3, 4)]
    cold = make("stream 1", 0, [1200 + 20 * i for i in range(8)])
    (finding,) = findings_of([cold, *warm])
    assert finding.describe() == (
        "cold_start: first stream's TTFT 1.200 s, the 3 later streams' median 0.060 s"
    )
    same = make("stream 1", 0, [70 + 20 * i for i in range(8)])
    assert findings_of([same, *warm]) == []


def test_blocked_loop_finds_streams_stalled_in_the_same_windows() -> None:
    # Ten streams, 20 ms a token, and the loop blocked 150 ms after every fourth token: every
    # stream's gap spans the same three windows.
    def stalled(k: int, blocks: tuple[int, ...] = (4, 8, 12)) -> list[int]:
        stamps, t = [], 2 * k
        for i in range(16):
            t += 20 + (150 if i in blocks else 0)
            stamps.append(t)
        return stamps

    traces = [make(f"stream {k}", 0, stalled(k)) for k in range(10)]
    (finding,) = findings_of(traces)
    assert finding.name == "blocked_loop"
    assert finding.evidence.startswith("up to 10 of 10 streams stalled together 3 times"), finding
    free = [make(f"stream {k}", 0, [2 * k + 20 * i for i in range(1, 17)]) for k in range(10)]
    assert findings_of(free) == []
    # Stalled together twice only (a batch engine running the prefills of streams it admitted
    # at once): not a blocked loop.
    twice = [make(f"stream {k}", 0, stalled(k, (1, 2))) for k in range(10)]
    assert findings_of(twice) == []
    # A stream whose end the blocked loop also held back is named by the blocked loop only.
    traces[0].held_open_s = 0.5
    assert [f.name for f in findings_of(traces)] == ["blocked_loop"]
    alone = make("stream 0", 0, stalled(0))
    alone.held_open_s = 0.5
    assert [f.name for f in findings_of([alone])] == ["held_open"]


def test_blocked_loop_finds_a_staircase_of_heads() -> None:
    traces = [
        make(f"stream {k}", k, [200 * k + 20 * i for i in range(1, 5)], head_ms=200 * k + 5)
        for k in range(6)
    ]
    found = findings_of(traces)
    assert names(found) == ["blocked_loop"]
    assert "response heads of 6 streams sent together arrived in a staircase" in found[0].evidence
    together = [make(f"stream {k}", k, [20 * i for i in range(1, 5)]) for k in range(6)]
    assert findings_of(together) == []


def test_heads_that_came_out_together_are_a_blocked_loop_only_where_the_probe_waited() -> None:
    """The staircase's handlers run back to back (150 ms of sync work each) and 7 of 8 heads
    come out together after the last, as a busy machine's uvicorn did: 2 steps, not 3."""
    traces = [make("stream 0", 0, [1240 + 20 * i for i in range(1, 8)], head_ms=180)]
    traces += [
        make(f"stream {k}", 0, [1260 + 20 * i for i in range(1, 8)], head_ms=1240)
        for k in range(1, 8)
    ]
    # Without the probe's samples (off, or a TCP connect) the steps are too few to tell.
    assert findings_of(traces) == []
    assert findings_of(traces, probed(every_50_ms(1500), kind="tcp")) == []
    # The ready path answered meanwhile: a loop that was free (a cold start in a thread).
    assert findings_of(traces, probed(every_50_ms(1500))) == []
    (found,) = findings_of(traces, probed(every_50_ms(1500, [(0, 1240)])))
    assert found.name == "blocked_loop"
    assert "response heads of 8 streams sent together arrived in a staircase of 2 steps" in (
        found.evidence
    )
    assert found.data["collapsed"] is True
    assert found.cause.startswith("the event loop was blocked: the ready path /readyz took")


def test_a_burst_sent_a_few_ms_late_is_still_sent_together() -> None:
    # Served one whole answer after another; a busy client sent the last two requests 5 ms
    # after the first, after the first stream's head (3 ms): still one burst.
    sends = [0, 0, 0, 5, 5]
    traces = [
        make(
            f"stream {k}",
            sent,
            [560 * k + 3 - sent + 50 * i for i in range(1, 12)],
            head_ms=560 * k + 3 - sent,
        )
        for k, sent in enumerate(sends)
    ]
    found = findings_of(traces)
    assert names(found) == ["blocked_loop"]
    assert "response heads of 5 streams sent together" in found[0].evidence
    # Requests spread wider than that are not one burst: no staircase is read into them.
    spread = [make(f"stream {k}", 560 * k, [50 * i for i in range(1, 12)]) for k in range(5)]
    assert findings_of(spread) == []


def test_blocked_loop_finds_every_answer_released_at_once_after_a_silence() -> None:
    # Eight streams sent together; nothing for 1.1 s, then every head, then every answer.
    held = [make(f"stream {k}", 0, [1101 + k] * 6, head_ms=1100, end_ms=1110) for k in range(8)]
    found = findings_of(held)
    # Each stream is also buffered (its answer came in one read at its end).
    assert names(found) == ["buffered"] * 8 + ["blocked_loop"]
    finding = found[-1]
    assert finding.describe() == (
        "blocked_loop: response heads and whole answers of 8 streams sent together arrived "
        "within 0.008 s, after 1.100 s in which none of them got a byte"
    )
    # A buffering ingress passes each head on at once: the answers alone arriving together
    # are buffered streams, not a blocked loop.
    early_heads = [
        make(f"stream {k}", 0, [1100 + k] * 6, head_ms=20, end_ms=1110) for k in range(8)
    ]
    assert "blocked_loop" not in names(findings_of(early_heads))
    # Where the server stamped its writes: written within 0.1 s, as a loop released at the
    # end writes, the pattern holds; written over its 1.1 s (it streamed on time, and a hop
    # after it held the bytes: a CI run's proxy, short of CPU, held 8 streams 0.2 s), no blame.
    for k, trace in enumerate(held):
        for i, chunk in enumerate(trace.chunks):
            chunk.data = {"sent_ns": (1090 + k + i) * MS}
    assert names(findings_of(held))[-1] == "blocked_loop"
    for k, trace in enumerate(held):
        for i, chunk in enumerate(trace.chunks):
            chunk.data = {"sent_ns": (10 + 200 * i + k) * MS}
    assert "blocked_loop" not in names(findings_of(held))


def test_blocked_loop_finds_streams_served_in_turn() -> None:
    # The naive target, measured: the first stream served alone to its end at 1.358 s, the
    # others' heads only after it.
    first = make("stream 0", 0, [54 + 28 * i for i in range(48)], head_ms=33)
    rest = [
        make(f"stream {k}", 0, [1370 + 10 * k + i for i in range(6)], head_ms=1366 + 10 * k)
        for k in range(1, 8)
    ]
    found = [f for f in findings_of([first, *rest]) if f.name == "blocked_loop"]
    assert [f.describe() for f in found] == [
        "blocked_loop: 7 of 8 streams sent together got their response heads only after "
        "another had its whole answer (the first of them by 1.370 s, 48 chunks); the last head "
        "at 1.436 s"
    ]
    # Served side by side: every head long before any answer ended.
    side = [make(f"stream {k}", 0, [60 + 20 * i for i in range(48)], head_ms=40) for k in range(8)]
    assert findings_of(side) == []
    # A server that admits a batch and queues the rest: 10 of 30 streams under way side by side
    # when the first answer ended, the other 20 heads after it (the continuous-batching target
    # on a quiet machine, with its figures stretched past 0.5 s). Capacity, not a blocked loop.
    batch = [make(f"stream {k}", 0, [9 + 18 * i for i in range(32)], head_ms=5) for k in range(10)]
    queued = [
        make(f"stream {k}", 0, [640 + 5 * i for i in range(32)], head_ms=600 + 2 * k)
        for k in range(10, 30)
    ]
    assert findings_of([*batch, *queued]) == []
    # One short answer first, the others' heads just after it: a pause of 0.2 s no deadline
    # would see (the continuous-batching target on a busy machine).
    short = make("stream 0", 0, [10 + 4 * i for i in range(48)], head_ms=8)
    after = [
        make(f"stream {k}", 0, [215 + 3 * k + i for i in range(48)], head_ms=210 + 3 * k)
        for k in range(1, 8)
    ]
    assert findings_of([short, *after]) == []


def test_a_finding_round_trips_through_the_json_form() -> None:
    trace = make("stream 1", 0, [400] * 8)
    raw = trace.to_dict()
    assert [f["name"] for f in raw["findings"]] == ["buffered"]
    assert Finding.from_dict(raw["findings"][0]) == trace.findings[0]
    assert StreamTrace.from_dict(raw).findings == trace.findings


def test_parse_fail_on_lists_the_known_names_on_a_typo() -> None:
    assert parse_fail_on("buffered, idle_cut", where="x") == ("buffered", "idle_cut")
    assert parse_fail_on(["held_open"], where="x") == ("held_open",)
    with pytest.raises(
        ValueError,
        match="unknown finding\\(s\\) bufferd; known findings: server_error, "
        "buffered, blocked_loop, cold_start, idle_cut, held_open",
    ):
        parse_fail_on("bufferd", where="x")


def throttled(name: str, waits_ms: list[int], kind: str = "bandwidth") -> StreamTrace:
    """A stream whose events the server stamped (``sent_ns``) 10 ms apart and the client read
    ``waits_ms`` later, under a throttle fault on from the request to the end."""
    trace = make(name, 0, [10 * i + w for i, w in enumerate(waits_ms, 1)])
    for i, chunk in enumerate(trace.chunks, 1):
        chunk.data = {"sent_ns": 10 * i * MS}
    # 1 KB a read: 6 KB in 1.2 s, above half the throttle's 2 KB/s (the reads were paced).
    trace.reads = [(stamp, 1000) for stamp, _ in trace.reads]
    params = {"kb_per_second": 2} if kind == "bandwidth" else {"bytes_per_second": 2000}
    trace.faults.append(FaultRecord(kind, params, [kind], on_ns=0))
    return trace


def test_backpressure_needs_a_throttle_and_events_held_behind_it() -> None:
    held = throttled("slow", [5, 5, 300, 600, 900, 1200])
    (finding,) = held.findings
    assert finding.describe() == (
        "backpressure: under bandwidth(kb_per_second=2): 4 of 6 chunks waited 0.25 s to "
        "1.195 s longer from the server's write to the client's read than the quickest (past "
        "their own bytes' time at its rate); the client read 4.0 KB/s while it was on"
    )
    assert finding.data["held"] == 4
    # The same waits under a throttle far above the reads' rate (a client that paused, not
    # one the throttle paced).
    held.faults[0].params["kb_per_second"] = 100
    assert held.findings == []
    held.faults[0].params["kb_per_second"] = 2
    # The same waits without a throttle (latency, jitter: the network, not the reader) ...
    held.faults.clear()
    assert held.findings == []
    # ... a throttle the reader keeps up with, and a stream without the server's stamps.
    assert throttled("kept up", [5, 6, 7, 8, 9, 10], "slow_reader").findings == []
    unstamped = throttled("unstamped", [5, 5, 300, 600, 900, 1200])
    for chunk in unstamped.chunks:
        chunk.data = None
    assert unstamped.findings == []


def test_backpressure_takes_each_events_own_bytes_off_its_wait_under_the_throttle() -> None:
    """A stream throttled from its start: its first 1 KB event waits 0.5 s at 2 KB/s for its
    own bytes, queued behind nothing; the events after it, read once the throttle is lifted,
    waited in the buffers behind it. Measured against the first event's whole wait, they waited
    only 0.13 to 0.17 s longer (a CI run's shape: the first event read at 0.89 s, the throttle
    lifted at 1.05 s); less its own bytes' time, the first queued 0.37 s and they 0.5 s more."""
    trace = throttled("slow", [860, 1030, 1010, 1000, 990, 980])
    for chunk in trace.chunks:
        chunk.nbytes = 1000
    # The throttle's 100 ms slices of 200 bytes before the first event was whole.
    trace.reads = sorted([(ms * MS, 200) for ms in range(100, 900, 100)] + trace.reads)
    trace.faults[0].off_ns = 1000 * MS
    (finding,) = trace.findings
    assert finding.data["held"] == 5
    assert 0.66 < finding.data["longest_s"] < 0.68
    # The same waits, all of them read under the throttle: each event's own 0.5 s comes off
    # alike, and what is left is what the old rule saw (no event 0.25 s over the first).
    trace.faults[0].off_ns = None
    assert trace.findings == []


def test_backpressure_reads_the_rate_before_the_throttle_was_lifted() -> None:
    """The client's read rate under the throttle counts the reads before the call that lifted
    it began (``lifting_ns``): the buffers' drain the client reads while that call runs (20 KB
    at once) is not read under a 2 KB/s throttle."""
    trace = throttled("slow", [5, 5, 300, 600, 900, 1200])
    # Two hundred bytes every 0.1 s, then the drain 5 ms after the lifting began.
    trace.reads = [(ms * MS, 200) for ms in range(100, 1300, 100)]
    trace.reads.append((1305 * MS, 20_000))
    trace.faults[0].lifting_ns = 1300 * MS
    trace.faults[0].off_ns = 1310 * MS
    (finding,) = trace.findings
    assert finding.data["kb_per_s"] == pytest.approx(2.0)
    assert finding.data["bytes"] == 12 * 200
    # Without the stamp, the drain counts: 20 KB more in the same second or so.
    trace.faults[0].lifting_ns = None
    (finding,) = trace.findings
    assert finding.data["kb_per_s"] > 15


def test_not_cancelled_reads_the_engine_after_a_cut_and_waits_no_longer_than_needed() -> None:
    cut = make("stream 1", 0, [10, 20], completed=False, kind="cut")
    fine = make("stream 2", 0, [10, 20])
    # Generation still running for nobody when the wait ends.
    found = not_cancelled([cut, fine], lambda: (1.0, 0.0), after_s=0.0)
    assert found is not None
    assert found.streams == ("stream 1",)
    assert found.describe().startswith("not_cancelled: generation still running ")
    assert found.data["engine_requests"] == 1.0
    # The engine idle, a target without the gauges, or no stream cut: nothing, and no wait.
    assert not_cancelled([cut], lambda: (0.0, 0.0)) is None
    assert not_cancelled([cut], lambda: None) is None
    assert not_cancelled([fine], lambda: (1.0, 0.0)) is None
    # A stream held in a blackhole: the server cannot know its client left.
    cut.faults.append(FaultRecord("blackhole", {}, ["timeout"], on_ns=0))
    assert not_cancelled([cut], lambda: (1.0, 1.0), after_s=0.0) is None


def test_a_test_record_keeps_its_server_side_finding_through_the_json_form() -> None:
    record = TestRecord(nodeid="t.py::test", deadline=None, traces=[make("s", 0, [400] * 8)])
    record.server_findings.append(Finding("not_cancelled", "generation still running", ("s",)))
    assert [f.name for f in record.findings] == ["buffered", "not_cancelled"]
    again = TestRecord.from_dict(record.to_dict())
    assert [f.name for f in again.findings] == ["buffered", "not_cancelled"]


def test_the_gauge_reader_tries_again_when_the_target_answers_late() -> None:
    # A target busy generating answered its metrics late once, and one try read that as a
    # target without gauges: not_cancelled then missed generation left running.
    answers = iter([0.5, 0.0])
    body = (
        b"# TYPE streamguard_target_engine_requests gauge\n"
        b"streamguard_target_engine_requests 1.0\n"
        b"# TYPE streamguard_target_active_streams gauge\n"
        b"streamguard_target_active_streams 0.0\n"
    )

    class Late(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            time.sleep(next(answers, 0.0))
            # A late answer finds its client gone (that is the case): no traceback for it.
            with contextlib.suppress(ConnectionError):
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Late)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        assert target_gauges(url, timeout=0.2, attempts=2)() == (1.0, 0.0)
        answers = iter([0.5, 0.5])
        assert target_gauges(url, timeout=0.2, attempts=2)() is None
    finally:
        server.shutdown()
        server.server_close()


def probed(samples_ms: list[tuple[int, int | None]], kind: str = "http") -> Probed:
    """A probe's samples: sent at the first figure, answered the second later (None: none)."""
    return Probed(
        kind,
        "/readyz" if kind == "http" else "127.0.0.1:8000",
        0.05,
        [(sent * MS, None if took is None else took * MS) for sent, took in samples_ms],
    )


def every_50_ms(
    until_ms: int, held: Sequence[tuple[int, int]] = ()
) -> list[tuple[int, int | None]]:
    """A probe sent every 50 ms that answers in 1 ms, except while one of ``held`` (start, end)
    holds the loop: then it answers at the window's end, and the next goes out after it."""
    samples: list[tuple[int, int | None]] = []
    t = 0
    while t < until_ms:
        end = next((b for a, b in held if a <= t < b), None)
        took = 1 if end is None else end - t
        samples.append((t, took))
        t = max(t + 50, t + took)
    return samples


def stalled_streams() -> list[StreamTrace]:
    # The shared-stall streams above: 20 ms a token, the loop held 150 ms after every fourth.
    def stamps(k: int) -> list[int]:
        out, t = [], 2 * k
        for i in range(16):
            t += 20 + (150 if i in (4, 8, 12) else 0)
            out.append(t)
        return out

    return [make(f"stream {k}", 0, stamps(k)) for k in range(10)]


# The three windows in which every stream of stalled_streams() waits.
HELD_MS = [(120, 270), (370, 520), (620, 770)]


def test_blocked_loop_needs_the_probe_to_have_waited_in_the_stalls() -> None:
    traces = stalled_streams()
    probe = probed(every_50_ms(900, HELD_MS))
    (finding,) = findings_of(traces, probe)
    assert finding.name == "blocked_loop"
    assert finding.evidence.startswith("up to 10 of 10 streams stalled together 3 times"), finding
    # The probe's wait is the evidence, and the cause in words.
    assert "; the ready path /readyz took up to 0.150 s there, waiting " in finding.evidence
    assert finding.data["probe_longest_s"] == pytest.approx(0.150)
    assert finding.data["probe_share"] > 0.6
    assert finding.cause == (
        "the event loop was blocked: the ready path /readyz took 0.15 s while 10 streams stalled"
    )
    assert Finding.from_dict(finding.to_dict()) == finding
    # The same stalls while the probe kept answering in 1 ms: the loop was free; no blame.
    assert findings_of(traces, probed(every_50_ms(900))) == []


def test_a_loop_only_slowed_in_the_stalls_is_not_blamed() -> None:
    """A probe late in one sample per stall (60 ms: threads taking the loop's GIL, as 30
    ``generate()`` threads did in the mission's fixed stack) waited 40 % of the windows: a
    quarter and more, but under the half a held loop keeps it waiting."""
    traces = stalled_streams()
    samples: list[tuple[int, int | None]] = []
    t = 0
    while t < 900:
        took = 60 if any(a <= t < a + 50 for a, _ in HELD_MS) else 1
        samples.append((t, took))
        t += max(50, took)
    probe = probed(samples)
    windows = [(a * MS, b * MS) for a, b in HELD_MS]
    assert waits(probe, windows) == ProbeWaits(samples=9, waited=3, longest_s=0.06, share=0.4)
    assert findings_of(traces, probe) == []


def test_a_hold_the_probe_waited_through_is_the_blocked_loops() -> None:
    """A stream the loop served before it blocked, whose end it then held back: not one the
    blocked_loop names (it never stalled with the others), but its hold lies in the loop's
    first block, where the probe waited."""
    traces = stalled_streams()
    early = make("stream 10", 0, [20, 40, 60, 80], end_ms=260)
    early.held_open_s = 0.14
    probe = probed(every_50_ms(900, HELD_MS))
    found = findings_of([*traces, early], probe)
    assert names(found) == ["blocked_loop"], found
    assert "stream 10" not in found[0].streams
    # The same hold while the probe answered in 1 ms (between the blocks): the stream's own.
    between = make("stream 10", 0, [20, 40, 60, 80], end_ms=370)
    between.held_open_s = 0.1
    assert names(findings_of([*traces, between], probe)) == ["blocked_loop", "held_open"]
    # Without the probe's samples nothing places the hold in a block.
    assert names(findings_of([*traces, early])) == ["blocked_loop", "held_open"]


def test_bursts_a_blocked_loop_released_are_the_blocked_loops() -> None:
    """A stream whose chunks the blocked loop let out four at a time, as it paused between its
    blocks: its groups are the loop's doing where the probe waited while they came."""
    stalls = [(150 if i in (4, 8, 12) else 0) + 20 for i in range(16)]
    ends = list(itertools.accumulate(stalls))
    grouped = make("stream 0", 0, [ends[i // 4 * 4 + 3] for i in range(16)])
    traces = [grouped, *stalled_streams()[1:]]
    found = findings_of(traces, probed(every_50_ms(900, HELD_MS)))
    assert names(found) == ["blocked_loop"], found
    assert "stream 0" in found[0].streams
    # A probe answering at once all along: no blocked loop; the groups are a hop's bursts.
    assert names(findings_of(traces, probed(every_50_ms(900)))) == ["bursts"]


def test_a_probe_late_only_by_its_wait_for_a_cpu_does_not_confirm_a_blocked_loop() -> None:
    """On a machine with more work than cores a free loop answers late too: a probe whose
    wait the target's main thread and the probe's own thread spent waiting for a CPU (their
    run-queue waits, ``cpu_waits``) waited for the machine, not the loop."""
    traces = stalled_streams()
    probe = probed(every_50_ms(900, HELD_MS))
    # Every probe in the stalls waited for a CPU all but 10 ms of its wait.
    probe.cpu_waits = {
        stamp: latency - 10 * MS
        for stamp, latency in probe.samples
        if latency is not None and latency > 10 * MS
    }
    assert findings_of(traces, probe) == []
    # A quarter of each wait for a CPU leaves 90 ms or more waiting for the loop: blocked.
    probe.cpu_waits = {stamp: wait // 4 for stamp, wait in probe.cpu_waits.items()}
    (finding,) = findings_of(traces, probe)
    assert finding.cause.startswith("the event loop was blocked"), finding
    # The waits go with the samples through the JSON form and a merge of two probes.
    again = Probed.from_dict(probe.to_dict())
    assert again == probe
    assert again.merged(probed([(2000, 1)])).cpu_waits == probe.cpu_waits
    assert "cpu_waits" not in probed([(0, 1)]).to_dict()


def test_a_probe_out_through_the_stalls_that_waited_for_a_cpu_clears_the_loop() -> None:
    """A sample sent before the stalls and answered after them, its whole latency a wait for a
    CPU: it was out in every stall and the loop was free to answer (a resilience run's 30
    streams, a sample out 0.27 s that waited 0.28 s for a CPU, was blamed before)."""
    traces = stalled_streams()
    # (The first stall starts at 88 ms.)
    probe = probed([(0, 1), (60, 720)])
    probe.cpu_waits = {60 * MS: 720 * MS}
    assert findings_of(traces, probe) == []
    # The same sample without the wait for a CPU waited for the loop through every stall.
    probe.cpu_waits = {}
    (finding,) = findings_of(traces, probe)
    assert finding.cause.startswith("the event loop was blocked"), finding


def test_without_probe_samples_blocked_loop_keeps_its_probe_less_rules() -> None:
    traces = stalled_streams()
    alone = findings_of(traces)
    assert names(alone) == ["blocked_loop"]
    assert alone[0].cause == ""
    # A TCP connect is answered by the kernel, not the loop: it cannot clear the loop.
    assert findings_of(traces, probed(every_50_ms(900), kind="tcp")) == alone
    # A probe with no sample in the stalls' windows (it ran before them) says nothing.
    assert findings_of(traces, probed([(0, 1), (50, 1)])) == alone
    assert findings_of(traces, Probed("http", "/readyz", 0.05)) == alone


def stack_probe(
    gateway: Sequence[tuple[int, int]], model: Sequence[tuple[int, int]], until_ms: int = 900
) -> Probed:
    """A stack's probes: the gateway's (the entry's) and the model's own, each held in the
    windows given."""
    entry = probed(every_50_ms(until_ms, gateway))
    inner = probed(every_50_ms(until_ms, model))
    entry.hop, inner.hop, entry.inner = "gateway", "model", [inner]
    return entry


def test_under_a_stack_blocked_loop_is_at_the_hop_whose_own_probe_waited() -> None:
    """Each service's own probe: the one that waited in the stalls names the hop, the innermost
    where several did (the gateway's ready path may ask the model's); where none waited, no
    blame; where none has a sample there, the pattern alone, at no hop yet (unknown, by
    :func:`~pytest_streamguard.verdict.hops.at_hops`)."""
    traces = stalled_streams()
    for gateway, model, hop in (
        (HELD_MS, [], "gateway"),
        ([], HELD_MS, "model"),
        (HELD_MS, HELD_MS, "model"),
    ):
        (finding,) = findings_of(traces, stack_probe(gateway, model))
        assert (finding.name, finding.hop) == ("blocked_loop", hop)
        assert f"the ready path /readyz of {hop} took up to 0.150 s there" in finding.evidence
        assert finding.cause.startswith(
            f"the event loop was blocked: the ready path /readyz of {hop}"
        )
    assert findings_of(traces, stack_probe([], [])) == []
    # The gateway's ready path waited on the model's answer behind it (its tap's stamps,
    # ``behind``), all but 10 ms of each wait: the model's loop was free, so neither is blamed.
    chained = stack_probe(HELD_MS, [])
    chained.behind = {stamp: max(took - 10 * MS, 0) for stamp, took in chained.samples if took}
    assert findings_of(traces, chained) == []
    assert Probed.from_dict(chained.to_dict()) == chained
    assert merge([chained, stack_probe([], [])]).behind == chained.behind  # type: ignore[union-attr]
    silent = stack_probe([], [])
    silent.samples, silent.inner[0].samples = [], []
    assert [(f.name, f.hop) for f in findings_of(traces, silent)] == [("blocked_loop", None)]
    # Merged per service, and kept through the JSON form.
    probe = stack_probe([], HELD_MS)
    later = stack_probe([], [])
    merged = merge([probe, later])
    assert merged is not None
    assert [(p.hop, len(p.samples)) for p in merged.hops] == [
        ("model", len(probe.inner[0].samples) + len(later.inner[0].samples)),
        ("gateway", len(probe.samples) + len(later.samples)),
    ]
    assert Probed.from_dict(probe.to_dict()) == probe
    # The gateway's last probe got no answer: it waited while the model's were still sent.
    hung = stack_probe([], [])
    hung.samples = [(0, MS), (50 * MS, None)]
    assert Waited(hung).share(100 * MS, 800 * MS) == 1.0
    # A latency on the model's hop holds the gateway's ready path (it asks the model's): the
    # gateway's wait is the plugin's own fault, not its loop; on the entry's own proxy, no
    # probe passes it, and the gateway's wait stands.
    for hop, named in (("model", ("own_fault", "model")), (None, ("blocked_loop", "gateway"))):
        for trace in traces:
            trace.faults = [FaultRecord("latency", {"ms": 100, "jitter": 0}, [], 0, hop=hop)]
        (finding,) = findings_of(traces, stack_probe(HELD_MS, []))
        assert (finding.name, finding.hop) == named


def two_slot_streams(n: int = 10) -> list[StreamTrace]:
    """A server with two slots: every head at once, the first tokens two at a time, each pair
    after the previous pair's whole answer (16 tokens, 20 ms apart: 0.32 s a pair)."""
    return [
        make(f"stream {k}", 0, [320 * (k // 2) + 20 * i for i in range(1, 17)], head_ms=3)
        for k in range(n)
    ]


def test_queued_finds_streams_waiting_for_a_slot_while_the_probe_answers() -> None:
    traces = two_slot_streams()
    # Without the probe the staircase of first tokens reads as a blocked loop (today's rule).
    assert names(findings_of(traces)) == ["blocked_loop"]
    (finding,) = findings_of(traces, probed(every_50_ms(1700)))
    assert finding.name == "queued"
    assert finding.describe() == (
        "queued: 6 of 10 streams sent together waited up to 1.300 s for a slot: their first "
        "tokens came only after another stream's whole answer; waiting began at a concurrency "
        "of 2 (2 served at once); the ready path /readyz answered meanwhile, in at most "
        "0.001 s (27 probes)"
    )
    assert finding.data["concurrency"] == 2
    assert finding.data["waiting"] == 6
    assert finding.streams == tuple(f"stream {k}" for k in range(4, 10))
    assert finding.cause.startswith("the server was full: 6 streams waited up to 1.30 s for one")
    # The same staircase while the probe waited with the streams: a blocked loop, not capacity.
    held = probed(every_50_ms(1700, [(0, 1700)]))
    (blocked,) = findings_of(traces, held)
    assert blocked.name == "blocked_loop"
    assert "first tokens of 10 streams sent together arrived in a staircase" in blocked.evidence
    # The gateway's probe answered, the model's own waited: not a full server.
    at_model = findings_of(traces, stack_probe([], [(0, 1700)], 1700))
    assert [(f.name, f.hop) for f in at_model] == [("blocked_loop", "model")]
    # Served side by side, or waits under 0.5 s: nothing to report.
    side = [make(f"stream {k}", 0, [20 * i for i in range(1, 17)]) for k in range(10)]
    assert findings_of(side, probed(every_50_ms(400))) == []
    assert findings_of(two_slot_streams(4), probed(every_50_ms(700))) == []


def test_queued_on_a_batch_server_records_its_batch_as_the_concurrency() -> None:
    # The continuous-batching target's pattern of the served-in-turn test above: 10 under way,
    # 20 heads and first tokens after the first answer.
    batch = [make(f"stream {k}", 0, [9 + 18 * i for i in range(32)], head_ms=5) for k in range(10)]
    late = [
        make(f"stream {k}", 0, [640 + 5 * i for i in range(32)], head_ms=600 + 2 * k)
        for k in range(10, 30)
    ]
    (finding,) = findings_of([*batch, *late], probed(every_50_ms(800)))
    assert (finding.name, finding.data["concurrency"], finding.data["waiting"]) == (
        "queued",
        10,
        20,
    )


def test_probe_samples_without_an_answer_wait_until_the_next_one() -> None:
    probe = probed([(0, 1), (50, None), (400, 1)])
    seen = waits(probe, [(100 * MS, 300 * MS)])
    assert seen is not None
    assert (seen.samples, seen.waited, seen.share) == (1, 1, 1.0)
    assert seen.longest_s == pytest.approx(0.35)
    assert Probed.from_dict(probe.to_dict()) == probe
    assert merge([None, probed([(50, 1)]), probed([(0, 2)])]) == probed([(0, 2), (50, 1)])
    assert merge([None]) is None


def test_the_first_line_of_a_failure_names_the_cause_in_words() -> None:
    traces = stalled_streams()
    violations = check_traces(traces, Deadline(chunk=0.1))
    message = format_violations(violations, traces=traces, probe=probed(every_50_ms(900, HELD_MS)))
    first, header, findings = message.split("\n")[:3]
    assert first == (
        "likely cause: the event loop was blocked: the ready path /readyz took 0.15 s while 10 "
        "streams stalled"
    )
    assert header == "token deadline violated (10 in 10 streams):"
    assert findings.startswith("  findings: blocked_loop: up to 10 of 10 streams stalled")
    # Without the probe, the header comes first and the finding's evidence under it.
    plain = format_violations(violations, traces=traces).split("\n")
    assert plain[0] == "token deadline violated (10 in 10 streams):"
    assert plain[1].startswith("  likely cause: blocked_loop: up to 10 of 10 streams")
    gated = findings_failed(findings_of(traces, probed(every_50_ms(900, HELD_MS))))
    assert str(gated).split("\n")[0] == (
        "streamguard finding(s) this test fails on (fail_on): blocked_loop (likely cause: the "
        "event loop was blocked: the ready path /readyz took 0.15 s while 10 streams stalled)"
    )


def test_probe_interrupted_marks_a_stream_a_model_route_probe_waited_to_end() -> None:
    """Issue 45: tokens 20 ms apart, the last at 100 ms, the end at 101 ms; a probe of
    ``/v1/models`` sent at 90 ms answered at 103 ms waited for the end."""
    stream = make("s", 0, [20, 40, 60, 80, 100])
    held = Probed("http", "/v1/models", 0.05, [(10 * MS, MS), (90 * MS, 13 * MS)])
    (found,) = findings_of([stream], held)
    assert found.name == "probe_interrupted"
    assert found.streams == ("s",)
    assert "--streamguard-probe off" in found.evidence
    # The twins: a path that is no model route, an end the protocol gave a reason for, a probe
    # answered before the last token, one that waited out a stall (0.2 s), one that is fast.
    assert findings_of([stream], Probed("http", "/health", 0.05, held.samples)) == []
    reasoned = make("s", 0, [20, 40, 60, 80, 100])
    reasoned.end_reason = "stop"
    assert findings_of([reasoned], held) == []
    for sample in ((90 * MS, 5 * MS), (50 * MS, 200 * MS), (99 * MS, MS)):
        assert findings_of([stream], Probed("http", "/v1/models", 0.05, [sample])) == []
