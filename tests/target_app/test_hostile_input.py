"""Hostile input over real sockets: seeded fuzzing of bodies, heads, paths and methods on every
route (no answer >= 500, the target alive after), and the head, body and input limits."""

from __future__ import annotations

import contextlib
import json
import random
import socket
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from target_harness import SERVE_FLAGS, TargetProcess, collect, metric, wait_until

from pytest_streamguard.common.tls import tls_context

GENERATION_ROUTES = ("/generate", "/v1/completions", "/v1/chat/completions")
ROUTES = (*GENERATION_ROUTES, "/healthz", "/readyz", "/metrics")
SEED = 20261202
BODY_REQUESTS = 1500
"""Fuzzed bodies per run at --fuzz-scale 1."""
RAW_REQUESTS = 500
"""Fuzzed raw requests (request line, headers, path, method) per run at --fuzz-scale 1."""
HEADER_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 1.0

# Fault knobs stay off: a fuzzed but valid {"cold_start_s": 600} would hold a slot for minutes.
FUZZ_FLAGS = [
    *SERVE_FLAGS,
    "--header-timeout",
    str(HEADER_TIMEOUT_S),
    "--body-timeout",
    str(BODY_TIMEOUT_S),
]


@pytest.fixture(scope="module")
def target(make_target: Callable[..., TargetProcess]) -> TargetProcess:
    """A batch-engine target with fault knobs off and 1 s head and body timeouts."""
    return make_target(*FUZZ_FLAGS)


@pytest.fixture
def client(target: TargetProcess) -> Iterator[httpx.Client]:
    """A client for the target; after the test, the target is alive and holds no slot."""
    with httpx.Client(base_url=target.url, timeout=30, verify=tls_context()) as http:
        yield http
        assert target.process.poll() is None, f"target died; stderr:\n{target.stderr()}"
        wait_until(
            lambda: metric(http, "streamguard_target_active_streams") == 0,
            10,
            "every stream slot to be released",
        )


def _address(target: TargetProcess) -> tuple[str, int]:
    host, port = target.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def _assert_no_server_errors_logged(target: TargetProcess) -> None:
    log = target.stderr()
    assert "Traceback" not in log, log
    assert "ERROR" not in log, log


# -- the generators (all JSON is built as text: Python cannot even print some of it) ---------


def _deep(rng: random.Random) -> str:
    depth = rng.choice([33, 100, 968, 1000, 5000, 20000])
    opener, closer = rng.choice([("[", "]"), ('{"a":', "}")])
    return opener * depth + "1" + closer * depth


def _hostile_value(rng: random.Random) -> str:
    choices: list[Callable[[], str]] = [
        lambda: "1" * rng.choice([19, 41, 4300, 4301, 10000]),
        lambda: "-" + "9" * rng.choice([20, 4301]),
        lambda: "1e" + str(rng.choice([308, 309, 400, 99999])),
        lambda: "0." + "0" * 5000 + "1",
        lambda: rng.choice(["NaN", "Infinity", "-Infinity", "1.0", "-0", "1e3", "0"]),
        lambda: rng.choice(["true", "false", "null", "[]", "{}", '""']),
        lambda: json.dumps(rng.choice(["\ud800", "a\udfff", "\udbff\udbff", "x\ud83dy"])),
        lambda: json.dumps("\U0001f600" * rng.randint(1, 50) + "\x00\x1f\u2028"),
        lambda: json.dumps("w " * rng.randint(1, 40000)),
        lambda: json.dumps("m" * rng.choice([256, 257, 5000])),
        lambda: json.dumps(rng.choice(["system", "user", "assistant", "robot", ""])),
        lambda: '[{"role":"user","content":' + _hostile_value(rng) + "}]",
        lambda: '[{"role":' + _hostile_value(rng) + ',"content":"a"}]',
        lambda: "[" + ",".join('{"role":"user","content":"a"}' for _ in range(300)) + "]",
        lambda: _deep(rng),
        lambda: str(rng.randint(-5, 3)),
    ]
    return rng.choice(choices)()


def _body(rng: random.Random, route: str) -> bytes:
    if route == "/v1/chat/completions":
        fields = {"messages": '[{"role":"user","content":"baba"}]', "max_tokens": "1"}
        extra = ["model", "stream", "max_completion_tokens", "ignore_eos", "n", "\ud800"]
    elif route == "/v1/completions":
        fields = {"prompt": '"baba"', "max_tokens": "1"}
        extra = ["model", "stream", "ignore_eos", "temperature", "fault"]
    else:
        fields = {"prompt": '"baba"', "max_new_tokens": "1"}
        extra = ["ignore_eos", "fault", "model", ""]
    for _ in range(rng.randint(1, 3)):
        key = rng.choice([*fields, *extra])
        fields[key] = _hostile_value(rng)
    text = "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in fields.items()) + "}"
    raw = text.encode("utf-8", "surrogatepass")
    mutation = rng.random()
    if mutation < 0.1:
        raw = raw[: rng.randrange(len(raw) + 1)]
    elif mutation < 0.2:
        raw = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64)))
    elif mutation < 0.25:
        raw = _hostile_value(rng).encode("utf-8", "surrogatepass")
    elif mutation < 0.3:
        spot = rng.randrange(len(raw) + 1)
        raw = raw[:spot] + bytes([rng.getrandbits(8)]) + raw[spot:]
    return raw


