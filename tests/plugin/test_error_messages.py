"""Each error the plugin prints: its exact text and how many lines it takes."""

from __future__ import annotations

import fnmatch
import http.server
import shlex
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from plugin_helpers import error_section

USES_PLUGIN = "def test_a(streamguard):\n    pass\n"
HTML = b"<!DOCTYPE html>\n<html><body><h1>Welcome to some web app</h1></body></html>\n"


class _HtmlHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(HTML)))
        self.end_headers()
        self.wfile.write(HTML)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def html_server() -> Iterator[str]:
    """A web server that is not Toxiproxy: it answers every GET with an HTML page."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HtmlHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _ReadyHandler(http.server.BaseHTTPRequestHandler):
    server: _ReadyServer

    def do_GET(self) -> None:
        status = self.server.status(self.path)
        self.server.answers.append(status)
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


class _ReadyServer(http.server.ThreadingHTTPServer):
    """A server whose status code per path comes from ``status``; it keeps what it answered."""

    def __init__(self, status: Callable[[str], int]) -> None:
        super().__init__(("127.0.0.1", 0), _ReadyHandler)
        self.status = status
        self.answers: list[int] = []


@pytest.fixture
def ready_server() -> Iterator[Callable[[Callable[[str], int]], _ReadyServer]]:
    """Start :class:`_ReadyServer` s in threads; shut them down after the test."""
    servers: list[_ReadyServer] = []

    def start(status: Callable[[str], int]) -> _ReadyServer:
        server = _ReadyServer(status)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


READY_PATH_HINT = (
    "hint: the plugin polls the ready path until it answers 2xx; point --streamguard-ready-path "
    "(ini streamguard_ready_path) at a path your app answers 2xx once it is ready, such as "
    "/health or /, or /v1/models on an OpenAI-compatible server such as llama-cpp-python's "
    "(where /health and / answer 404)"
)
# The startup timeout stays at its 120 s default in these runs. A wrong path is known after
# 3 s of 4xx answers; ending within 30 s (pytest's own start included, on a busy machine)
# shows that the 4xx ended the wait, not the timeout.
WELL_BEFORE_THE_TIMEOUT_S = 30.0


def test_ready_path_answering_404_fails_within_seconds_with_a_hint(
    pytester: pytest.Pytester,
    toxiproxy_url: str,
    ready_server: Callable[[Callable[[str], int]], _ReadyServer],
) -> None:
    server = ready_server(lambda path: 200 if path == "/" else 404)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    pytester.makepyfile(USES_PLUGIN)
    started = time.monotonic()
    result = pytester.runpytest_subprocess(
        "--streamguard",
        "--streamguard-toxiproxy",
        toxiproxy_url,
        "--streamguard-target-url",
        url,
        timeout=100,
    )
    elapsed = time.monotonic() - started
    result.assert_outcomes(errors=1)
    assert error_section(result.stdout.lines, "ERROR at setup of test_a") == [
        f"streamguard target failed to start: target at {url}/readyz (--streamguard-target-url) "
        "answered HTTP 404 for 3 s: a 4xx means the path is wrong, not that the app is still "
        "starting",
        READY_PATH_HINT,
    ]
    assert elapsed < WELL_BEFORE_THE_TIMEOUT_S
    assert set(server.answers) == {404}


def test_started_target_whose_ready_path_answers_404_fails_within_seconds_with_a_hint(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    # The standard library's file server on an empty directory: 404 for /readyz.
    (pytester.path / "empty").mkdir()
    cmd = f"{sys.executable} -m http.server {{port}} --bind 127.0.0.1 --directory empty"
    pytester.makepyfile(USES_PLUGIN)
    started = time.monotonic()
    result = pytester.runpytest_subprocess(
        "--streamguard", "--streamguard-toxiproxy", toxiproxy_url, "--streamguard-target-cmd", cmd
    )
    elapsed = time.monotonic() - started
    result.assert_outcomes(errors=1)
    section = error_section(result.stdout.lines, "ERROR at setup of test_a")
    assert fnmatch.fnmatch(
        section[0],
        "streamguard target failed to start: target answered HTTP 404 at http://127.0.0.1:*"
        "/readyz for 3 s: a 4xx means the path is wrong, not that the app is still starting "
        f"(still running); command: {sys.executable} -m http.server * --bind 127.0.0.1 "
        "--directory empty",
    ), section[0]
    assert section[1] == "--- last output of target ---"
    assert any('"GET /readyz HTTP/1.1" 404' in line for line in section[2:-1])
    assert section[-1] == READY_PATH_HINT
    assert elapsed < WELL_BEFORE_THE_TIMEOUT_S


def test_ready_path_answering_503_is_waited_on(
    pytester: pytest.Pytester,
    toxiproxy_url: str,
    ready_server: Callable[[Callable[[str], int]], _ReadyServer],
) -> None:
    # 503 (a server still starting) for longer than a 4xx is tolerated, then ready.
    asked: list[float] = []

    def starting(path: str) -> int:
        asked.append(time.monotonic())
        return 200 if asked[-1] - asked[0] > 4.0 else 503

    server = ready_server(starting)
    pytester.makepyfile(USES_PLUGIN)
    result = pytester.runpytest(
        "--streamguard",
        "--streamguard-toxiproxy",
        toxiproxy_url,
        "--streamguard-target-url",
        f"http://127.0.0.1:{server.server_address[1]}",
    )
    result.assert_outcomes(passed=1)
    assert server.answers[0] == 503
    assert server.answers[-1] == 200


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_refused_target_url_fails_fast_with_a_hint(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    pytester.makepyfile(USES_PLUGIN)
    url = f"http://127.0.0.1:{_closed_port()}"
    # The startup timeout stays at its 120 s default; the run must end long before.
    result = pytester.runpytest_subprocess(
        "--streamguard",
        "--streamguard-toxiproxy",
        toxiproxy_url,
        "--streamguard-target-url",
        url,
        timeout=60,
    )
    result.assert_outcomes(errors=1)
    assert error_section(result.stdout.lines, "ERROR at setup of test_a") == [
        f"streamguard target failed to start: target at {url}/readyz (--streamguard-target-url) "
        "refused every connection for 3 s: nothing listens there",
        "hint: start your app before pytest, check the host and port, or let the plugin start "
        "it with --streamguard-target-cmd",
    ]


def test_crashing_target_error_once_with_its_output(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    pytester.makepyfile(USES_PLUGIN + "\n\ndef test_b(streamguard):\n    pass\n")
    # stdout and stderr lines alternate: the tail must show them in the order written.
    crash = (
        f"{sys.executable} -c \"import sys; print('loading...'); "
        "print('warning: slow disk', file=sys.stderr); print('model: none'); "
        "raise SystemExit('no such model')\""
    )
    result = pytester.runpytest(
        "--streamguard", "--streamguard-toxiproxy", toxiproxy_url, "--streamguard-target-cmd", crash
    )
    result.assert_outcomes(errors=2)
    section = error_section(result.stdout.lines, "ERROR at setup of test_a")
    assert section == [
        "streamguard target failed to start: target exited before printing its listening line "
        f"(exit code 1); command: {shlex.join(shlex.split(crash))}",
        "--- last output of target ---",
        "loading...",
        "warning: slow disk",
        "model: none",
        "no such model",
    ]
    # The second test that needs the target refers to the first instead of repeating it.
    assert error_section(result.stdout.lines, "ERROR at setup of test_b") == [
        f"{section[0]} (shown in full for test_crashing_target_error_once_with_its_output.py"
        "::test_a)"
    ]
    assert "During handling" not in result.stdout.str()


def test_option_error_is_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(USES_PLUGIN)
    result = pytester.runpytest("--streamguard", "--streamguard-chunk", "fast")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert [line for line in result.stderr.lines if line.strip()] == [
        "ERROR: 'fast' from --streamguard-chunk is not a valid streamguard_chunk: expected a "
        "positive number of seconds"
    ]


def test_server_that_is_not_toxiproxy_is_named_as_such(
    pytester: pytest.Pytester, html_server: str, app_url: str
) -> None:
    pytester.makepyfile(USES_PLUGIN)
    result = pytester.runpytest(
        "--streamguard",
        "--streamguard-toxiproxy",
        html_server,
        "--streamguard-target-url",
        app_url,
        "--streamguard-seed=3",
    )
    result.assert_outcomes(errors=1)
    header = [line for line in result.stdout.lines if line.startswith("streamguard: target=")]
    assert header == [
        f"streamguard: target=url {app_url}, toxiproxy=external {html_server} (version NOT a "
        "Toxiproxy API: HTTP 200 text/html ('<!DOCTYPE html> <html><body><h1>Welcome'...)), "
        "default deadline ttft=0.5s chunk=0.2s, seed=3 (not that server's own draws)"
    ]
    assert error_section(result.stdout.lines, "ERROR at setup of test_a") == [
        f"streamguard toxiproxy server unavailable: the server at {html_server} "
        "(--streamguard-toxiproxy) is not a Toxiproxy API: GET /version answered HTTP 200 "
        "text/html ('<!DOCTYPE html> <html><body><h1>Welcome'...); expected Toxiproxy's "
        'version, such as {"version": "2.12.0"}',
        "hint: pass the URL of toxiproxy-server's API (its -host/-port, default "
        "http://127.0.0.1:8474), or leave --streamguard-toxiproxy out for the embedded one",
    ]
    assert "<h1>" not in result.stdout.str().replace("<h1>Welcome'...", "")


def test_header_shows_the_command_as_written_with_paths_relative_to_rootdir(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    app = pytester.path / "my app.py"
    result = pytester.runpytest(
        "--streamguard", "--streamguard-target-cmd", f"python '{app}' --port {{port}}", "--co"
    )
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        ["streamguard: target=command python 'my app.py' --port {port}, toxiproxy=embedded *"]
    )


def test_report_paths_in_the_summary_are_relative_to_rootdir(
    pytester: pytest.Pytester, run: Callable[..., pytest.RunResult]
) -> None:
    pytester.makepyfile("def test_a(streamguard):\n    assert streamguard.stream().completed\n")
    result = run(
        "--streamguard-json",
        str(pytester.path / "out" / "r.json"),
        "--streamguard-html",
        str(pytester.path / "out" / "r.html"),
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["JSON report: out/r.json", "HTML report: out/r.html"])
    assert str(pytester.path) not in "\n".join(
        line for line in result.stdout.lines if "report:" in line
    )


@pytest.mark.parametrize(
    ("cause", "args"),
    [
        ("target", ["-q"]),
        ("target", ["-qq"]),
        ("target", ["-q", "-n", "2"]),
        ("toxiproxy", ["-qq"]),
        ("toxiproxy", ["-q", "-n", "2"]),
    ],
    ids=["target-q", "target-qq", "target-xdist", "toxiproxy-qq", "toxiproxy-xdist"],
)
def test_a_session_error_names_its_cause_at_every_verbosity(
    pytester: pytest.Pytester, toxiproxy_url: str, cause: str, args: list[str]
) -> None:
    pytester.makepyfile(USES_PLUGIN + "\n\ndef test_b(streamguard):\n    pass\n")
    if cause == "target":
        crash = f"{sys.executable} -c \"raise SystemExit('no such model')\""
        options = ["--streamguard-toxiproxy", toxiproxy_url, "--streamguard-target-cmd", crash]
        shown = [
            "streamguard target failed to start: target exited before printing its listening "
            "line (exit code 1); command: *",
            "--- last output of target ---",
            "no such model",
        ]
    else:
        url = f"http://127.0.0.1:{_closed_port()}"
        options = ["--streamguard-toxiproxy", url]
        shown = [
            f"streamguard toxiproxy server unavailable: toxiproxy-server at {url} "
            "(--streamguard-toxiproxy) did not answer GET /version: *refused*"
        ]
    result = pytester.runpytest_subprocess(
        "--streamguard", "-p", "no:cacheprovider", *options, *args, timeout=120
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    # -qq prints no counts line: the short summary names each errored test.
    for test in ("test_a", "test_b"):
        result.stdout.fnmatch_lines([f"ERROR *::{test} - *"])
    result.stdout.fnmatch_lines(shown)
