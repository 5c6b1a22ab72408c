"""Both engines over real sockets: SSE format, exact counts, OpenAI formats, faults,
heartbeats, disconnects and admission."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from target_harness import TEST_FLAGS, TargetProcess, collect, iter_sse, metric, wait_until

from pytest_streamguard.common.tls import tls_context

CANCEL_LIMIT_S = 3.0
"""How soon a cancelled stream's slot, engine request and thread are gone: well under what the
work they were cancelled from would still take (seconds of generation, a 30 s cold start)."""


@pytest.fixture(scope="module", params=["batch", "generate"])
def target(
    request: pytest.FixtureRequest, make_target: Callable[..., TargetProcess]
) -> TargetProcess:
    """The target with each engine, fault knobs on, 0.2 s heartbeats, 4 stream slots."""
    return make_target("--engine", request.param, *TEST_FLAGS)


@pytest.fixture
def client(target: TargetProcess) -> Iterator[httpx.Client]:
    """An HTTP client for the target; checks after the test that no stream slot is left held."""
    with httpx.Client(base_url=target.url, timeout=30, verify=tls_context()) as http:
        yield http
        wait_until(
            lambda: metric(http, "streamguard_target_active_streams") == 0,
            5,
            "every stream slot to be released after the test",
        )


def data_events(events: list) -> list:  # type: ignore[type-arg]
    """Only the token events."""
    return [e for e in events if e.kind == "data"]


def test_stream_has_one_event_per_token_with_index_text_and_send_time(
    client: httpx.Client,
) -> None:
    before = time.perf_counter_ns()
    with client.stream("POST", "/generate", json={"prompt": "baba", "max_new_tokens": 64}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["x-accel-buffering"] == "no"
        events = list(iter_sse(r))
    tokens = data_events(events)
    assert [e.data["index"] for e in tokens] == list(range(64))
    assert all(e.data["text"].strip() for e in tokens), "every tiny-model token is a visible word"
    sent = [e.data["sent_ns"] for e in tokens]
    assert sent == sorted(sent)
    # Same machine, same monotonic clock: stamped after the request and before receipt.
    assert all(before < s <= e.received_ns for s, e in zip(sent, tokens, strict=True))
    assert events[-1].kind == "done"
    assert events[-1].data["tokens"] == 64
    assert events[-1].data["finish_reason"] == "length"


def test_generation_is_deterministic(client: httpx.Client) -> None:
    body = {"prompt": "kobe lemu", "max_new_tokens": 12}
    first = "".join(e.data["text"] for e in data_events(collect(client, "/generate", body)))
    second = "".join(e.data["text"] for e in data_events(collect(client, "/generate", body)))
    assert first == second
    assert len(first.split()) == 12


def test_ignore_eos_gives_exact_count(client: httpx.Client) -> None:
    events = collect(
        client, "/generate", {"prompt": "baba", "max_new_tokens": 7, "ignore_eos": True}
    )
    assert len(data_events(events)) == 7
    assert events[-1].data["tokens"] == 7


def test_completions_stream_in_openai_format(client: httpx.Client) -> None:
    events = collect(
        client, "/v1/completions", {"prompt": "baba", "max_tokens": 5, "stream": True, "model": "m"}
    )
    assert events[-1].data == "[DONE]"
    chunks = [e.data for e in data_events(events[:-1])]  # heartbeats may come in between
    assert all(c["object"] == "text_completion" and c["model"] == "m" for c in chunks)
    texts = [c["choices"][0]["text"] for c in chunks if c["choices"][0]["finish_reason"] is None]
    assert len(texts) == 5
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_completions_without_stream_return_json(client: httpx.Client) -> None:
    reply = client.post("/v1/completions", json={"prompt": "baba", "max_tokens": 6})
    assert reply.status_code == 200
    body = reply.json()
    assert body["object"] == "text_completion"
    assert len(body["choices"][0]["text"].split()) == 6
    assert body["usage"]["completion_tokens"] == 6


def test_chat_stream_and_json(client: httpx.Client) -> None:
    messages = [{"role": "user", "content": "baba keke"}]
    events = collect(
        client, "/v1/chat/completions", {"messages": messages, "max_tokens": 4, "stream": True}
    )
    assert events[-1].data == "[DONE]"
    chunks = [e.data for e in data_events(events[:-1])]  # heartbeats may come in between
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    content = [c["choices"][0]["delta"].get("content") for c in chunks[1:-1]]
    assert len(content) == 4
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    reply = client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 4})
    assert reply.status_code == 200
    message = reply.json()["choices"][0]["message"]
    assert message["role"] == "assistant"
    assert message["content"] == "".join(content)


def test_stall_knob_sends_heartbeats_and_still_completes(client: httpx.Client) -> None:
    body = {"prompt": "baba", "max_new_tokens": 4, "fault": {"stall_after": 1, "stall_s": 1.0}}
    events = collect(client, "/generate", body)
    kinds = [e.kind if e.kind != "data" else e.data["index"] for e in events]
    stall = kinds[kinds.index(1) + 1 : kinds.index(2)]
    # 1 s of silence with a 0.2 s heartbeat: ideally 4-5 pings; at least 2 on a busy machine.
    assert stall.count("comment") >= 2, kinds
    assert all(e.data == "ping" for e in events if e.kind == "comment")
    assert events[-1].kind == "done"
    assert events[-1].data["tokens"] == 4


def test_cold_start_knob_delays_the_first_token(client: httpx.Client) -> None:
    start = time.perf_counter_ns()
    events = collect(
        client, "/generate", {"prompt": "baba", "max_new_tokens": 2, "fault": {"cold_start_s": 0.6}}
    )
    first = data_events(events)[0]
    assert (first.received_ns - start) / 1e9 >= 0.55  # 0.6 s knob, 50 ms clock tolerance
    assert events[0].kind == "comment", "heartbeats keep the connection alive during the delay"


def test_raise_after_ends_the_stream_with_an_error_event(client: httpx.Client) -> None:
    failed_before = metric(client, "streamguard_target_streams_failed_total")
    events = collect(
        client, "/generate", {"prompt": "baba", "max_new_tokens": 20, "fault": {"raise_after": 3}}
    )
    assert [e.data["index"] for e in data_events(events)] == [0, 1, 2]
    assert events[-1].kind == "error"
    assert "raise_after" in events[-1].data["error"]
    assert metric(client, "streamguard_target_streams_failed_total") == failed_before + 1


def test_accel_header_knob_drops_the_header(client: httpx.Client) -> None:
    body = {"prompt": "baba", "max_new_tokens": 2, "fault": {"accel_header": False}}
    with client.stream("POST", "/generate", json=body) as r:
        assert "x-accel-buffering" not in r.headers
        assert list(iter_sse(r))[-1].kind == "done"


def test_pad_bytes_knob_adds_an_ignored_field_to_every_token_event(client: httpx.Client) -> None:
    plain = {"prompt": "baba", "max_new_tokens": 4}
    padded = {**plain, "fault": {"pad_bytes": 1000}}
    raw = client.post("/generate", json=padded).content
    assert raw.count(b"pad: " + b"x" * 1000 + b"\n") == 4
    texts = [
        [e.data["text"] for e in data_events(collect(client, "/generate", body))]
        for body in (plain, padded)
    ]
    assert texts[0] == texts[1]
    assert len(texts[1]) == 4


def test_disconnect_mid_stream_frees_the_slot_and_stops_generation(
    client: httpx.Client, target: TargetProcess
) -> None:
    cancelled_before = metric(
        client, "streamguard_target_streams_cancelled_total", {"reason": "disconnect"}
    )
    # 2,000 tokens: the longest admitted stream, cut after five.
    with client.stream(
        "POST", "/generate", json={"prompt": "baba", "max_new_tokens": 2000, "ignore_eos": True}
    ) as r:
        for event in iter_sse(r):
            if event.kind == "data" and event.data["index"] == 4:
                break
    with httpx.Client(base_url=target.url, timeout=5, verify=tls_context()) as observer:
        # Issue 12's figure is 1 s (a benchmark matter). What this bound tells apart: stopped
        # at the disconnect, from generating the other 1,995 tokens (about 6 s for one stream
        # of this model at its 3 ms gap in docs/benchmarks.md, longer on a busy machine).
        wait_until(
            lambda: (
                metric(observer, "streamguard_target_active_streams") == 0
                and metric(observer, "streamguard_target_engine_requests") == 0
                and metric(observer, "streamguard_target_generation_threads") == 0
            ),
            CANCEL_LIMIT_S,
            "active streams, engine requests and generation threads back to 0",
        )
        assert (
            metric(observer, "streamguard_target_streams_cancelled_total", {"reason": "disconnect"})
            == cancelled_before + 1
        )


def test_admission_beyond_max_concurrency_is_503_with_retry_after(
    client: httpx.Client, target: TargetProcess
) -> None:
    hold = {"prompt": "baba", "max_new_tokens": 3, "fault": {"cold_start_s": 30}}
    clients = [
        httpx.Client(base_url=target.url, timeout=30, verify=tls_context()) for _ in range(4)
    ]
    streams = []
    try:
        for c in clients:
            stream = c.stream("POST", "/generate", json=hold)
            response = stream.__enter__()
            assert response.status_code == 200
            streams.append(stream)
        wait_until(
            lambda: metric(client, "streamguard_target_active_streams") == 4, 5, "4 active streams"
        )
        busy = client.post("/generate", json={"prompt": "baba", "max_new_tokens": 2})
        assert busy.status_code == 503
        assert busy.headers["retry-after"] == "1"
        assert "4 concurrent streams" in busy.json()["accepted"]
    finally:
        for stream in streams:
            stream.__exit__(None, None, None)
        for c in clients:
            c.close()
    # Released at the disconnect, not held for the 30 s cold start.
    wait_until(
        lambda: metric(client, "streamguard_target_active_streams") == 0,
        CANCEL_LIMIT_S,
        "slots released",
    )
    assert data_events(collect(client, "/generate", {"prompt": "baba", "max_new_tokens": 2}))
