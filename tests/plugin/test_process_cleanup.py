"""No process started by the plugin outlives the session: normal end, Ctrl-C, pytest killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from plugin_helpers import pid_alive, wait_until

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
