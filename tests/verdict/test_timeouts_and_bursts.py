"""``total_timeout`` and ``bursts`` on streams built by hand: each fires on its pattern, with
its evidence, and not on its look-alikes (the constants are in
:mod:`pytest_streamguard.verdict.findings.timeouts` and ``.bursts``)."""

from __future__ import annotations

from test_finding_patterns import MS, make, names

from pytest_streamguard.stream.trace import Chunk, FaultRecord, StreamTrace
from pytest_streamguard.verdict.findings import Finding, findings_of


def flowing_cut(name: str, sent_ms: int, after_ms: int = 1000) -> StreamTrace:
    # 20 ms a token, cut ``after_ms`` after the request while it still flowed.
    chunks = list(range(20, after_ms, 20))
    return make(name, sent_ms, chunks, completed=False, end_ms=after_ms, kind="truncated")


def test_total_timeout_names_streams_cut_at_one_elapsed_time_while_flowing() -> None:
    traces = [flowing_cut(f"stream {k}", 37 * k, 1000 + 3 * k) for k in range(4)]
    (finding,) = findings_of(traces)
    assert finding.describe() == (
        "total_timeout: 4 streams ended truncated 1.000 s to 1.009 s after their requests, "
        "still flowing (at most 0.020 s after their last byte); none ran longer (a 1.0 s write "
        "or total timeout on the way?)"
    )
    assert finding.data["elapsed_s"] == 1.0045
    assert Finding.from_dict(finding.to_dict()) == finding


def test_total_timeout_stays_quiet_on_its_look_alikes() -> None:
    # Cut at different times: a flaky network, not a timeout.
    spread = [flowing_cut(f"stream {k}", 0, 1000 + 300 * k) for k in range(3)]
    assert "total_timeout" not in names(findings_of(spread))
    # The plugin's own client gave up (timeout): never a hop's.
    own = [flowing_cut(f"stream {k}", 0) for k in range(3)]
    for trace in own:
        trace.error_kind = "timeout"
    assert findings_of(own) == []
    # A stream of the same test completed after running longer: the hop has no such limit.
    longer = [*(flowing_cut(f"stream {k}", 0) for k in range(3)), make("long", 0, [500, 1500])]
    assert "total_timeout" not in names(findings_of(longer))
    # Silent a second before the cut: a read timeout's (idle_cut), not a total one.
    silent = [
        make(f"stream {k}", 0, [10, 20], completed=False, end_ms=1020, kind="cut") for k in range(3)
    ]
    [found] = findings_of(silent)
    assert found.name == "idle_cut"
    assert len(found.streams) == 3
    # The plugin's own cut of every stream is its own fault.
    cut = [flowing_cut(f"stream {k}", 0) for k in range(3)]
    for trace in cut:
        trace.faults = [FaultRecord("down", {}, [], on_ns=999 * MS)]
    assert names(findings_of(cut)) == ["own_fault"]


def bursting(size: int = 4096, period_ms: int = 120, groups: int = 6) -> StreamTrace:
    # Events of 512 B sent one by one, reaching the client 8 at a time (4 KB), 120 ms apart.
    trace = make("stream 1", 0, [])
    index = 0
    for g in range(groups):
        stamp = (100 + period_ms * g) * MS
        trace.reads.append((stamp, size))
        for _ in range(size // 512):
            trace.chunks.append(Chunk(index, stamp, stamp, 512, f"t{index}"))
            index += 1
    trace.end_ns = trace.chunks[-1].stamp_ns + MS
    return trace


def sent_spread(trace: StreamTrace) -> StreamTrace:
    """``trace`` with each group's events sent 15 ms apart by the server (a hop grouped them)."""
    for chunk in trace.chunks:
        chunk.data = {"sent_ns": chunk.stamp_ns - (15 * (chunk.index % 8)) * MS}
    return trace


def test_bursts_names_chunks_released_in_groups_of_a_fixed_size() -> None:
    (finding,) = findings_of([bursting()])
    assert finding.describe() == (
        "bursts: 48 of 48 chunks came in 6 reads of about 4096 B each, 0.120 s apart, up to 8 "
        "chunks a read (a hop that flushes by size?)"
    )
    assert (finding.data["by"], finding.data["group_bytes"]) == ("size", 4096.0)


def test_bursts_believes_the_servers_send_stamps_and_the_plugins_faults() -> None:
    # The server wrote each group's chunks together (it generates in batches): no hop grouped
    # them.
    together = bursting()
    for chunk in together.chunks:
        chunk.data = {"sent_ns": chunk.stamp_ns - 5 * MS}
    assert findings_of([together]) == []
    assert names(findings_of([sent_spread(bursting())])) == ["bursts"]
    # The embedded Toxiproxy waited for a CPU 80 of the 120 ms before each group (a busy
    # machine, seen as bursts 81 ms apart in a resilience run with a core kept busy); 30 ms
    # leaves the hop's period.
    for waited_ms, found in ((80, []), (30, ["bursts"])):
        busy = sent_spread(bursting())
        busy.proxy_waits = [(stamp, waited_ms * MS) for stamp, _ in busy.reads[1:]]
        assert names(findings_of([busy])) == found, waited_ms
        # The same time with the client's own loop held (a late timer of the stream's), the
        # span ending past the read it delayed.
        held = sent_spread(bursting())
        held.reader_held = [(at - waited_ms * MS, at + MS) for at, _ in held.reads[1:]]
        assert names(findings_of([held])) == found, waited_ms
    # The plugin's own slicer or bandwidth limit grouped them.
    sliced = bursting()
    sliced.faults = [FaultRecord("bandwidth", {"kb_per_second": 32}, [], on_ns=0)]
    assert names(findings_of([sliced])) == ["own_fault"]


def test_bursts_stays_quiet_on_a_flowing_stream_and_uneven_groups() -> None:
    assert findings_of([make("flowing", 0, [20 * i for i in range(1, 30)])]) == []
    # Three groups: two sizes and two gaps agree by chance (a busy machine's reads of a healthy
    # stream in a resilience run: 9, 9 and 14 chunks, 70 and 85 ms apart); four are compared.
    assert findings_of([sent_spread(bursting(groups=3))]) == []
    assert names(findings_of([sent_spread(bursting(groups=4))])) == ["bursts"]
    uneven = make("stream 1", 0, [])
    index = 0
    for g, (n, at) in enumerate([(2, 100), (9, 170), (3, 400), (6, 430)]):
        uneven.reads.append((at * MS, 512 * n))
        for _ in range(n):
            uneven.chunks.append(Chunk(index, at * MS, at * MS, 512, f"t{g}"))
            index += 1
    uneven.end_ns = 431 * MS
    assert findings_of([uneven]) == []
    # Groups of 5, 8, 11 and 14 events of 512 B, at uneven periods, each event in a read of its
    # own at its group's stamp (as a client records segments it read at one instant): neither
    # the groups' sizes (their reads summed) nor their periods are fixed.
    per_event = make("stream 1", 0, [])
    for n, at in [(5, 100), (8, 200), (11, 330), (14, 420)]:
        for _ in range(n):
            per_event.reads.append((at * MS, 512))
            index = len(per_event.chunks)
            per_event.chunks.append(Chunk(index, at * MS, at * MS, 512, f"t{index}"))
    per_event.end_ns = 421 * MS
    assert findings_of([per_event]) == []
