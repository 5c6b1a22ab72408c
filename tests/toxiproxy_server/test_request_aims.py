"""The embedded proxy's reading of request heads for aimed chunk toxics (``aimed`` 1 acts only
on responses to requests whose ``x-streamguard-aim`` header names the toxic)."""

from __future__ import annotations

from pytest_streamguard.toxiproxy_server.events import ChunkCounter, RequestAims

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n"
EVENTS = b"".join(b'data: {"choices":[{"delta":{"content":"t%d"}}]}\n\n' % i for i in range(4))
RESPONSE = HEAD % len(EVENTS) + EVENTS


def feed_bytewise(aims: RequestAims, data: bytes) -> None:
    for k in range(len(data)):
        aims.feed(data[k : k + 1])


def test_the_latest_request_head_names_the_toxics_aimed_at_it() -> None:
    aims = RequestAims()
    aims.feed(b"POST /a HTTP/1.1\r\nX-StreamGuard-Aim: one , two\r\ncontent-length: 5\r\n\r\nhello")
    assert aims.latest == {"one", "two"}
    # A keep-alive connection's next request, split across reads, names none.
    feed_bytewise(aims, b"GET /b HTTP/1.1\r\nhost: x\r\n\r\n")
    assert aims.latest == frozenset()


def test_bodies_are_skipped_whatever_they_hold() -> None:
    aims = RequestAims()
    body = b"x-streamguard-aim: fake\r\n\r\n"
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    aims.feed(b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n" + chunked)
    assert aims.latest == frozenset()
    aims.feed(b"POST / HTTP/1.1\r\nx-streamguard-aim: real\r\n\r\n")
    assert aims.latest == {"real"}
    aims.feed(b"POST / HTTP/1.1\r\ncontent-length: %d\r\n\r\n" % len(body))
    feed_bytewise(aims, body)
    assert aims.latest == frozenset()


def test_an_upgraded_connection_is_not_read_as_requests() -> None:
    aims = RequestAims()
    aims.feed(b"GET /ws HTTP/1.1\r\nupgrade: websocket\r\nx-streamguard-aim: a\r\n\r\n")
    aims.feed(b"GET / HTTP/1.1\r\nx-streamguard-aim: b\r\n\r\n")
    assert aims.latest == {"a"}


def test_an_aimed_counter_counts_only_the_responses_to_requests_naming_it() -> None:
    aims = RequestAims()
    counter = ChunkCounter(2, aim="cut_me", requests=aims)
    aims.feed(b"GET / HTTP/1.1\r\nx-streamguard-aim: cut_me\r\n\r\n")
    offset = counter.boundary(RESPONSE)
    assert offset is not None
    assert RESPONSE[:offset].endswith(b'"t1"}}]}\n\n')
    assert counter.boundary(RESPONSE[offset:]) is None
    aims.feed(b"GET / HTTP/1.1\r\n\r\n")
    assert counter.boundary(RESPONSE) is None
    aims.feed(b"GET / HTTP/1.1\r\nx-streamguard-aim: other, cut_me\r\n\r\n")
    assert counter.boundary(RESPONSE) == offset
    assert counter.hits == 2


def test_bytes_that_are_not_http_stop_the_reading_and_are_not_kept() -> None:
    aims = RequestAims()
    for _ in range(70):
        aims.feed(b"\x00" * 1024)
    assert aims.opaque
    assert aims.head == b""
    assert aims.latest == frozenset()
