"""Clients that cost the target without being bad requests: oversized prompts while a stream
runs, and a slow reader the target has to end."""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Callable

import httpx
from target_harness import SseEvent, TargetProcess, iter_sse, metric, wait_until

OVERSIZED_PROMPTS = 16
PROMPT_WORDS = 500_000
"""A one-megabyte prompt of 500,000 words (tokens), that still fits the 1 MiB body limit, so it
reaches the prompt check."""
GAP_LIMIT_S = 0.2
"""Issue 12: a running stream's gaps while the oversized prompts are rejected."""
CLOSE_LIMIT_S = 1.0
"""Issue 12: an ended slow reader's socket is closed within this of ending it."""


def test_oversized_prompts_do_not_stall_a_running_stream(
    make_target: Callable[..., TargetProcess],
) -> None:
    target = make_target("--heartbeat", "0", "--max-concurrency", "4")
    flood_started = threading.Event()
    flood_done = threading.Event()
    events: list[SseEvent] = []
    marks: dict[str, int] = {}

    def stream() -> None:
        with httpx.Client(base_url=target.url, timeout=30) as client:
            body = {"prompt": "baba", "max_new_tokens": 2000, "ignore_eos": True}
            with client.stream("POST", "/generate", json=body) as response:
                assert response.status_code == 200
                for event in iter_sse(response):
                    events.append(event)
                    if len(events) == 5:
                        flood_started.set()
                    # A few more tokens after the flood, so its tail is inside the window.
                    if flood_done.is_set() and len(events) >= marks["done_at"] + 20:
                        return

    reader = threading.Thread(target=stream)
    reader.start()
    assert flood_started.wait(30), "the stream never started"
    prompt = "w " * PROMPT_WORDS
    replies: list[httpx.Response] = []

    def oversized() -> None:
        with httpx.Client(base_url=target.url, timeout=30) as client:
            replies.append(client.post("/generate", json={"prompt": prompt}))

    senders = [threading.Thread(target=oversized) for _ in range(OVERSIZED_PROMPTS)]
    flood_ns = time.perf_counter_ns()
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()
    marks["done_at"] = len(events)
    flood_done.set()
    reader.join(30)
    assert not reader.is_alive()
    assert [r.status_code for r in replies] == [400] * OVERSIZED_PROMPTS
    assert {r.json()["field"] for r in replies} == {"prompt"}
    # The gaps as the target wrote them (sent_ns, its own clock): what this busy test process
    # does to its reader thread does not count, only what the target's event loop did.
    sent = [e.data["sent_ns"] for e in events if e.kind == "data"]
    during = [b - a for a, b in itertools.pairwise(sent) if b >= flood_ns]
    assert len(during) >= 20
    assert max(during) / 1e9 < GAP_LIMIT_S, f"worst gap {max(during) / 1e9:.3f} s"


def _server_side_state(server_port: int, client_port: int) -> str | None:
    """The TCP state (``/proc/net/tcp`` hex code) of the target's end of a connection, or None
    once the kernel has no such socket."""
    with open("/proc/net/tcp", encoding="ascii") as table:
        for line in table.read().splitlines()[1:]:
            fields = line.split()
            local, remote = fields[1], fields[2]
            if (
                int(local.rsplit(":", 1)[1], 16) == server_port
                and int(remote.rsplit(":", 1)[1], 16) == client_port
            ):
                return fields[3]
    return None


TCP_ESTABLISHED = "01"


def test_ended_slow_reader_socket_is_closed_within_a_second(
    make_target: Callable[..., TargetProcess],
) -> None:
    target = make_target(
        "--heartbeat", "0", "--send-buffer", "4096", "--send-timeout", "0.5", "--max-backlog", "64"
    )
    host, port = target.url.removeprefix("http://").rsplit(":", 1)
    reader = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        reader.connect((host, int(port)))
        body = b'{"prompt": "baba", "max_new_tokens": 2000, "ignore_eos": true}'
        reader.sendall(
            b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        client_port = reader.getsockname()[1]
        assert _server_side_state(int(port), client_port) == TCP_ESTABLISHED
        with httpx.Client(base_url=target.url, timeout=5) as observer:
            # The reader never reads. The count comes when the target ends the stream, before
            # its at most 0.4 s attempt to send the error event and the close after it.
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
                "the slow reader to be ended",
            )
            ended = time.monotonic()
            wait_until(
                lambda: _server_side_state(int(port), client_port) != TCP_ESTABLISHED,
                CLOSE_LIMIT_S,
                "the target to close the slow reader's socket",
            )
            closed_after = time.monotonic() - ended
            assert closed_after < CLOSE_LIMIT_S
            assert metric(observer, "streamguard_target_active_streams") == 0
    finally:
        reader.close()
    assert "ERROR" not in target.stderr(), target.stderr()
