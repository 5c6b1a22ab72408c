"""What the plugin reads from a process it starts: its output in the order written, and its
listening line even when a log line from another thread lands inside it."""

from __future__ import annotations

import sys

from pytest_streamguard.errors import StartupError
from pytest_streamguard.services.processes import ManagedProcess, listening_url

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


def test_listening_line_with_another_line_written_into_it() -> None:
    # print() writes the JSON and its newline separately; a log line from another thread,
    # through the shared pipe, can end up between the two.
    line = '{"message": "streamguard target listening", "url": "http://127.0.0.1:5001"}INFO: up'
    assert listening_url(line) == "http://127.0.0.1:5001"
    assert listening_url('{"message": "no url here"}') is None
    assert listening_url("{not json") is None
