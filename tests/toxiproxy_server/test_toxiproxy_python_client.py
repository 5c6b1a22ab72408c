"""toxiproxy-python 0.1.1, unchanged, drives every feature it has against the embedded server.

The client keeps host and port in class attributes; the fixture restores them. Its known
bugs (reference §4.4) are asserted as they really behave, not worked around.
"""

from __future__ import annotations

import asyncio
import random
import socket
import time
from collections.abc import Callable, Iterator

import pytest
from toxiproxy.api import APIConsumer
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists
from toxiproxy_helpers import ServerProcess, Upstream, connect, recv_all, recv_exactly

from pytest_streamguard.toxiproxy_server.channels import EOF, Channel, Item
from pytest_streamguard.toxiproxy_server.stages import ChunkStallStage, ToxicState
from pytest_streamguard.toxiproxy_server.toxics import TOXIC_TYPES, ProxyToxic
from toxiproxy import Toxiproxy


@pytest.fixture
def client(server: ServerProcess) -> Iterator[Toxiproxy]:
    """A client bound to the test server; class attributes restored and proxies removed."""
    saved = (APIConsumer.host, APIConsumer.port)
    toxiproxy = Toxiproxy()
    toxiproxy.update_api_consumer("127.0.0.1", server.port)
    try:
        yield toxiproxy
        toxiproxy.destroy_all()
    finally:
        APIConsumer.host, APIConsumer.port = saved


def test_version_running_and_reset(client: Toxiproxy) -> None:
    assert client.running() is True
    assert client.version() == b'{"version": "2.12.0"}\n'
    assert client.reset() is True


def test_create_list_get_destroy(client: Toxiproxy, upstream: Callable[..., Upstream]) -> None:
    target = upstream()
    proxy = client.create(upstream=target.address, name="svc")
    assert proxy.name == "svc"
    assert proxy.enabled is True
    assert proxy.listen.startswith("127.0.0.1:")
    assert not proxy.listen.endswith(":0")
    assert set(client.proxies()) == {"svc"}
    assert client.get_proxy("svc").listen == proxy.listen
    assert client.get_proxy("missing") is None
    with pytest.raises(ProxyExists):
        client.create(upstream=target.address, name="svc")
    # destroy() with a name string is a no-op in 0.1.1; only a Proxy object works.
    assert client.destroy("svc") is False
    assert client.destroy(proxy) is True
    assert client.proxies() == {}
    with pytest.raises(NotFound):
        proxy.destroy()


def test_populate_creates_only_new_proxies(
    client: Toxiproxy, upstream: Callable[..., Upstream]
) -> None:
    target = upstream()
    spec = [{"name": "pop", "upstream": target.address, "listen": "127.0.0.1:0"}]
    created = client.populate(spec)
    assert [p.name for p in created] == ["pop"]
    first_listen = created[0].listen
    # 0.1.1 compares listen strings unresolved: "127.0.0.1:0" never equals the bound port,
    # so a second populate deletes and recreates the proxy (on a new port).
    again = client.populate(spec)
    assert [p.name for p in again] == ["pop"]
    assert again[0].listen != first_listen
    exact = [{"name": "pop", "upstream": target.address, "listen": again[0].listen}]
    assert client.populate(exact) == []


def test_enable_disable_and_down(client: Toxiproxy, upstream: Callable[..., Upstream]) -> None:
    proxy = client.create(upstream=upstream().address, name="flaky")
    proxy.disable()
    assert client.get_proxy("flaky").enabled is False
    with pytest.raises(ConnectionRefusedError):
        connect(proxy.listen)
    proxy.enable()
    assert client.get_proxy("flaky").enabled is True
    with proxy.down():
        assert client.get_proxy("flaky").enabled is False
    with connect(proxy.listen) as sock:
        sock.sendall(b"up")
        assert recv_exactly(sock, 2) == b"up"


