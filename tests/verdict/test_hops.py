"""Which hop a finding was seen at: ``buffered`` is placed by the inner hops' body stamps (the
first hop from the entry inwards whose answer came spread over time names the service in front
of it), ``idle_cut`` by which side ended each hop's connection, ``own_fault`` by its fault's
hop (``blocked_loop`` by its hop's own probe: tests/verdict/test_finding_patterns.py); every
other finding, and a stream that could not be paired, is at an unknown hop, never the entry by
default."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_streamguard.stream.trace import StackStamps
from pytest_streamguard.verdict.findings import Finding
from pytest_streamguard.verdict.hops import SPREAD_S, UNKNOWN, at_hops, buffered_at, ended_at

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


@dataclass
class Seen:
    name: str
    stack: StackStamps | None


def test_unpaired_and_unplaced_findings_are_at_an_unknown_hop() -> None:
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
    assert [f.hop for f in placed] == [UNKNOWN, "model", UNKNOWN, None]
    assert placed[1].describe() == "buffered at model: held"
    assert placed[0].describe() == "buffered at an unknown hop: held"
    assert Finding.from_dict(placed[1].to_dict()) == placed[1]
    assert "hop" not in placed[3].to_dict()


def test_a_stack_of_one_service_places_every_finding_there() -> None:
    only = Seen("stream 1", StackStamps("app"))
    placed = at_hops([Finding("held_open", "open", ("stream 1",))], [only])
    assert placed[0].hop == "app"


def test_streams_that_place_a_finding_apart_leave_it_unknown() -> None:
    at_model = Seen("stream 1", StackStamps("gateway", {"model": burst(400, 8)}))
    at_gateway = Seen("stream 2", StackStamps("gateway", {"model": spread(0, 8, 50)}))
    found = [Finding("buffered", "held", ("stream 1", "stream 2"))]
    assert at_hops(found, [at_model, at_gateway])[0].hop == UNKNOWN


def test_an_answer_sent_in_one_piece_after_its_head_is_the_models() -> None:
    # The tap stamps body bytes only: a model that sent its head at once and its whole body
    # 0.4 s later shows one body read, so it is the model that held the answer.
    stamps = StackStamps("gateway", {"model": [(400 * MS, 900)]})
    assert buffered_at(stamps) == "model"
    # A hop that passed no body byte at all places nothing.
    assert buffered_at(StackStamps("gateway", {"model": []})) == UNKNOWN


def test_a_cut_is_at_the_service_that_closed_first() -> None:
    chain = {"model": spread(0, 3, 50), "gateway": spread(0, 3, 50)}
    # nginx cut: it closed the gateway's connection first, the gateway then the model's.
    front = {"model": "front", "gateway": "front"}
    assert ended_at(StackStamps("ingress", chain, ended=front)) == "ingress"
    # The gateway cut: the model's connection was closed by the gateway, and nginx saw the
    # gateway close.
    assert (
        ended_at(StackStamps("ingress", chain, ended={"model": "front", "gateway": "upstream"}))
        == "gateway"
    )
    # The model ended it, and each hop passed the end on.
    assert (
        ended_at(StackStamps("ingress", chain, ended={"model": "upstream", "gateway": "upstream"}))
        == "model"
    )
    # No end seen on the entry's hop: the entry is the one that ended the client's stream.
    assert ended_at(StackStamps("ingress", chain)) == "ingress"


def test_own_words_and_own_faults_keep_their_hop() -> None:
    stamps = Seen("stream 1", StackStamps("gateway", note="not paired with the inner hops"))
    found = [
        Finding("own_fault", "the gap is the plugin's stall at model", ("stream 1",), hop="model"),
        Finding("own_fault", "the gap is the plugin's own cut", ("stream 1",)),
        Finding("server_error", "_queue.Empty", ("stream 1",), hop="model"),
        Finding("blocked_loop", "stalled", ("stream 1",), cause="the event loop was blocked"),
        Finding("blocked_loop", "stalled", ("stream 1",)),
    ]
    hops = [f.hop for f in at_hops(found, [stamps])]
    assert hops == ["model", "gateway", "model", UNKNOWN, UNKNOWN]


def test_a_first_event_with_the_head_does_not_spread_an_answer_sent_in_one_piece() -> None:
    # An OpenAI-style chat stream: a role-only event (73 bytes) with the head, the whole
    # answer (1,263 bytes) 0.4 s later: the model sent it in one piece.
    one_piece = [(0, 73), (400 * MS, 1263)]
    assert buffered_at(StackStamps("gateway", {"model": one_piece})) == "model"
    # A trailing end event long after the answer does not spread it either.
    assert buffered_at(StackStamps("gateway", {"model": [(0, 1263), (300 * MS, 14)]})) == "model"
    # Two tokens, a 1 s stall in generation, then the rest at once: the model's burst.
    stalled = [(0, 428), (20 * MS, 210), (1020 * MS, 1050)]
    assert buffered_at(StackStamps("gateway", {"model": stalled})) == "model"
    # Tokens that came over time did spread it: the gateway held them.
    assert buffered_at(StackStamps("gateway", {"model": [(0, 73), *spread(400, 8, 50)]})) == (
        "gateway"
    )
