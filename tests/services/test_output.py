"""What a started process wrote, and a followed log file, kept line by line with their arrival
stamps, bounded in memory whatever comes (binary bytes, a 10 MB line, no last newline, a closed
stderr, a flood), and a log file followed through rotation and its vanishing."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from polling import wait_until

from pytest_streamguard.services.output import BYTES_CAP, LINE_CAP, OutputLog, follow
from pytest_streamguard.services.processes import ManagedProcess


def _run(code: str) -> OutputLog:
    """The output of ``python -c code`` once it exited and its pipe was read to the end."""
    process = ManagedProcess("child", [sys.executable, "-c", code])
    try:
        process.popen.wait(60.0)
        wait_until(lambda: not process._reader.is_alive(), 30.0, "the pipe's end")
    finally:
        process.stop()
    return process.output


def _texts(log: OutputLog) -> list[str]:
    return [text for _, text in log.between(0, time.perf_counter_ns())]


def test_lines_are_stamped_on_the_streams_clock_in_the_order_written() -> None:
    before = time.perf_counter_ns()
    log = _run("import sys\nprint('out', flush=True)\nprint('err', file=sys.stderr)")
    stamps = [stamp for stamp, _ in log.between(0, time.perf_counter_ns())]
    assert _texts(log) == ["out", "err"]
    assert before <= stamps[0] <= stamps[1] <= time.perf_counter_ns()


def test_binary_output_a_last_line_without_newline_and_a_closed_stderr() -> None:
    code = (
        "import os, sys\n"
        "os.write(1, b'bin \\xff\\xfe\\x00 end\\n')\n"
        "os.close(2)\n"
        "print('after stderr closed', flush=True)\n"
        "sys.stdout.write('no newline')\n"
    )
    log = _run(code)
    assert _texts(log) == ["bin \ufffd\ufffd\x00 end", "after stderr closed", "no newline"]
    assert log.losses() == ""


def test_a_10_mb_line_is_cut_and_the_next_line_kept() -> None:
    log = _run("import sys\nsys.stdout.write('x' * 10_000_000 + '\\nnext\\n')")
    texts = _texts(log)
    assert texts == ["x" * LINE_CAP + " [line cut]", "next"]
    assert log.losses() == "child: lines 1 cut to bound memory"


def test_a_flood_of_output_keeps_at_most_the_cap() -> None:
    # 20 MB in 100-byte lines: the oldest go, the newest stay.
    log = _run("import sys\nfor i in range(200_000): sys.stdout.write(f'{i:099d}\\n')")
    assert log.size <= BYTES_CAP
    assert log.count == 200_000
    assert _texts(log)[-1] == f"{199_999:099d}"
    assert log.dropped > 190_000
    assert "dropped" in log.losses()


def test_wait_for_line_finds_a_line_after_older_lines_were_dropped() -> None:
    code = "import sys\nfor i in range(50_000): print('x' * 99)\nprint('listening on :1')"
    process = ManagedProcess("child", [sys.executable, "-c", code])
    try:
        found = process.wait_for_line(lambda line: line if "listening" in line else None, 60.0)
    finally:
        process.stop()
    assert found == "listening on :1"


def _followed(path: Path) -> tuple[OutputLog, threading.Event]:
    log, stop = OutputLog("app"), threading.Event()
    follow(log, str(path), stop)
    return log, stop


def _append(path: Path, text: str) -> None:
    with open(path, "a") as file:
        file.write(text)


def test_a_followed_file_is_read_from_its_end_through_rotation(tmp_path: Path) -> None:
    path = tmp_path / "app.log"
    path.write_text("before the session\n")
    log, stop = _followed(path)
    try:
        # The follower opens the file at its end in its own thread: write until it reads.
        wait_until(lambda: _append(path, "one\n") or "one" in _texts(log), 10.0, "the first line")
        os.rename(path, tmp_path / "app.log.1")  # logrotate's default: rename, new file
        _append(path, "two\n")
        wait_until(lambda: "two" in _texts(log), 10.0, "the line of the new file")
        path.write_text("")  # copytruncate (seen when the file is shorter than what was read)
        wait_until(lambda: any("truncated" in t for t in _texts(log)), 10.0, "the truncation")
        _append(path, "three\n")
        wait_until(lambda: "three" in _texts(log), 10.0, "the line after truncation")
    finally:
        stop.set()
    texts = _texts(log)
    assert "before the session" not in texts
    assert any("was replaced (rotated)" in text for text in texts)


def test_a_followed_files_long_line_is_kept_once_cut_and_crlf_ends_are_stripped(
    tmp_path: Path,
) -> None:
    # 200 KB with no newline reaches the follower over several reads: one cut line, not one
    # line per read.
    path = tmp_path / "app.log"
    path.write_text("")
    log, stop = _followed(path)
    try:
        wait_until(lambda: _append(path, "one\r\n") or "one" in _texts(log), 10.0, "a line")
        _append(path, "y" * 200_000 + "\nnext\n")
        wait_until(lambda: "next" in _texts(log), 10.0, "the line after the long one")
    finally:
        stop.set()
    texts = _texts(log)
    assert texts[texts.index("next") - 1] == "y" * LINE_CAP + " [line cut]"
    assert sum(text.startswith("y") for text in texts) == 1
    assert log.cut == 1


def test_a_vanished_file_is_said_once_and_read_again_when_back(tmp_path: Path) -> None:
    path = tmp_path / "app.log"
    log, stop = _followed(path)
    try:
        wait_until(lambda: any("vanished" in t for t in _texts(log)), 10.0, "the vanished line")
        _append(path, "back\n")
        wait_until(lambda: "back" in _texts(log), 10.0, "the line of the file come back")
        path.unlink()
        wait_until(lambda: sum("vanished" in t for t in _texts(log)) == 2, 10.0, "vanished again")
    finally:
        stop.set()


def test_a_window_whose_first_lines_were_dropped_says_so() -> None:
    log = OutputLog("app")
    log.add("first", 10)
    assert not log.lost_before(5)
    for k in range(20_000):
        log.add("x" * 99, 100 + k)
    assert log.lost_before(50)
    assert not log.lost_before(20_099)


def test_a_line_added_whole_keeps_no_line_end() -> None:
    log = OutputLog("app")
    log.add(b"from bytes\r\n", 1)
    log.add("from text\n", 2)
    assert [text for _, text in log.between(0, 3)] == ["from bytes", "from text"]
