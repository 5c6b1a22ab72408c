"""Chunk toxics count a compressed body's events in a decoded copy and forward its bytes as
they came (issue 45): ``chunk_cut`` after 3 leaves exactly 3 token events at the client,
whether each event is its own compressed flush or all share one deflate block."""

from __future__ import annotations

import socket
import zlib
from collections.abc import Callable

import httpx
import pytest
from toxiproxy_helpers import connect, recv_all, recv_exactly

from pytest_streamguard.common import codings
from pytest_streamguard.toxiproxy_server.events import ChunkCounter

TOKENS = 8
EVENTS = [
    b": ping\n\n",
    *(
        b'data: {"object":"chat.completion.chunk","choices":[{"delta":{"content":"t%d"}}]}\n\n' % i
        for i in range(TOKENS)
    ),
    b"data: [DONE]\n\n",
]
WBITS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def _answer(coding: str, per_event: bool) -> bytes:
    """A chunked SSE answer coded in ``coding``: one sync-flushed HTTP chunk per event (as
    nginx and Starlette's GZipMiddleware write a stream), or every event in one chunk."""
    packer = zlib.compressobj(wbits=WBITS.get(coding, WBITS["gzip"]))
    groups = [[e] for e in EVENTS] if per_event else [EVENTS]
    pieces = [packer.compress(b"".join(g)) + packer.flush(zlib.Z_SYNC_FLUSH) for g in groups]
    pieces.append(packer.flush())
    head = (
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        f"content-encoding: {coding}\r\ntransfer-encoding: chunked\r\n\r\n"
    ).encode()
    return head + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def _tokens(received: bytes, coding: str) -> int:
    """The token events a client decodes from the bytes it received (a cut body included)."""
    body = received.split(b"\r\n\r\n", 1)[1]
    coded = b""
    while body:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line, 16)
        coded, body = coded + body[:size], body[size + 2 :]
    plain = zlib.decompressobj(WBITS.get(coding, WBITS["gzip"])).decompress(coded)
    return sum(b'"content"' in e for e in plain.split(b"\n\n")[:-1])


def _served(answer: bytes) -> Callable[[socket.socket], None]:
    def handler(conn: socket.socket) -> None:
        conn.recv(1024)
        conn.sendall(answer)
        conn.recv(8)

    return handler


@pytest.mark.parametrize("per_event", [True, False], ids=["flush-per-event", "one-block"])
@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_a_chunk_cut_through_a_coded_body_leaves_exactly_n_tokens(
    api: httpx.Client, proxy: Callable[..., str], coding: str, per_event: bool
) -> None:
    answer = _answer(coding, per_event)
    listen = proxy("coded", _served(answer))
    toxic = {"type": "chunk_cut", "attributes": {"after_chunks": 3}}
    assert api.post("/proxies/coded/toxics", json=toxic).status_code == 200
    with connect(listen) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nAccept-Encoding: gzip, deflate\r\n\r\n")
        received = recv_all(sock)
    # The original bytes, untouched, up to the cut.
    assert answer.startswith(received)
    assert len(received) < len(answer)
    assert _tokens(received, coding) == 3
    assert _tokens(answer, coding) == TOKENS


def test_a_coding_not_installed_here_is_forwarded_whole(
    api: httpx.Client, proxy: Callable[..., str]
) -> None:
    answer = _answer("gzip", True).replace(b"encoding: gzip", b"encoding: x-unknown")
    listen = proxy("unknown", _served(answer))
    toxic = {"type": "chunk_cut", "attributes": {"after_chunks": 3}}
    assert api.post("/proxies/unknown/toxics", json=toxic).status_code == 200
    with connect(listen) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
        assert recv_exactly(sock, len(answer)) == answer


@pytest.mark.parametrize("per_event", [True, False], ids=["flush-per-event", "one-block"])
def test_a_decoder_that_cannot_be_copied_finds_the_same_boundary(
    monkeypatch: pytest.MonkeyPatch, per_event: bool
) -> None:
    """br and zstd decoders cannot be copied, so their bodies are fed a byte at a time; the
    boundary must be the one the copies of a zlib decoder find (gzip standing in for them)."""
    monkeypatch.setattr(codings, "DECODABLE", codings.DECODABLE | {"x-stepped"})
    monkeypatch.setitem(
        codings._OTHERS, "x-stepped", lambda: zlib.decompressobj(WBITS["gzip"]).decompress
    )
    answer = _answer("gzip", per_event)
    stepped = answer.replace(b"encoding: gzip", b"encoding: x-stepped")
    copied, fed = ChunkCounter(3), ChunkCounter(3)
    at = copied.boundary(answer)
    assert at is not None
    assert fed.boundary(stepped) == at + len(b"x-stepped") - len(b"gzip")
    assert _tokens(answer[:at], "gzip") == 3
