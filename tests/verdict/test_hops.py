"""Which hop a finding was seen at: ``buffered`` is placed by the inner hops' stamps (the first
hop from the entry inwards whose answer came spread over time names the service in front of
it), every other finding, and a stream that could not be paired, stays at the entry."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_streamguard.stream.trace import StackStamps
from pytest_streamguard.verdict.findings import Finding
from pytest_streamguard.verdict.hops import SPREAD_S, at_hops, buffered_at

MS = 1_000_000


def spread(start_ms: int, count: int, every_ms: int) -> list[tuple[int, int]]:
    return [((start_ms + k * every_ms) * MS, 100) for k in range(count)]


def burst(at_ms: int, count: int) -> list[tuple[int, int]]:
    return [(at_ms * MS, 100)] * count


def test_a_spread_model_hop_names_the_gateway() -> None:
    stamps = StackStamps("gateway", {"model": spread(0, 8, 50)})
    assert buffered_at(stamps) == "gateway"


def test_a_burst_at_every_hop_names_the_model() -> None:
    assert buffered_at(StackStamps("gateway", {"model": burst(400, 8)})) == "model"


def test_a_chain_is_walked_from_the_entry_inwards() -> None:
    # model -> router -> gateway: the router received the model's answer spread over time,
    # and the gateway received the router's in a burst: the router held it.
    stamps = StackStamps("gateway", {"model": spread(0, 8, 50), "router": burst(400, 8)})
    assert buffered_at(stamps) == "router"
    assert SPREAD_S <= 7 * 0.050


def test_unpaired_and_other_findings_stay_at_the_entry() -> None:
    @dataclass
    class Seen:
        name: str
        stack: StackStamps | None

    unpaired = Seen("stream 1", StackStamps("gateway", note="not paired with the inner hops"))
    paired = Seen("stream 2", StackStamps("gateway", {"model": burst(400, 8)}))
    alone = Seen("stream 3", None)
    found = [
        Finding("buffered", "held", ("stream 1",)),
        Finding("buffered", "held", ("stream 2",)),
        Finding("held_open", "open", ("stream 2",)),
        Finding("buffered", "held", ("stream 3",)),
    ]
    placed = at_hops(found, [unpaired, paired, alone])
    assert [f.hop for f in placed] == ["gateway", "model", "gateway", None]
    assert placed[1].describe() == "buffered at model: held"
    assert Finding.from_dict(placed[1].to_dict()) == placed[1]
    assert "hop" not in placed[3].to_dict()
