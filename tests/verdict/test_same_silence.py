"""``idle_cut`` by its shape: streams a hop ended after the same silence, whatever its length
(nginx's ``proxy_read_timeout 500ms``), on streams built by hand; and not on its look-alikes
(the constants are in :mod:`pytest_streamguard.verdict.findings.ends`)."""

from __future__ import annotations

from test_finding_patterns import make, names

from pytest_streamguard.stream.trace import FaultRecord, StackStamps, StreamTrace
from pytest_streamguard.verdict.findings import Finding, findings_of
from pytest_streamguard.verdict.hops import at_hops


def answered(name: str, sent_ms: int, status: int, after_ms: int) -> StreamTrace:
    """A stream answered ``status`` instead of its stream ``after_ms`` after its request."""
    trace = make(name, sent_ms, [], completed=False, end_ms=after_ms, kind="http", head_ms=after_ms)
    trace.status_code = status
    return trace


def lazily_cut(name: str, sent_ms: int, last_ms: int, armed_ms: int, timeout_ms: int = 500):
    """Tokens every 50 ms up to ``last_ms``; a read at ``armed_ms`` armed the hop's timer, which
    a lazy timer did not move for the later reads, and cut the stream ``timeout_ms`` after it."""
    chunks = sorted({*range(20, last_ms + 1, 50), armed_ms, last_ms})
    return make(name, sent_ms, chunks, completed=False, end_ms=armed_ms + timeout_ms, kind="cut")


def test_streams_answered_504_after_the_same_half_second_are_an_idle_cut() -> None:
    traces = [answered(f"stream {k}", 3 * k, 504, 504 + k % 3) for k in range(30)]
    [found] = findings_of(traces)
    assert found.name == "idle_cut"
    assert len(found.streams) == 30
    assert abs(found.data["silence_s"] - 0.504) <= 0.003
    assert found.describe().startswith("idle_cut: 30 streams ended HTTP 504 after the same 0.50")
    assert Finding.from_dict(found.to_dict()) == found


def test_a_lazy_timer_cuts_mid_body_after_the_same_silence_from_the_read_that_armed_it() -> None:
    # The silences from each stream's last byte differ (0.25 s to 0.5 s): the read that armed
    # the timer is the one they share.
    traces = [
        lazily_cut(f"stream {k}", 11 * k, 420 + 40 * k, 420 + 40 * k - 50 * (k % 6))
        for k in range(8)
    ]
    [found] = findings_of(traces)
    assert found.name == "idle_cut"
    assert len(found.streams) == 8
    assert abs(found.data["silence_s"] - 0.5) <= 0.001


def test_two_timeouts_are_two_findings() -> None:
    model = [
        make(f"model {k}", 7 * k, [10, 20], completed=False, end_ms=320, kind="truncated")
        for k in range(4)
    ]
    ingress = [answered(f"ingress {k}", 5 * k, 502, 500) for k in range(4)]
    found = findings_of([*model, *ingress])
    assert [f.name for f in found] == ["idle_cut", "idle_cut"]
    assert sorted(round(f.data["silence_s"], 2) for f in found) == [0.3, 0.5]


def test_healthy_and_unshaped_ends_are_no_idle_cut() -> None:
    healthy = [make(f"stream {k}", 3 * k, list(range(20, 400, 20))) for k in range(30)]
    assert findings_of(healthy) == []
    # Cut after silences of every length: a flaky network, not a timeout.
    flaky = [
        make(f"stream {k}", 0, [10, 20], completed=False, end_ms=20 + ms, kind="reset")
        for k, ms in enumerate([150, 400, 700, 1300, 2200, 260])
    ]
    assert "idle_cut" not in names(findings_of(flaky))
    # Two streams are not a shape; an HTTP 500 or 503 is the app's answer, not a hop's timeout.
    assert findings_of([answered(f"stream {k}", 0, 504, 500) for k in range(2)]) == []
    assert findings_of([answered(f"stream {k}", 0, 503, 500) for k in range(5)]) == []
    # The plugin's own client gave up (timeout): never a hop's.
    own = [make(f"s{k}", 0, [10], completed=False, end_ms=510, kind="timeout") for k in range(5)]
    assert findings_of(own) == []


def test_a_stall_the_plugin_put_on_the_model_hop_is_its_own_fault_at_that_hop() -> None:
    # A 0.6 s stall on the model's hop after chunk 2; nginx cut each stream 0.5 s into it.
    traces = [
        make(f"stream {k}", 9 * k, [10, 20], completed=False, end_ms=520, kind="truncated")
        for k in range(4)
    ]
    stall = FaultRecord("stall", {"after_chunks": 2, "seconds": 0.6}, [], on_ns=0, hop="model")
    for trace in traces:
        trace.faults = [stall]
    found = findings_of(traces)
    assert [f.name for f in found] == ["own_fault"] * 4
    assert {f.hop for f in found} == {"model"}


def test_the_hop_of_a_same_silence_cut_is_the_one_that_closed_first() -> None:
    traces = [answered(f"stream {k}", 3 * k, 504, 504) for k in range(5)]
    chain = {"model": [], "gateway": []}
    for trace in traces:
        trace.stack = StackStamps("ingress", dict(chain), ended={"gateway": "front"})
    [found] = at_hops(findings_of(traces), traces)
    assert found.describe().startswith("idle_cut at ingress: 5 streams ended HTTP 504")
    # Through a gateway that forwards no id, streams read at once are not paired: unknown.
    for trace in traces:
        trace.stack = StackStamps("ingress", note="not paired with the inner hops")
    [found] = at_hops(findings_of(traces), traces)
    assert found.describe().startswith("idle_cut at an unknown hop: 5 streams")
