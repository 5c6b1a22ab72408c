"""Tests that need the app's internals: slow readers and generation threads, with the app
served by a real uvicorn on a thread of this process."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from target_harness import InProcessTarget, collect, metric, wait_until

from pytest_streamguard.common.tls import tls_context
from target_app import TargetConfig

CANCEL_LIMIT_S = 3.0
"""How soon an ended stream's slot, engine request and ``generate()`` thread are gone: well
under the seconds the rest of its 2,000 tokens would take (about 6 s alone at the 3 ms gap of
docs/benchmarks.md)."""


def _open_raw_stream(url: str, body: bytes, receive_buffer: int) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    client.connect((host, int(port)))
    head = (
        f"POST /generate HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    client.sendall(head + body)
    return client


def test_slow_reader_is_ended_and_counted_with_bounded_buffering(
    inprocess_target: Callable[..., InProcessTarget],
) -> None:
    config = TargetConfig(send_timeout=0.5, max_backlog=32, heartbeat=0, max_concurrency=4)
    target = inprocess_target(config, send_buffer=4096)
    body = b'{"prompt": "baba", "max_new_tokens": 2000, "ignore_eos": true}'
    # A client that never reads, with a tiny receive window: the server's writes back up.
    reader = _open_raw_stream(target.url, body, receive_buffer=4096)
    try:
        with httpx.Client(base_url=target.url, timeout=5, verify=tls_context()) as observer:
            wait_until(
                lambda: (
                    metric(
                        observer,
                        "streamguard_target_streams_cancelled_total",
                        {"reason": "slow_reader"},
                    )
                    == 1
                ),
                30,
                "the slow reader to be cut off",
            )
            wait_until(
                lambda: (
                    target.state.active == 0
                    and target.state.engine is not None
                    and target.state.engine.in_flight() == 0
                ),
                CANCEL_LIMIT_S,
                "slot and engine request released",
            )
            # 2,000 tokens were asked for; the cut came long before they were all buffered.
            assert metric(observer, "streamguard_target_streams_completed_total") == 0
            events = collect(observer, "/generate", {"prompt": "baba", "max_new_tokens": 3})
            assert events[-1].kind == "done", "the server still serves others"
    finally:
        reader.close()


def test_disconnect_ends_the_generate_thread(
    inprocess_target: Callable[..., InProcessTarget],
) -> None:
    target = inprocess_target(TargetConfig(engine="generate", heartbeat=0))

    def generation_threads() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith("streamguard-generate-")]

    with httpx.Client(base_url=target.url, timeout=30, verify=tls_context()) as client:
        body = {"prompt": "baba", "max_new_tokens": 2000, "ignore_eos": True}
        with client.stream("POST", "/generate", json=body) as response:
            for line in response.iter_lines():
                if line.startswith("data:") and '"index":3' in line:
                    assert len(generation_threads()) == 1
                    break
        wait_until(
            lambda: not generation_threads(), CANCEL_LIMIT_S, "the generate() thread to exit"
        )
        assert target.state.active == 0


def test_the_tiny_model_runs_each_op_on_one_cpu_thread_and_the_flag_sets_another(
    tiny_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its ops take microseconds: torch's second thread only added hand-offs and spun on a core
    # the proxy and the client need. Another model keeps torch's own count unless told.
    import torch

    from target_app.loading import load_model

    monkeypatch.setenv("STREAMGUARD_CACHE", str(tiny_cache))
    before = torch.get_num_threads()
    try:
        for asked, threads in ((None, 1), (2, 2), (1, 1)):
            load_model(TargetConfig(device="cpu", cpu_threads=asked))
            assert torch.get_num_threads() == threads, asked
    finally:
        torch.set_num_threads(before)
