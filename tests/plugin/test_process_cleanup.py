"""No process started by the plugin outlives the session: normal end, Ctrl-C, pytest killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from plugin_helpers import pid_alive
from polling import wait_until

RECORD_PIDS = """
import json, os, signal, threading
import pytest

def test_started(streamguard, streamguard_toxiproxy_server):
    assert streamguard.stream(json={{"max_new_tokens": 2}}).completed
    pids = [streamguard.target.pid, streamguard_toxiproxy_server.pid]
    with open("pids.json.tmp", "w") as f:
        json.dump(pids, f)
    os.replace("pids.json.tmp", "pids.json")
    {then}
"""


@pytest.fixture(autouse=True)
def sigint_as_in_a_terminal() -> Iterator[None]:
    """The inner sessions start with SIGINT at its default, as a terminal's Ctrl-C finds it.

    A suite started in the background of a non-interactive shell (``cmd &`` in a CI script, or
    under ``nohup``) inherits SIGINT ignored, an ignore survives ``exec``, and Python then
    installs no KeyboardInterrupt handler: the inner session's SIGINT would do nothing. A
    handler, unlike an ignore, is reset to the default in an ``exec``'d child.
    """
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _pids(pytester: pytest.Pytester) -> list[int]:
    pids = json.loads((pytester.path / "pids.json").read_text())
    assert all(isinstance(pid, int) for pid in pids)
    return pids


def test_ctrl_c_stops_target_and_server(pytester: pytest.Pytester, app_cmd: str) -> None:
    # The test interrupts its own session the way a terminal's Ctrl-C does.
    pytester.makepyfile(RECORD_PIDS.format(then="os.kill(os.getpid(), signal.SIGINT)"))
    result = pytester.runpytest_subprocess(
        "--streamguard", "--streamguard-target-cmd", app_cmd, "-p", "no:cacheprovider"
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*KeyboardInterrupt*"])
    for pid in _pids(pytester):
        wait_until(lambda pid=pid: not pid_alive(pid), 10, f"process {pid} to end after Ctrl-C")


def test_children_die_when_pytest_is_killed_hard(pytester: pytest.Pytester, app_cmd: str) -> None:
    pytester.makepyfile(RECORD_PIDS.format(then="threading.Event().wait(120)"))
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "pytest", "--streamguard"),
            *("--streamguard-target-cmd", app_cmd, "-p", "no:cacheprovider"),
        ],
        cwd=pytester.path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: (pytester.path / "pids.json").exists(), 60, "the inner test to start")
        pids = _pids(pytester)
        assert all(pid_alive(pid) for pid in pids)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
        for pid in pids:
            wait_until(lambda pid=pid: not pid_alive(pid), 10, f"process {pid} to die with pytest")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


CTRL_C_MID_STREAM = """
import os, signal, threading, time

def test_interrupted(streamguard):
    def interrupt_when_streaming():
        metrics = streamguard.target.metrics
        while metrics()["stream_app_active_streams"].samples[0].value < 1:
            time.sleep(0.02)
        with open("interrupted_at", "w") as f:
            f.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_when_streaming, daemon=True).start()
    streamguard.stream(json={"max_new_tokens": 100000, "interval_s": 0.05})
"""


def test_ctrl_c_mid_stream_keeps_the_partial_trace_and_ends_promptly(
    pytester: pytest.Pytester, app_cmd: str
) -> None:
    pytester.makepyfile(CTRL_C_MID_STREAM)
    result = pytester.runpytest_subprocess(
        *("--streamguard", "--streamguard-target-cmd", app_cmd, "-p", "no:cacheprovider"),
        *("--streamguard-json", "r.json"),
        timeout=60,
    )
    ended = time.time()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["test_ctrl_c_mid_stream_keeps_the_partial_trace_and_ends_promptly.py::test_interrupted *"]
    )
    report = json.loads((pytester.path / "r.json").read_text())
    [test] = report["tests"]
    [trace] = test["traces"]
    assert trace["error_kind"] == "interrupted"
    assert trace["completed"] is False
    # Generous bound (the figure is ~1.5 s on a loaded 2-core machine): the proxy is deleted
    # before the target stops, so the target's graceful shutdown waits on no open stream (it
    # used to wait out the 5 s grace); pytest's own exit is included.
    interrupted_at = float((pytester.path / "interrupted_at").read_text())
    assert ended - interrupted_at < 4.0


CTRL_C_MID_LOAD = """
import os, signal, threading, time

def test_interrupted_load(streamguard):
    def interrupt_when_streaming():
        metrics = streamguard.target.metrics
        while metrics()["stream_app_active_streams"].samples[0].value < 3:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_when_streaming, daemon=True).start()
    streamguard.load(3, json={"max_new_tokens": 100000, "interval_s": 0.05})
"""


def test_ctrl_c_mid_load_keeps_every_partial_trace(pytester: pytest.Pytester, app_cmd: str) -> None:
    pytester.makepyfile(CTRL_C_MID_LOAD)
    result = pytester.runpytest_subprocess(
        *("--streamguard", "--streamguard-target-cmd", app_cmd, "-p", "no:cacheprovider"),
        *("--streamguard-json", "r.json"),
        timeout=60,
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
    report = json.loads((pytester.path / "r.json").read_text())
    [test] = report["tests"]
    assert len(test["traces"]) == 3
    # The summary has the load's row (it used to have none), counting the chunks its traces
    # hold: however many arrived before the interrupt (the app counted 3 streams as started,
    # which on a busy machine may be before the client read any chunk).
    chunks = sum(len(trace["chunks"]) for trace in test["traces"])
    result.stdout.fnmatch_lines([f"*::test_interrupted_load * {chunks} * error *"])
    for trace in test["traces"]:
        assert (trace["completed"], trace["error_kind"]) == (False, "interrupted")
        assert trace["end_ns"] is not None