def _path(rng: random.Random) -> str:
    route = rng.choice(ROUTES)
    return rng.choice(
        [
            route,
            route + "/",
            "/" + route,
            route.replace("/", "/./", 1),
            route + "/../generate",
            route + "?" + "a=" + "%" * rng.randint(1, 3),
            route + "%00",
            route + "%ff%fe",
            "/" + "x" * rng.choice([10, 8000, 20000]),
            "/%2e%2e/%2e%2e/etc/passwd",
            "*",
            "http://127.0.0.1" + route,
        ]
    )


def _raw_request(rng: random.Random) -> bytes:
    method = rng.choice(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "BREW", "G T"])
    version = rng.choice(["HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/9", "http/1.1"])
    body = _body(rng, rng.choice(GENERATION_ROUTES)) if rng.random() < 0.6 else b""
    headers = [
        b"Host: 127.0.0.1",
        b"Connection: close",
        b"Content-Length: " + str(len(body)).encode(),
    ]
    for _ in range(rng.randint(0, 4)):
        headers.append(
            rng.choice(
                [
                    b"Content-Type: " + rng.choice([b"application/json", b"text/plain", b"\xff"]),
                    b"X-Odd: " + bytes(rng.choice(range(32, 256)) for _ in range(20)),
                    b"X-Long: " + b"v" * rng.choice([100, 8000, 20000, 70000]),
                    b"Content-Length: " + rng.choice([b"0", b"-1", b"abc", b"9" * 30]),
                    b"Transfer-Encoding: " + rng.choice([b"chunked", b"gzip", b"chunked, chunked"]),
                    b"Expect: 100-continue",
                    b"Bad Header: x",
                    b": empty-name",
                    b"X-Many: " + b",".join([b"a"] * 500),
                ]
            )
        )
    head = f"{method} {_path(rng)} {version}".encode() + b"\r\n" + b"\r\n".join(headers)
    return head + b"\r\n\r\n" + body


def _status_of(address: tuple[str, int], request: bytes) -> int | None:
    """Send ``request`` on a fresh connection; the response status, or None if it closed
    without one."""
    with socket.create_connection(address, timeout=10) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(request)
        received = b""
        try:
            while b"\r\n" not in received:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                received += chunk
        except ConnectionResetError:
            pass
    if not received.startswith(b"HTTP/1."):
        return None
    return int(received.split(b" ", 2)[1])


# -- fuzzing ---------------------------------------------------------------------------------


def test_fuzzed_bodies_never_get_a_server_error(
    client: httpx.Client, target: TargetProcess, fuzz_scale: float
) -> None:
    rng = random.Random(SEED)
    statuses: dict[int, int] = {}
    server_errors: list[tuple[str, bytes, int, str]] = []
    for _ in range(int(BODY_REQUESTS * fuzz_scale)):
        route = rng.choice(GENERATION_ROUTES)
        body = _body(rng, route)
        reply = client.post(route, content=body, headers={"content-type": "application/json"})
        statuses[reply.status_code] = statuses.get(reply.status_code, 0) + 1
        if reply.status_code >= 500:
            server_errors.append((route, body[:200], reply.status_code, reply.text[:300]))
        elif reply.status_code >= 400:
            payload = reply.json()
            assert payload["error"], (route, body[:200], payload)
            assert payload["accepted"], (route, body[:200], payload)
    assert not server_errors, server_errors[:5]
    # The fuzzer reaches both sides: rejections, and bodies valid enough to generate.
    assert statuses.get(400, 0) > BODY_REQUESTS * fuzz_scale / 2, statuses
    assert statuses.get(200, 0) > 0, statuses
    events = collect(client, "/generate", {"prompt": "baba", "max_new_tokens": 3})
    assert events[-1].kind == "done"
    _assert_no_server_errors_logged(target)


def test_fuzzed_heads_paths_and_methods_never_get_a_server_error(
    client: httpx.Client, target: TargetProcess, fuzz_scale: float
) -> None:
    rng = random.Random(SEED + 1)
    address = _address(target)
    statuses: dict[int | None, int] = {}
    for _ in range(int(RAW_REQUESTS * fuzz_scale)):
        request = _raw_request(rng)
        status = _status_of(address, request)
        statuses[status] = statuses.get(status, 0) + 1
        assert status is None or status < 500, (status, request[:300])
    assert sum(n for s, n in statuses.items() if s is not None and s < 300) > 0, statuses
    assert statuses.get(431, 0) > 0, statuses
    assert client.get("/healthz").status_code == 200
    events = collect(client, "/generate", {"prompt": "baba", "max_new_tokens": 3})
    assert events[-1].kind == "done"


# -- the limits, one by one ------------------------------------------------------------------