@pytest.mark.parametrize(
    ("toxic_type", "attributes"),
    [
        ("latency", {"latency": 50, "jitter": 5}),
        ("bandwidth", {"rate": 100}),
        ("slow_close", {"delay": 10}),
        ("timeout", {"timeout": 100}),
        ("reset_peer", {"timeout": 10}),
        ("slicer", {"average_size": 10, "size_variation": 2, "delay": 10}),
        ("limit_data", {"bytes": 100}),
        ("noop", {}),
        # The embedded server's own chunk toxics list and go like Toxiproxy's.
        ("chunk_stall", {"after_chunks": 3, "duration": 100, "aimed": 0}),
        ("chunk_cut", {"after_chunks": 3, "aimed": 1}),
        ("chunk_reset", {"after_chunks": 2, "aimed": 0}),
    ],
)
def test_add_list_destroy_each_toxic(
    client: Toxiproxy,
    upstream: Callable[..., Upstream],
    toxic_type: str,
    attributes: dict[str, int],
) -> None:
    proxy = client.create(upstream=upstream().address, name="tox")
    assert proxy.add_toxic(type=toxic_type, attributes=attributes, toxicity=0.5) is None
    toxics = proxy.toxics()
    name = f"{toxic_type}_downstream"
    assert set(toxics) == {name}
    toxic = proxy.get_toxic(name)
    assert (toxic.type, toxic.stream, toxic.toxicity) == (toxic_type, "downstream", 0.5)
    assert toxic.attributes == attributes
    proxy.add_toxic(type=toxic_type, stream="upstream", attributes=attributes)
    assert set(proxy.toxics()) == {name, f"{toxic_type}_upstream"}
    assert proxy.destroy_toxic(name) is True
    assert set(proxy.toxics()) == {f"{toxic_type}_upstream"}


def test_client_exceptions(client: Toxiproxy, upstream: Callable[..., Upstream]) -> None:
    proxy = client.create(upstream=upstream().address, name="errs")
    with pytest.raises(InvalidToxic):
        proxy.add_toxic(type="explode")
    with pytest.raises(InvalidToxic):
        proxy.add_toxic(type="latency", stream="sideways")
    proxy.add_toxic(type="latency", attributes={"latency": 1})
    # A toxic-name conflict is a 409, which 0.1.1 reports as ProxyExists.
    with pytest.raises(ProxyExists):
        proxy.add_toxic(type="latency", attributes={"latency": 1})
    with pytest.raises(NotFound):
        proxy.destroy_toxic("nope")


def test_client_toxic_cuts_the_stream(client: Toxiproxy, upstream: Callable[..., Upstream]) -> None:
    target = upstream(lambda conn: conn.sendall(conn.recv(8) and b"t" * 1000) or conn.recv(8))
    proxy = client.create(upstream=target.address, name="cut")
    proxy.add_toxic(type="limit_data", attributes={"bytes": 300})
    with connect(proxy.listen) as sock:
        sock.sendall(b"go")
        assert recv_all(sock) == b"t" * 300
    assert client.reset() is True
    assert proxy.toxics() == {}


def _sse_response(conn: socket.socket) -> None:
    """An HTTP/1.1 chunked SSE answer: a comment, a role-only delta, six tokens, [DONE]."""
    conn.recv(1024)
    conn.sendall(HEAD)
    for event in EVENTS:
        conn.sendall(b"%x\r\n%s\r\n" % (len(event), event))
    conn.sendall(b"0\r\n\r\n")
    conn.recv(8)


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
EVENTS = [
    b": ping\n\n",
    b'data: {"object":"chat.completion.chunk","choices":[{"delta":{"role":"assistant"}}]}\n\n',
    *(
        b'data: {"object":"chat.completion.chunk","choices":[{"delta":{"content":"t%d"}}]}\n\n' % i
        for i in range(6)
    ),
    b"data: [DONE]\n\n",
]


def _through(index: int) -> bytes:
    """The answer's bytes up to and with EVENTS[index] and its HTTP chunk's CRLF."""
    return HEAD + b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in EVENTS[: index + 1])


def test_chunk_cut_ends_the_connection_right_after_the_nth_token_event(
    client: Toxiproxy, upstream: Callable[..., Upstream]
) -> None:
    proxy = client.create(upstream=upstream(_sse_response).address, name="chunks")
    proxy.add_toxic(type="chunk_cut", attributes={"after_chunks": 3})
    with connect(proxy.listen) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
        # The comment and the role-only delta are not chunks: the third token is EVENTS[4].
        assert recv_all(sock) == _through(4)


