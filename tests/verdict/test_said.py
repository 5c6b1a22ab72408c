"""What a hop wrote, folded and recognised: tracebacks to their exception line and the app's
deepest own frame, error-level lines in each server's documented format; and ``server_error``
from the streams that carry them.

The samples are written from each server's documented log format (Python's logging
BASIC_FORMAT and traceback printing, uvicorn's default log format, gunicorn's error log,
nginx's error_log, Node's uncaught error stack, Go's panic output, slog's TextHandler and
logrus's text formatter), not from the recognisers."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from pytest_streamguard.verdict.findings import findings_of
from pytest_streamguard.verdict.findings.said import Said, bounded, error_level, fold
from pytest_streamguard.verdict.findings.server import kept_going_at

UVICORN_TRACEBACK = """\
INFO:     127.0.0.1:40312 - "POST /v1/chat/completions HTTP/1.1" 200 OK
ERROR:    Exception in ASGI application
Traceback (most recent call last):
  File "/v/lib/python3.12/site-packages/uvicorn/protocols/http/h11_impl.py", line 403, in run_asgi
    result = await app(  # type: ignore[func-returns-value]
             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/srv/model/server.py", line 41, in tokens
    for text in streamer:
  File "/v/lib/python3.12/site-packages/transformers/generation/streamers.py", line 223, in __next__
    value = self.text_queue.get(timeout=self.timeout)
  File "/usr/lib/python3.12/queue.py", line 179, in get
    raise Empty
_queue.Empty
INFO:     127.0.0.1:40314 - "POST /v1/chat/completions HTTP/1.1" 200 OK"""

CHAINED = """\
Traceback (most recent call last):
  File "/srv/app/main.py", line 10, in read
    return cache[key]
KeyError: 'k'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/srv/app/main.py", line 12, in read
    raise LookupError(key)
LookupError: k"""

NODE = """\
TypeError: Cannot read properties of undefined (reading 'choices')
    at Layer.handle [as handle_request] (/srv/app/node_modules/express/lib/router/layer.js:95:5)
    at relay (/srv/app/server.js:14:22)
    at process.processTicksAndRejections (node:internal/process/task_queues:95:5)"""

GO_PANIC = """\
panic: runtime error: index out of range [5] with length 3

goroutine 1 [running]:
main.pick(...)
\t/srv/gateway/main.go:21
main.main()
\t/srv/gateway/main.go:8 +0x1d
exit status 2"""


def _lines(text: str, start: int = 1_000) -> list[tuple[int, str]]:
    return [(start + k, line) for k, line in enumerate(text.split("\n"))]


def test_a_uvicorn_traceback_folds_to_its_exception_and_the_apps_own_frame() -> None:
    folded = fold("model", _lines(UVICORN_TRACEBACK))
    errors = [s for s in folded if s.error]
    # "ERROR: Exception in ASGI application" gives way to the traceback it heads.
    assert [s.describe() for s in errors] == ["_queue.Empty (at model/server.py:41 in tokens)"]
    assert errors[0].stamp_ns == 1_002  # the traceback's first line
    assert [s.text for s in folded if not s.error] == [
        'INFO:     127.0.0.1:40312 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        'INFO:     127.0.0.1:40314 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    ]


def test_another_threads_lines_inside_a_traceback_are_passed_over() -> None:
    """A threaded server logs a probe's request while another thread prints its traceback
    (http.server's access line, then uvicorn's): the exception line is still the exception."""
    lines = UVICORN_TRACEBACK.split("\n")
    lines[8:8] = [
        '127.0.0.1 - - [06/Dec/2026 09:18:15] "GET /readyz HTTP/1.1" 200 -',
        'INFO:     127.0.0.1:40316 - "GET /health HTTP/1.1" 200 OK',
    ]
    errors = [s for s in fold("model", _lines("\n".join(lines))) if s.error]
    assert [s.describe() for s in errors] == ["_queue.Empty (at model/server.py:41 in tokens)"]


def test_a_chained_traceback_names_its_first_exception() -> None:
    [said] = fold("app", _lines(CHAINED))
    assert (said.text, said.frame) == ("KeyError: 'k'", "app/main.py:10 in read")


LIBRARY_CHAIN = """\
Traceback (most recent call last):
  File "/v/lib/python3.12/site-packages/httpcore/_exceptions.py", line 10, in map_exceptions
    yield
httpcore.RemoteProtocolError: peer closed connection

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/srv/gateway/gateway.py", line 47, in passed_on
    async for chunk in upstream.aiter_raw():
  File "/v/lib/python3.12/site-packages/httpx/_models.py", line 990, in aiter_raw
    async for raw_stream_bytes in self.stream:
httpx.RemoteProtocolError: peer closed connection"""


def test_a_library_exception_names_the_apps_frame_in_its_chain() -> None:
    [said] = fold("gateway", _lines(LIBRARY_CHAIN))
    assert said.text == "httpcore.RemoteProtocolError: peer closed connection"
    assert said.frame == "gateway/gateway.py:47 in passed_on"


def test_a_node_error_names_its_first_own_frame() -> None:
    [said] = fold("gateway", _lines(NODE))
    assert said.error
    assert said.text.startswith("TypeError: Cannot read properties of undefined")
    assert said.frame == "relay (/srv/app/server.js:14:22)"


def test_a_go_panic_names_its_first_own_file() -> None:
    folded = fold("gateway", _lines(GO_PANIC))
    assert folded[0].text == "panic: runtime error: index out of range [5] with length 3"
    assert folded[0].frame == "gateway/main.go:21"
    assert [s.text for s in folded[1:]] == ["exit status 2"]


@pytest.mark.parametrize(
    "line",
    [
        "ERROR:root:generation failed",  # logging.basicConfig's BASIC_FORMAT
        "CRITICAL:app.engine:out of memory",
        "2024-05-01 10:00:00,123 - app - ERROR - stream aborted",  # the logging HOWTO's format
        "ERROR:    Exception in ASGI application",  # uvicorn
        "[2024-05-01 10:00:00 +0000] [42] [ERROR] Exception in worker process",  # gunicorn
        "2024/05/01 10:00:00 [error] 31#31: *1 upstream timed out (110: Connection timed out) "
        'while reading upstream, client: 127.0.0.1, server: , request: "POST /v1/chat HTTP/1.1"',
        "2024/05/01 10:00:00 [crit] 31#31: *3 pwrite() failed (28: No space left on device)",
        "2024/05/01 10:00:00 [alert] 31#31: worker process 33 exited on signal 9",
        "2024/05/01 10:00:00 [emerg] 1#1: bind() to 0.0.0.0:80 failed (98: Address in use)",
        'time=2024-05-01T10:00:00.000Z level=ERROR msg="upstream read failed" err=EOF',  # slog
        'time="2024-05-01T10:00:00Z" level=error msg="stream broke"',  # logrus
        '{"level":"error","ts":1714557600.1,"msg":"upstream closed"}',  # zap
    ],
)
def test_error_level_lines_of_each_format(line: str) -> None:
    assert error_level(line)


@pytest.mark.parametrize(
    "line",
    [
        'INFO:     127.0.0.1:53422 - "POST /v1/chat HTTP/1.1" 500 Internal Server Error',
        "WARNING:root:slow request",
        "[2024-05-01 10:00:00 +0000] [42] [INFO] Booting worker with pid: 42",
        "2024/05/01 10:00:00 [warn] 31#31: *1 an upstream response is buffered to a temporary file",
        "2024/05/01 10:00:00 [notice] 1#1: start worker processes",
        'time=2024-05-01T10:00:00.000Z level=INFO msg="served" errors=0',
        "error_count=0 terror_mode=off",
    ],
)
def test_lines_below_error_level_are_not_errors(line: str) -> None:
    assert not error_level(line)


def test_bounded_keeps_errors_first_then_the_last_lines() -> None:
    said = [Said("app", k, f"line {k}", error=k == 1) for k in range(10)]
    assert [s.stamp_ns for s in bounded(said, 3)] == [1, 8, 9]


@dataclass
class _Stream:
    name: str
    completed: bool
    said: list[Said] = field(default_factory=list)
    request_ns: int = 0
    response_ns: int | None = None
    end_ns: int | None = 10
    error_kind: str | None = None
    reads: list[tuple[int, int]] = field(default_factory=list)
    heartbeat_ns: list[int] = field(default_factory=list)
    chunks: list[object] = field(default_factory=list)
    ttft: float | None = None


def test_server_error_is_the_cause_of_streams_that_ended_early_and_comes_first() -> None:
    empty = Said("model", 5, "_queue.Empty", "model/server.py:41 in tokens", error=True)
    streams = [_Stream("stream 0", False, [empty]), _Stream("stream 1", True, [empty])]
    found = findings_of(streams)
    assert found[0].name == "server_error"
    assert found[0].hop == "model"
    assert "_queue.Empty (at model/server.py:41 in tokens)" in found[0].evidence
    assert "1 of them ended early" in found[0].evidence
    assert found[0].cause == "model raised _queue.Empty at model/server.py:41 in tokens"
    assert found[0].streams == ("stream 0", "stream 1")
    assert found[0].data["stamps_ns"] == [5]


def test_an_error_beside_streams_that_completed_is_no_cause() -> None:
    said = Said("target", 5, "ERROR:root:cache miss", error=True)
    [finding] = [f for f in findings_of([_Stream("s", True, [said])]) if f.name == "server_error"]
    assert finding.cause == ""
    quiet = findings_of([_Stream("s", False, [Said("target", 5, "INFO:root:fine")])])
    assert "server_error" not in [f.name for f in quiet]


NGINX_UPSTREAM = (
    "2026/12/06 08:00:0{k} [error] 7#7: *{k}1 upstream prematurely closed connection while "
    'reading upstream, client: 127.0.0.1, server: , request: "POST /v1/chat/completions '
    'HTTP/1.1", upstream: "http://127.0.0.1:4100{k}/v1/chat/completions", host: "127.0.0.1"'
)


def test_nginx_lines_that_differ_in_numbers_are_one_finding_with_no_cause() -> None:
    """nginx's word on its upstream is its evidence, but the cause is behind it: a stream that
    ended early beside it keeps the cause for the finding that places it."""
    streams = [
        _Stream(f"stream {k}", False, [Said("ingress", k, NGINX_UPSTREAM.format(k=k), error=True)])
        for k in range(3)
    ]
    [finding] = [f for f in findings_of(streams) if f.name == "server_error"]
    assert finding.hop == "ingress"
    assert finding.streams == ("stream 0", "stream 1", "stream 2")
    assert "said 3 times beside 3 streams, 3 of them ended early" in finding.evidence
    assert finding.cause == ""


def test_a_gateways_http_client_error_is_no_cause_but_the_models_exception_is() -> None:
    model = Said("model", 5, "KeyError: 6", "model/app.py:30 in tokens", error=True)
    gateway = Said("gateway", 6, "httpx.RemoteProtocolError: peer closed connection", error=True)
    found = [f for f in findings_of([_Stream("s", False, [model, gateway])])]
    assert [(f.hop, bool(f.cause)) for f in found if f.name == "server_error"] == [
        ("model", True),
        ("gateway", False),
    ]


@dataclass
class _Stamps:
    ended: dict[str, str]
    inner: dict[str, list[tuple[int, int]]] = field(default_factory=lambda: {"model": [(1, 9)]})


@dataclass
class _Paired(_Stream):
    stack: _Stamps | None = None


def test_a_reset_on_an_inner_hop_its_front_closed_first_is_a_peer_gone() -> None:
    """A model that logs ConnectionResetError after the gateway in front of it closed the
    connection (the gateway failed) is no finding; where the model closed first it is."""
    reset = Said(
        "model", 5, "ConnectionResetError: [Errno 104] Connection reset by peer", error=True
    )
    front = _Paired("s", False, [reset], stack=_Stamps({"model": "front"}))
    assert "server_error" not in [f.name for f in findings_of([front])]
    upstream = _Paired("s", False, [reset], stack=_Stamps({"model": "upstream"}))
    assert "server_error" in [f.name for f in findings_of([upstream])]
    # Beside streams that completed (the model closed those hops, at their answers' ends),
    # the stream that ended early still says who left first.
    done = _Paired("d", True, [reset], stack=_Stamps({"model": "upstream"}))
    assert "server_error" not in [f.name for f in findings_of([front, done])]
    assert "server_error" in [f.name for f in findings_of([upstream, done])]


@pytest.mark.parametrize(
    ("ended", "hop"),
    [({"model": "front"}, "model"), ({"model": "upstream"}, "gateway"), ({}, "gateway")],
)
def test_generation_left_running_is_at_the_hop_that_did_not_pass_the_cut_on(
    ended: dict[str, str], hop: str
) -> None:
    """The model's gauges said it still generated after a cut stream: the model did not cancel
    when the gateway closed its connection; the gateway did not pass the cut on when the
    model's connection stayed open (the model ended it, or nobody had by the test's end)."""
    cut = _Paired("s", False, error_kind="cut", stack=_Stamps(ended))
    assert kept_going_at([cut], ["model", "gateway"], "model") == hop
    unpaired = _Paired("s", False, error_kind="cut", stack=_Stamps(ended, inner={}))
    assert kept_going_at([unpaired], ["model", "gateway"], "model") == "model"
