"""What the plugin reads from a process it starts (``services/processes.py``): its output in the
order written, its listening line even when a log line from another thread lands inside it, the
listening lines of the usual frameworks, and the ports its process group listens on."""

from __future__ import annotations

import random
import socket
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from polling import wait_until

from pytest_streamguard.errors import StartupError
from pytest_streamguard.services import processes
from pytest_streamguard.services.output import OutputLog
from pytest_streamguard.services.processes import (
    FREE_PORT_LOW,
    ManagedProcess,
    free_port,
    listening_sockets,
    listening_url,
)

# Forty lines alternating between stdout and stderr, flushed one by one, then a failed exit.
ALTERNATING = (
    "import sys\n"
    "for i in range(40):\n"
    "    stream = sys.stdout if i % 2 == 0 else sys.stderr\n"
    "    stream.write(f'line {i} on {stream.name}\\n')\n"
    "    stream.flush()\n"
    "raise SystemExit(3)\n"
)


def test_output_tail_keeps_the_order_of_stdout_and_stderr() -> None:
    process = ManagedProcess("child", [sys.executable, "-c", ALTERNATING])
    try:
        try:
            process.wait_for_line(lambda line: None, timeout=30.0)
        except StartupError as exc:
            message = str(exc)
        else:
            raise AssertionError("the child exited without a listening line; expected an error")
    finally:
        process.stop()
    tail = message.split("--- last output of child ---\n", 1)[1].splitlines()
    # With two pipes read by two threads, lines of one stream could come before earlier lines
    # of the other; the order must be exactly the order written.
    assert tail == [f"line {i} on {'<stdout>' if i % 2 == 0 else '<stderr>'}" for i in range(40)]
    assert "(exit code 3)" in message


class _LateLog(OutputLog):
    """A log whose reader keeps what it read only once the test has seen the child exit (a
    busy machine's reader thread, behind the thread that polls)."""

    def __init__(self) -> None:
        super().__init__("child")
        self.exit_seen = threading.Event()

    def add_lines(self, lines: Sequence[bytes | str], stamp_ns: int, *, cut: int = -1) -> None:
        self.exit_seen.wait(30.0)
        super().add_lines(lines, stamp_ns, cut=cut)


def test_a_process_that_printed_and_exited_fails_with_what_it_printed() -> None:
    # Its exit can be seen before its last words are read: a port-taken retry once missed
    # "address already in use" so, and failed with "(no output)".
    log = _LateLog()
    said = "ERROR: [Errno 98] address already in use"
    process = ManagedProcess("child", [sys.executable, "-c", f"print({said!r})"], output=log)
    try:
        process.popen.wait()
        log.exit_seen.set()
        message = str(process.failure("exited before it answered"))
    finally:
        process.stop()
    assert message.endswith(f"--- last output of child ---\n{said}"), message


def test_listening_line_with_another_line_written_into_it() -> None:
    # print() writes the JSON and its newline separately; a log line from another thread,
    # through the shared pipe, can end up between the two.
    line = '{"message": "streamguard target listening", "url": "http://127.0.0.1:5001"}INFO: up'
    assert listening_url(line) == "http://127.0.0.1:5001"
    assert listening_url('{"message": "no url here"}') is None
    assert listening_url("{not json") is None


# What each framework prints once it listens (their own words), and the URL the plugin dials.
FRAMEWORK_LINES = [
    ("gateway listening on http://127.0.0.1:8080", "http://127.0.0.1:8080"),
    ('{"level":30,"msg":"Server listening at http://127.0.0.1:3000"}', "http://127.0.0.1:3000"),
    (
        "ready - started server on 0.0.0.0:3000, url: http://localhost:3000",
        "http://localhost:3000",
    ),
    ("2026/12/04 12:00:00 Listening on :8080", "http://127.0.0.1:8080"),
    ("Tomcat started on port 8080 (http) with context path ''", "http://127.0.0.1:8080"),
    (
        "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",
        "http://127.0.0.1:8000",
    ),
    (" * Running on http://127.0.0.1:5000", "http://127.0.0.1:5000"),
    ("serving on [::]:9000", "http://127.0.0.1:9000"),
    (
        '{"message": "streamguard target listening", "url": "http://127.0.0.1:5001"}',
        "http://127.0.0.1:5001",
    ),
]