def test_an_aimed_chunk_cut_acts_only_on_requests_that_name_it(
    client: Toxiproxy, upstream: Callable[..., Upstream]
) -> None:
    proxy = client.create(upstream=upstream(_sse_response).address, name="chunks")
    proxy.add_toxic(name="aimed_cut", type="chunk_cut", attributes={"after_chunks": 3, "aimed": 1})
    whole = _through(len(EVENTS) - 1) + b"0\r\n\r\n"
    # Named among others, in any case of the header's name: cut right after the third token.
    with connect(proxy.listen) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nX-Streamguard-Aim: other, aimed_cut\r\n\r\n")
        assert recv_all(sock) == _through(4)
    untouched = [
        b"GET / HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1\r\nx-streamguard-aim: other\r\n\r\n",
        # The header's words inside a request body are not a header.
        b"POST / HTTP/1.1\r\ncontent-length: 32\r\n\r\nx-streamguard-aim: aimed_cut\r\n\r\n",
    ]
    for request in untouched:
        with connect(proxy.listen) as sock:
            sock.sendall(request)
            assert recv_exactly(sock, len(whole)) == whole, request


def _read_into(sock: socket.socket, got: list[bytes]) -> None:
    while chunk := sock.recv(65536):
        got.append(chunk)


def test_chunk_reset_resets_right_after_the_nth_token_event(
    client: Toxiproxy, upstream: Callable[..., Upstream]
) -> None:
    proxy = client.create(upstream=upstream(_sse_response).address, name="chunks")
    proxy.add_toxic(type="chunk_reset", attributes={"after_chunks": 1})
    with connect(proxy.listen) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
        got: list[bytes] = []
        with pytest.raises(ConnectionResetError):
            _read_into(sock, got)
        # An RST may discard what the socket had not read yet; nothing past the event came.
        assert b"".join(got) == _through(2)[: len(b"".join(got))]


def test_chunk_stall_holds_the_rest_of_the_answer_and_sends_it_in_one_write(
    client: Toxiproxy, upstream: Callable[..., Upstream]
) -> None:
    finished: list[float] = []

    def paced(conn: socket.socket) -> None:
        # The events after the stall's boundary 10 ms apart: the proxy reads them apart.
        conn.recv(1024)
        conn.sendall(_through(3))
        for event in EVENTS[4:]:
            time.sleep(0.01)
            conn.sendall(b"%x\r\n%s\r\n" % (len(event), event))
        conn.sendall(b"0\r\n\r\n")
        finished.append(time.monotonic())
        conn.recv(8)

    proxy = client.create(upstream=upstream(paced).address, name="chunks")
    proxy.add_toxic(type="chunk_stall", attributes={"after_chunks": 2, "duration": 500})
    with connect(proxy.listen) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
        first = recv_exactly(sock, len(_through(3)))
        assert first == _through(3)
        started = time.monotonic()
        rest = sock.recv(65536)
        arrived = time.monotonic()
    assert arrived - started >= 0.4
    assert finished, "the upstream never finished its answer"
    assert finished[0] < arrived, "the upstream was still writing when the stall ended"
    # One read brought everything the proxy held.
    assert first + rest == _through(len(EVENTS) - 1) + b"0\r\n\r\n"


def test_chunk_stall_joins_the_reads_it_held_into_one() -> None:
    """The stage itself, in process: the reads that came during the stall leave as one chunk
    (over a socket, their writes a few µs apart may still be read apart)."""

    async def run() -> list[Item]:
        toxic = ProxyToxic(
            "s",
            TOXIC_TYPES["chunk_stall"],
            "downstream",
            "downstream",
            1.0,
            {"after_chunks": 2, "duration": 50, "aimed": 0},
        )
        out = Channel(64)
        stage = ChunkStallStage(ToxicState(toxic, active=True), out, random.Random(0))
        stage.start()
        stage.inp.push((_through(3), time.monotonic_ns()))
        for event in EVENTS[4:]:
            stage.inp.push((b"%x\r\n%s\r\n" % (len(event), event), time.monotonic_ns()))
        stage.inp.push(EOF)
        got: list[Item] = []
        while not got or got[-1] is not EOF:
            await out.wait_readable()
            got.append(out.pop())
        stage.stop()
        return got

    got = asyncio.run(run())
    assert [data for data, _ in got] == [
        _through(3),
        _through(len(EVENTS) - 1)[len(_through(3)) :],
        b"",
    ]


def test_chunk_toxics_refuse_after_chunks_0(
    client: Toxiproxy, upstream: Callable[..., Upstream]
) -> None:
    proxy = client.create(upstream=upstream().address, name="chunks")
    with pytest.raises(InvalidToxic):
        proxy.add_toxic(type="chunk_cut", attributes={})
