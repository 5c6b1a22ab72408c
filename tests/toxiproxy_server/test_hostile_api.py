"""The embedded Toxiproxy server answers hostile input like Toxiproxy 2.12, never with a 500 the
request caused, a leak or a crash: regressions for each case a differential fuzz against the
real server found, a seeded fuzzer over the HTTP surface, and memory over many error answers."""

from __future__ import annotations

import http.client
import json
import random
import socket
from collections.abc import Callable

import httpx
import pytest
from toxiproxy_helpers import ServerProcess, Upstream, connect, recv_exactly, wait_for

from pytest_streamguard.common.tls import tls_context

# 2.12 answers 500 by design when a listen address cannot be bound or resolved: a fuzzer's
# random listen string may hit those, and they are the real server's answer, not a crash.
LISTEN_500 = ("listen tcp", "missing port in address", "no such host", "invalid port")


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` in KiB."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1])


def test_errors_do_not_grow_memory(server: ServerProcess) -> None:
    # The standard library's client on one kept-alive connection (as the api fixture's httpx
    # client keeps one): the server answers the same requests, and the client's own share of
    # the CPU is a third of httpx's (23,000 requests: most of this test's time was the client).
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    requests = (
        ("GET", "/proxies/missing", 404),
        ("POST", "/proxies", 400),
        ("DELETE", "/proxies/missing/toxics/t", 404),
    )

    def errors(n: int) -> None:
        for i in range(n):
            method, path, status = requests[i % 3]
            conn.request(method, path, body=b"{" if method == "POST" else None)
            answer = conn.getresponse()
            answer.read()
            assert answer.status == status, (method, path, answer.status)

    try:
        errors(3000)  # warm-up: allocator, caches
        before = rss_kib(server.popen.pid)
        errors(20_000)
    finally:
        conn.close()
    growth = rss_kib(server.popen.pid) - before
    assert growth <= 2048, f"RSS grew {growth} KiB over 20,000 error answers"


def test_deep_nesting_is_a_400(api: httpx.Client) -> None:
    for body in (b"[" * 5000 + b"]" * 5000, b'{"name":' * 5000):
        response = api.post("/proxies", content=body)
        assert response.status_code == 400, response.text
        assert response.json()["error"].startswith("bad request body")
    assert api.get("/proxies").status_code == 200


def test_lone_surrogates_decode_as_go_does(
    api: httpx.Client, upstream: Callable[..., Upstream]
) -> None:
    # Go's decoder turns a lone surrogate escape into U+FFFD; nothing breaks afterwards.
    target = upstream().address
    body = '{"name": "p_\\ud800", "upstream": "' + target + '", "listen": "127.0.0.1:0"}'
    response = api.post("/proxies", content=body.encode())
    assert response.status_code == 400, response.text  # U+FFFD is outside the name rule
    assert "invalid proxy name" in response.json()["error"]
    body = '{"name": "p", "upstream": "' + target + '\\udfff", "listen": "127.0.0.1:0"}'
    assert api.post("/proxies", content=body.encode()).status_code == 400
    assert api.get("/proxies").json() == {}
    toxic = '{"name": "t", "type": "latency", "stream": "down\\ud800stream"}'
    created = api.post("/proxies", json={"name": "q", "upstream": target, "listen": "127.0.0.1:0"})
    assert created.status_code == 201
    assert api.post("/proxies/q/toxics", content=toxic.encode()).status_code == 400
    listed = api.get("/proxies")
    assert listed.status_code == 200
    assert list(listed.json()) == ["q"]


@pytest.mark.parametrize("listen", [None, ""])
def test_missing_listen_binds_a_random_loopback_port(
    api: httpx.Client, upstream: Callable[..., Upstream], listen: str | None
) -> None:
    body: dict[str, object] = {"name": "p", "upstream": upstream().address}
    if listen is not None:
        body["listen"] = listen
    response = api.post("/proxies", json=body)
    assert response.status_code == 201, response.text
    host, port = response.json()["listen"].rsplit(":", 1)
    assert host == "127.0.0.1"
    assert int(port) > 0
    with connect(response.json()["listen"]) as sock:
        sock.sendall(b"ping")
        assert recv_exactly(sock, 4) == b"ping"


def test_patch_with_the_same_address_keeps_open_connections(
    api: httpx.Client, proxy: Callable[..., str]
) -> None:
    listen = proxy()
    port = listen.rsplit(":", 1)[1]
    with connect(listen) as sock:
        sock.sendall(b"one")
        assert recv_exactly(sock, 3) == b"one"
        for same in (listen, f"localhost:{port}"):
            response = api.patch("/proxies/p", json={"listen": same, "enabled": True})
            assert response.status_code == 200, response.text
            assert response.json()["listen"] == listen
        sock.sendall(b"two")
        assert recv_exactly(sock, 3) == b"two"


def test_patch_with_an_unresolvable_listen_is_a_500_and_changes_nothing(
    api: httpx.Client, proxy: Callable[..., str]
) -> None:
    listen = proxy()
    with connect(listen) as sock:
        response = api.patch("/proxies/p", json={"listen": "garbage"})
        assert response.status_code == 500
        assert response.json() == {
            "error": "address garbage: missing port in address",
            "status": 500,
        }
        shown = api.get("/proxies/p").json()
        assert (shown["listen"], shown["enabled"]) == (listen, True)
        sock.sendall(b"still")
        assert recv_exactly(sock, 5) == b"still"


def test_failed_populate_keeps_the_proxy_it_was_replacing(
    api: httpx.Client, upstream: Callable[..., Upstream]
) -> None:
    first, second = upstream().address, upstream().address
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    busy = f"127.0.0.1:{taken.getsockname()[1]}"
    try:
        created = api.post("/populate", json=[{"name": "a", "upstream": first}])
        assert created.status_code == 201
        body = [
            {"name": "b", "upstream": first},
            {"name": "a", "upstream": second, "listen": busy},
        ]
        response = api.post("/populate", json=body)
        assert response.status_code == 500
        answer = response.json()
        assert answer["error"].startswith(f"listen tcp {busy}: bind: address already in use")
        assert [p["name"] for p in answer["proxies"]] == ["b"]
        kept = api.get("/proxies/a")
        assert kept.status_code == 200
        assert (kept.json()["upstream"], kept.json()["enabled"]) == (first, False)
    finally:
        taken.close()


@pytest.mark.parametrize(
    ("path", "location"),
    [
        ("//proxies", "/proxies"),
        ("/proxies/./x", "/proxies/x"),
        ("/proxies/a/../b/", "/proxies/b/"),
        ("/version/..", "/"),
        ("/proxies/./%C3%A9", "/proxies/%C3%A9"),
    ],
)
def test_unclean_paths_redirect_to_the_clean_one(
    server: ServerProcess, path: str, location: str
) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            data = sock.recv(4096)
            assert data, "server closed before answering"
            head += data
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 301 Moved Permanently"
    assert f"location: {location}".lower() in [line.lower() for line in lines[1:]]


@pytest.mark.parametrize(
    ("method", "path", "status"), [("FOO", "/proxies", 405), ("FOO", "/nope", 404)]
)
def test_unknown_methods_get_404_or_405(
    server: ServerProcess, method: str, path: str, status: int
) -> None:
    with httpx.Client(base_url=server.url, timeout=5, verify=tls_context()) as client:
        assert client.request(method, path).status_code == status


@pytest.mark.parametrize("value", ["1.0", "1e3", "99999999999999999999"])
def test_integer_attributes_take_only_integer_literals(
    api: httpx.Client, proxy: Callable[..., str], value: str
) -> None:
    proxy()
    body = '{"type": "latency", "attributes": {"latency": ' + value + "}}"
    response = api.post("/proxies/p/toxics", content=body.encode())
    assert response.status_code == 400
    assert response.json()["error"] == (
        f"bad request body: json: cannot unmarshal number {value} into Go struct field "
        ".attributes.LatencyToxic.latency of type int64"
    )


@pytest.mark.parametrize(("sent", "shown"), [("1e20", "100000000000000000000"), ("0.1", "0.1")])
def test_toxicity_renders_as_go_renders_a_float32(
    api: httpx.Client, proxy: Callable[..., str], sent: str, shown: str
) -> None:
    proxy()
    body = '{"type": "latency", "toxicity": ' + sent + "}"
    response = api.post("/proxies/p/toxics", content=body.encode())
    assert response.status_code == 200, response.text
    assert f'"toxicity":{shown}' in response.text


def _value(rng: random.Random, depth: int = 0) -> object:
    pick = rng.randrange(12 if depth < 3 else 8)
    if pick == 0:
        return None
    if pick == 1:
        return rng.choice([True, False])
    if pick == 2:
        return rng.choice([0, -1, 1, 2**63, -(2**63) - 1, 10**30, 1.5, 1e308, -0.0])
    if pick == 3:
        return rng.choice(
            ["", "x", "\ud800", "\udfff", "é", "a" * 5000, "127.0.0.1:0", "::", "\x00"]
        )
    if pick in (4, 5):
        return rng.choice(
            [
                "latency",
                "bandwidth",
                "slicer",
                "timeout",
                "reset_peer",
                "limit_data",
                "slow_close",
                "nope",
            ]
        )
    if pick in (6, 7):
        return rng.choice(["upstream", "downstream", "UPSTREAM", "sideways"])
    if pick in (8, 9):
        return [_value(rng, depth + 1) for _ in range(rng.randrange(3))]
    keys = [
        "name",
        "listen",
        "upstream",
        "enabled",
        "type",
        "stream",
        "toxicity",
        "attributes",
        "latency",
        "jitter",
        "rate",
        "bytes",
        "timeout",
        "average_size",
        "delay",
        "Name",
        "x",
    ]
    return {rng.choice(keys): _value(rng, depth + 1) for _ in range(rng.randrange(5))}


def _body(rng: random.Random, upstream: str) -> bytes:
    kind = rng.randrange(8)
    if kind == 0:
        return rng.randbytes(rng.randrange(64))
    if kind == 1:
        return b"[" * rng.randrange(1, 3000)
    if kind == 2:
        value = {
            "name": rng.choice(["f", "f2", "\ud800"]),
            "upstream": upstream,
            "listen": rng.choice(["127.0.0.1:0", "", "garbage", "127.0.0.1:1"]),
        }
        return json.dumps(value).encode()
    if kind == 3:
        return json.dumps([_value(rng) for _ in range(rng.randrange(3))]).encode()
    text = json.dumps(_value(rng))
    if kind == 4 and text:
        cut = rng.randrange(len(text) + 1)
        text = text[:cut]
    return text.encode()


def test_fuzzed_requests_never_get_a_500_the_request_caused(
    server: ServerProcess, api: httpx.Client, upstream: Callable[..., Upstream], fuzz_scale: float
) -> None:
    target = upstream().address
    assert (
        api.post(
            "/proxies", json={"name": "f", "upstream": target, "listen": "127.0.0.1:0"}
        ).status_code
        == 201
    )
    assert api.post("/proxies/f/toxics", json={"name": "t", "type": "latency"}).status_code == 200
    rng = random.Random(12)
    paths = [
        "/proxies",
        "/proxies/f",
        "/proxies/f/toxics",
        "/proxies/f/toxics/t",
        "/populate",
        "/reset",
        "/version",
        "/metrics",
        "/proxies/nope",
        "/proxies/f/toxics/nope",
        "//proxies",
        "/proxies/%00",
        "/proxies/f/./toxics",
        "/nowhere",
    ]
    methods = ["GET", "POST", "PATCH", "DELETE", "PUT", "HEAD", "OPTIONS", "BREW"]
    failures: list[str] = []
    for _ in range(int(2500 * fuzz_scale)):
        method, path = rng.choice(methods), rng.choice(paths)
        body = _body(rng, target)
        response = api.request(method, path, content=body)
        if response.status_code >= 500 and not any(t in response.text for t in LISTEN_500):
            failures.append(
                f"{method} {path} {body[:80]!r} -> {response.status_code} {response.text[:200]}"
            )
        if path == "/reset" or (method == "DELETE" and path == "/proxies/f"):
            api.post("/proxies", json={"name": "f", "upstream": target, "listen": "127.0.0.1:0"})
    assert failures == []
    assert server.popen.poll() is None, "the server died"
    listed = api.get("/proxies")
    assert listed.status_code == 200
    json.dumps(listed.json(), ensure_ascii=False).encode()  # every name is valid UTF-8
    wait_for(lambda: api.get("/version").status_code == 200, 5, "the API to answer")