# Lines that name a time, a progress figure or nothing to listen on.
NOT_LISTENING = [
    "Server started in 0:00:03",
    "loading model 50% (12:30)",
    "ready in 3.2s",
    "connected to redis at 127.0.0.1:6379",
]


@pytest.mark.parametrize(("line", "url"), FRAMEWORK_LINES)
def test_listening_lines_of_the_usual_frameworks(line: str, url: str) -> None:
    assert listening_url(line) == url


@pytest.mark.parametrize("line", NOT_LISTENING)
def test_lines_that_do_not_listen(line: str) -> None:
    assert listening_url(line) is None


# What a socket bound to each address is dialled on: the kernel's /proc rows are the oracle.
BOUND_AND_DIALLED = [
    ("127.0.0.1", "127.0.0.1"),
    ("127.0.0.2", "127.0.0.2"),
    ("0.0.0.0", "127.0.0.1"),
    ("::1", "[::1]"),
    ("::ffff:127.0.0.2", "127.0.0.2"),
    ("::", "127.0.0.1"),
]


@pytest.mark.parametrize(("address", "dialled"), BOUND_AND_DIALLED)
def test_listening_sockets_of_a_process_group(tmp_path: Path, address: str, dialled: str) -> None:
    port_file = tmp_path / "port"
    family = "socket.AF_INET6" if ":" in address else "socket.AF_INET"
    code = (
        "import socket, sys, time\n"
        f"s = socket.socket({family}); s.bind(({address!r}, 0)); s.listen()\n"
        f"open({str(port_file)!r}, 'w').write(str(s.getsockname()[1]))\n"
        "time.sleep(60)\n"
    )
    process = ManagedProcess("listener", [sys.executable, "-c", code])
    try:
        wait_until(
            lambda: port_file.exists() and bool(port_file.read_text()), 30, "the child's port"
        )
        assert listening_sockets(process.pid) == [(dialled, int(port_file.read_text()))]
    finally:
        process.stop()
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        # A socket of this process (another group) is not the child's.
        assert other.getsockname()[1] not in {port for _, port in listening_sockets(process.pid)}


def test_a_free_port_is_drawn_below_the_range_port_0_binds_draw_from() -> None:
    # The kernel's own range, read here as the oracle (Linux): a port-0 bind of any other
    # process lands in it, so a port drawn below it cannot be taken that way meanwhile.
    with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as bounds:
        low = int(bounds.read().split()[0])
    assert low - FREE_PORT_LOW >= 1000, "this machine's ephemeral range leaves no room below it"
    with socket.socket() as zero:
        zero.bind(("127.0.0.1", 0))
        assert zero.getsockname()[1] >= low
    ports = [free_port() for _ in range(40)]
    assert all(FREE_PORT_LOW <= port < low for port in ports), ports
    for port in ports[:5]:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # free, as said


def test_free_ports_differ_under_the_same_random_seed() -> None:
    # pytest-randomly seeds `random` alike in every xdist worker before each test: two workers
    # drawing with it would draw the same ports.
    drawn = set()
    for _ in range(5):
        random.seed(1234)
        drawn.add(free_port())
    assert len(drawn) > 1, drawn


def test_a_taken_port_is_not_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        draws = iter([taken, taken])
        real = processes._RANDOM.randrange
        monkeypatch.setattr(
            processes._RANDOM, "randrange", lambda a, b: next(draws, None) or real(a, b)
        )
        port = free_port()
    assert port != taken
    assert port >= FREE_PORT_LOW
