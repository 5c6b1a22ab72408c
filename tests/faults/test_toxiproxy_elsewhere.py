"""A Toxiproxy in a container, as CI's ``services:`` job runs it, emulated on loopback.

In that job (.github/workflows/ci.yml) Toxiproxy runs in a container whose API port and a range
of proxy ports are published on the runner; the proxies listen inside the container, clients on
the runner dial the published ports, and Toxiproxy reaches the app on the runner through the
Docker bridge. Here each of those addresses is a loopback address of its own (Linux routes all
of 127.0.0.0/8 to loopback):

- the app serves the same port on 127.0.0.1 (what the runner dials directly) and on 127.0.0.3
  (the runner as the container sees it), as an app bound to every interface does;
- the proxies listen on 127.0.0.2, on ports of ``--streamguard-proxy-ports`` (the published
  range), and clients dial them there;
- the Toxiproxy is the real ``toxiproxy-server`` binary whose path STREAMGUARD_TOXIPROXY_SERVER
  gives, else the embedded server, started alike (its own process, reached by URL). The run
  says which it used; neither is ever skipped.

Not emulated: a wildcard proxy host (0.0.0.0 inside the container, clients dialing the API's
host), since tests bind loopback addresses only; ``proxy_url`` is checked for it in
test_proxy_host.py.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from served import load_stream_app, serve_in_thread

from pytest_streamguard.faults.toxiproxy_client import ToxiproxyAPI, ToxiproxyServer
from pytest_streamguard.services.processes import ManagedProcess, free_port

RUNNER = "127.0.0.1"
BRIDGE = "127.0.0.3"
PROXIES = "127.0.0.2"
BODY = '{"max_new_tokens": 5, "interval_s": 0.01}'
SERVER_ENV = "STREAMGUARD_TOXIPROXY_SERVER"
# The local address of each request the app served (the app runs in a thread of this process).
SERVED_ON: list[str] = []


@pytest.fixture(scope="module")
def container_toxiproxy() -> Iterator[tuple[str, str]]:
    """(API URL, what runs it): the real binary named by STREAMGUARD_TOXIPROXY_SERVER on a free
    loopback port, or the embedded server."""
    binary = os.environ.get(SERVER_ENV, "")
    if not binary:
        embedded = ToxiproxyServer.embedded(startup_timeout=30.0)
        try:
            yield embedded.url, f"embedded {embedded.version}"
        finally:
            embedded.stop()
        return
    # Set but wrong is an error, not a quiet fallback to the embedded server.
    assert Path(binary).is_file(), f"{SERVER_ENV}={binary!r}: no such file"
    port = free_port()
    process = ManagedProcess("toxiproxy-server", [binary, "-host", RUNNER, "-port", str(port)])
    url = f"http://{RUNNER}:{port}"
    try:
        process.wait_ready(f"{url}/version", 30.0)
        api = ToxiproxyAPI(url)
        try:
            version = api.version()
        finally:
            api.close()
        yield url, f"toxiproxy-server {version}"
    finally:
        process.stop()


@pytest.fixture(scope="module")
def app_port() -> Iterator[int]:
    """The example app on one port of both 127.0.0.1 and 127.0.0.3; each request's local
    address is recorded in ``SERVED_ON``."""
    app = load_stream_app().app

    async def recording(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            SERVED_ON.append(scope["server"][0])
        await app(scope, receive, send)

    with ExitStack() as stack:
        runner = stack.enter_context(socket.socket())
        runner.bind((RUNNER, 0))
        port = int(runner.getsockname()[1])
        bridge = stack.enter_context(socket.socket())
        bridge.bind((BRIDGE, port))
        stack.enter_context(serve_in_thread(recording, [runner, bridge]))
        yield port


def _port_range(size: int) -> tuple[range, list[socket.socket]]:
    """``size`` consecutive ports free on 127.0.0.2, the first kept bound (and listening) by
    the returned socket so that a proxy must skip it."""
    for base in range(21000, 40000, 97):
        taken: list[socket.socket] = []
        try:
            for port in range(base, base + size):
                sock = socket.socket()
                taken.append(sock)
                sock.bind((PROXIES, port))
        except OSError:
            for sock in taken:
                sock.close()
            continue
        taken[0].listen()
        for sock in taken[1:]:
            sock.close()
        return range(base, base + size), taken[:1]
    raise AssertionError(f"no {size} consecutive free ports on {PROXIES}")


def _run(pytester: pytest.Pytester, url: str, port: int, *args: str) -> pytest.RunResult:
    return pytester.runpytest(
        "--streamguard",
        "--streamguard-toxiproxy",
        url,
        "--streamguard-target-url",
        f"http://{RUNNER}:{port}",
        "--streamguard-proxy-host",
        PROXIES,
        "--streamguard-upstream-host",
        BRIDGE,
        "-p",
        "no:cacheprovider",
        *args,
    )


def test_a_stream_and_a_fault_through_a_toxiproxy_in_a_container(
    pytester: pytest.Pytester, container_toxiproxy: tuple[str, str], app_port: int
) -> None:
    url, kind = container_toxiproxy
    print(f"toxiproxy: {kind}", file=sys.stderr)
    ports, held = _port_range(3)
    try:
        pytester.makepyfile(
            f"""
            def test_through_the_published_port(streamguard):
                # The first port of the range is taken: the proxy listens on the next one,
                # where the client dials it; Toxiproxy reaches the app at the bridge address.
                assert streamguard.url == "http://{PROXIES}:{ports[1]}", streamguard.url
                assert streamguard.api.upstream(streamguard.proxy) == "{BRIDGE}:{app_port}"
                trace = streamguard.stream(json={BODY})
                assert trace.completed, trace.error
                assert trace.text == "tok0 tok1 tok2 tok3 tok4 "
                streamguard.faults.latency(300)
                slow = streamguard.stream(json={BODY})
                assert slow.completed, slow.error
                # The toxic delays the first token by at least its latency (a lower bound,
                # whatever the machine's load).
                assert slow.ttft >= 0.3, slow.ttft
            """
        )
        SERVED_ON.clear()
        result = _run(
            pytester, url, app_port, "--streamguard-proxy-ports", f"{ports[0]}-{ports[-1]}"
        )
        result.assert_outcomes(passed=1)
    finally:
        for sock in held:
            sock.close()
    # Both streams went through Toxiproxy to the bridge address; only the plugin's readiness
    # check (which dials the target directly) used the runner's.
    assert SERVED_ON.count(BRIDGE) == 2, SERVED_ON
    assert set(SERVED_ON) == {RUNNER, BRIDGE}, SERVED_ON


def test_no_free_port_in_the_range_is_a_clear_error(
    pytester: pytest.Pytester, container_toxiproxy: tuple[str, str], app_port: int
) -> None:
    url, _ = container_toxiproxy
    ports, held = _port_range(1)
    try:
        pytester.makepyfile("def test_proxied(streamguard): pass")
        result = _run(pytester, url, app_port, "--streamguard-proxy-ports", str(ports[0]))
    finally:
        for sock in held:
            sock.close()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            f"*create proxy * no port of {ports[0]}-{ports[0]} (--streamguard-proxy-ports) "
            f"could be listened on at {PROXIES}; the last error: *"
        ]
    )


@pytest.mark.parametrize("value", ["20000-19999", "0-5", "20000-", "a-b", "70000"])
def test_bad_port_ranges_are_usage_errors(pytester: pytest.Pytester, value: str) -> None:
    pytester.makepyfile("def test_nothing(): pass")
    result = pytester.runpytest("--streamguard", "--streamguard-proxy-ports", value)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: '{value}' from --streamguard-proxy-ports is not a valid "
            "streamguard_proxy_ports: expected a port range LOW-HIGH with 1 <= LOW <= HIGH "
            "<= 65535, such as 20000-20019, or one port"
        ]
    )