HOSTILE_BODIES = [
    pytest.param("/generate", '{"prompt":' + "[" * 5000 + "]" * 5000 + "}", "body", id="deep-5000"),
    pytest.param("/generate", '{"prompt":' + "[" * 968 + "]" * 968 + "}", "body", id="deep-968"),
    pytest.param(
        "/generate", '{"prompt":"a","max_new_tokens":' + "1" * 4301 + "}", "body", id="int"
    ),
    pytest.param("/generate", '{"prompt":"a","max_new_tokens":NaN}', "body", id="nan"),
    pytest.param("/generate", '{"prompt":"\\ud800"}', "prompt", id="surrogate-prompt"),
    pytest.param("/v1/completions", '{"prompt":"ab\\udc00"}', "prompt", id="surrogate-completion"),
    pytest.param(
        "/v1/chat/completions",
        '{"messages":[{"role":"user","content":"\\ud800"}]}',
        "messages[0].content",
        id="surrogate-content",
    ),
    pytest.param(
        "/v1/completions", '{"prompt":"a","model":"\\udbff"}', "model", id="surrogate-model"
    ),
    pytest.param("/generate", '{"\\ud800":1}', "body", id="surrogate-key"),
    pytest.param(
        "/v1/completions", '{"prompt":"a","model":"' + "m" * 257 + '"}', "model", id="long-model"
    ),
    pytest.param(
        "/generate", '{"prompt":"' + "w " * 40000 + '"}', "prompt", id="prompt-over-char-bound"
    ),
]


@pytest.mark.parametrize(("path", "body", "field"), HOSTILE_BODIES)
def test_hostile_body_is_a_400_that_names_the_field(
    client: httpx.Client, path: str, body: str, field: str
) -> None:
    reply = client.post(path, content=body.encode(), headers={"content-type": "application/json"})
    assert reply.status_code == 400, reply.text
    payload = reply.json()
    assert payload["field"] == field
    assert payload["error"]
    assert payload["accepted"]


def test_surrogate_pair_escape_is_one_character_and_accepted(client: httpx.Client) -> None:
    reply = client.post(
        "/v1/completions",
        content=b'{"prompt":"baba \\ud83d\\ude00","max_tokens":2}',
        headers={"content-type": "application/json"},
    )
    assert reply.status_code == 200, reply.text


def test_model_name_at_the_limit_is_echoed(client: httpx.Client) -> None:
    name = "m" * 256
    reply = client.post("/v1/completions", json={"prompt": "baba", "max_tokens": 2, "model": name})
    assert reply.status_code == 200, reply.text
    assert reply.json()["model"] == name


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    # utime and stime, in clock ticks (fields 14 and 15 of proc_pid_stat(5)).
    return (int(fields[11]) + int(fields[12])) / 100


def test_64_mib_header_is_refused_without_reading_it(
    client: httpx.Client, target: TargetProcess
) -> None:
    before = _cpu_seconds(target.process.pid)
    with socket.create_connection(_address(target), timeout=10) as sock:
        head = b"POST /generate HTTP/1.1\r\nHost: x\r\nX-Big: "
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            # The target stops reading past --max-header-bytes and closes; the send fails
            # long before 64 MiB are through.
            sock.sendall(head + b"a" * (64 << 20) + b"\r\n\r\n")
    spent = _cpu_seconds(target.process.pid) - before
    # Before the bound the target parsed all of it: 3.8 s of CPU. Generous for a loaded box.
    assert spent < 1.0, f"the target spent {spent:.2f} s of CPU on one refused head"
    assert client.get("/healthz").status_code == 200


def test_oversized_head_gets_431_naming_the_limit(target: TargetProcess) -> None:
    with socket.create_connection(_address(target), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 ")
    payload = json.loads(body)
    assert payload["field"] == "headers"
    assert "16384 bytes" in payload["accepted"]


@pytest.mark.parametrize(
    ("sent", "field"),
    [
        pytest.param(b"", "headers", id="silent-client"),
        pytest.param(b"POST /generate HTTP/1.1\r\nHost: x\r\n", "headers", id="partial-head"),
        pytest.param(
            b'POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"pro',
            "body",
            id="partial-body",
        ),
    ],
)
def test_a_client_that_never_finishes_its_request_gets_408(
    target: TargetProcess, sent: bytes, field: str
) -> None:
    started = time.monotonic()
    with socket.create_connection(_address(target), timeout=10) as sock:
        sock.sendall(sent)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    waited = time.monotonic() - started
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), reply
    assert json.loads(body)["field"] == field
    # Timed out by the configured 1 s, not by the 10 s socket timeout of this client.
    assert waited < HEADER_TIMEOUT_S + 5


def test_disconnect_during_the_body_logs_no_error(
    client: httpx.Client, target: TargetProcess
) -> None:
    gone = metric(client, "streamguard_target_requests_rejected_total", {"reason": "client_gone"})
    with socket.create_connection(_address(target), timeout=10) as sock:
        # The head is complete, so the request starts; the body never is: closing now is a
        # disconnect in the middle of the body read.
        sock.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    wait_until(
        lambda: (
            metric(client, "streamguard_target_requests_rejected_total", {"reason": "client_gone"})
            == gone + 1
        ),
        10,
        "the disconnect mid-body to be counted",
    )
    _assert_no_server_errors_logged(target)
