"""Clients that cost the target without being bad requests: oversized prompts while a stream
runs, and slow readers the target has to end (one that never reads, and ones that read, but
slower than their stream is written)."""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Callable

import httpx
from target_harness import SseEvent, TargetProcess, collect, iter_sse, metric, wait_until

from pytest_streamguard.common.tls import tls_context

OVERSIZED_PROMPTS = 16
PROMPT_WORDS = 500_000
"""A one-megabyte prompt of 500,000 words (tokens), that still fits the 1 MiB body limit, so it
reaches the prompt check."""
GAP_LIMIT_S = 0.5
"""A gap of a running stream that counts as a stall while the oversized prompts are rejected."""
STALLED_S_ALLOWED = 4.0
"""How long, in all, the stream may stall during the flood. The target guards its loop twice:
the prompt's characters are checked before anything tokenizes it, and the decode, check and
tokenization run in a worker thread. With both guards taken out, tokenizing the 16 prompts on
the loop (0.86 s of CPU each, measured on the project's machine: 13.8 s) stalled the stream
10.4 s in 2 gaps and 13.5 s in 4 in two runs, so a count of stalls cannot tell the two apart;
with either guard, work off the loop still competes for the machine's two cores, and with both
cores busy one or two gaps of 0.9 s were seen."""
CLOSE_LIMIT_S = 5.0
"""An ended slow reader's socket is gone within this of the end. The target's schedule is
about 0.6 s (0.4 s for the error event, then 0.2 s before the abort); without the abort the
socket stays as long as the reader does not read, which here is until the test ends."""


def test_oversized_prompts_do_not_stall_a_running_stream(
    make_target: Callable[..., TargetProcess],
) -> None:
    target = make_target("--heartbeat", "0", "--max-concurrency", "4")
    flood_started = threading.Event()
    flood_done = threading.Event()
    events: list[SseEvent] = []
    marks: dict[str, int] = {}

    def stream() -> None:
        with httpx.Client(base_url=target.url, timeout=30, verify=tls_context()) as client:
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
        with httpx.Client(base_url=target.url, timeout=30, verify=tls_context()) as client:
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
    stalls = [gap / 1e9 for gap in during if gap / 1e9 >= GAP_LIMIT_S]
    assert sum(stalls) <= STALLED_S_ALLOWED, f"{len(stalls)} gaps over {GAP_LIMIT_S} s: {stalls}"


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


def test_ended_slow_reader_socket_is_closed_by_the_target(
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
        with httpx.Client(base_url=target.url, timeout=5, verify=tls_context()) as observer:
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


TCP_FIN_WAIT1 = "04"
SLOW_READERS = 6
READ_BYTES = 256
READ_EVERY_S = 0.25
"""1 KB/s: the tiny model writes a 2,000-token stream at about 15 KB/s (250 tokens/s, 60-byte
events), and a 4 KiB receive window takes only a few hundred milliseconds of it."""
LONG_BODY = b'{"prompt": "baba", "max_new_tokens": 2000, "ignore_eos": true}'


class _SlowReader(threading.Thread):
    """A raw HTTP client that asks for a long stream and reads ``READ_BYTES`` at a time every
    ``READ_EVERY_S`` until the connection ends, keeping what it read."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.server_port = int(port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # Before connecting, so the window this client advertises stays small.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.settimeout(30)
        self.sock.connect((host, int(port)))
        self.client_port = self.sock.getsockname()[1]
        self.sock.sendall(
            b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(LONG_BODY), LONG_BODY)
        )
        self.received = bytearray()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                data = self.sock.recv(READ_BYTES)
            except OSError:
                return
            if not data:
                return
            self.received += data
            self.stop.wait(READ_EVERY_S)

    def connection_gone_on_the_server(self) -> bool:
        """The target's end of this connection is neither open nor closing with data."""
        state = _server_side_state(self.server_port, self.client_port)
        return state not in (TCP_ESTABLISHED, TCP_FIN_WAIT1)

    def close(self) -> None:
        """Stop reading and close the socket."""
        self.stop.set()
        self.join(5)
        self.sock.close()


def test_readers_slower_than_their_stream_are_ended_and_normal_streams_complete(
    make_target: Callable[..., TargetProcess],
) -> None:
    # The kernel's own send buffer (no --send-buffer) and the default backlog: every write
    # returns at once, since a 2,000-token stream (about 130 KB) fits in the buffers the
    # kernel grows on loopback. Only what the clients take tells the slow ones apart.
    target = make_target("--heartbeat", "0", "--send-timeout", "1")
    with httpx.Client(base_url=target.url, timeout=30, verify=tls_context()) as observer:
        completed = metric(observer, "streamguard_target_streams_completed_total")
        readers = [_SlowReader(target.url) for _ in range(SLOW_READERS)]
        try:
            for reader in readers:
                reader.start()
            # Normal clients of the same target, read at their own pace meanwhile.
            normal = [
                collect(observer, "/generate", {"prompt": "keke", "max_new_tokens": 64})
                for _ in range(2)
            ]
            assert [events[-1].kind for events in normal] == ["done", "done"]
            assert all(len([e for e in ev if e.kind == "data"]) == 64 for ev in normal)
            wait_until(
                lambda: (
                    metric(
                        observer,
                        "streamguard_target_streams_cancelled_total",
                        {"reason": "slow_reader"},
                    )
                    == SLOW_READERS
                ),
                60,
                f"the target to end the {SLOW_READERS} slow readers",
            )
            # Their generation stops with them: 2,000 tokens each would take the engine
            # seconds more (about 6 s for one stream alone at the 3 ms gap of benchmarks.md).
            wait_until(
                lambda: (
                    metric(observer, "streamguard_target_engine_requests") == 0
                    and metric(observer, "streamguard_target_active_streams") == 0
                ),
                CLOSE_LIMIT_S,
                "the slow readers' generation to be cancelled",
            )
            assert metric(observer, "streamguard_target_streams_completed_total") == completed + 2
            for reader in readers:
                # Aborted, not left in FIN-WAIT-1 feeding the reader at 1 KB/s (at that pace
                # what was written before the end would keep it busy for tens of seconds).
                wait_until(
                    reader.connection_gone_on_the_server,
                    CLOSE_LIMIT_S,
                    "the slow reader's connection to be gone",
                )
                assert b"event: done" not in reader.received
        finally:
            for reader in readers:
                reader.close()
    assert "ERROR" not in target.stderr(), target.stderr()
