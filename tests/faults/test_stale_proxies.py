"""A session removes a killed session's proxy from a shared Toxiproxy server, and only that."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from pytest_streamguard.faults.toxiproxy_client import ToxiproxyAPI, proxy_name

USES_PROXY = "def test_reads(streamguard):\n    assert streamguard.stream().completed\n"


def _dead_pid() -> int:
    # A process that has exited and been reaped: its pid names no process now.
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_next_session_removes_a_dead_sessions_proxy_and_keeps_live_ones(
    pytester: pytest.Pytester, toxiproxy_url: str, run: Callable[..., pytest.RunResult]
) -> None:
    dead = _dead_pid()
    live = proxy_name()  # this process: alive, with its real start time
    names = {
        "dead": f"streamguard_{dead}_0_abc123",
        "dead_old_format": f"streamguard_{_dead_pid()}_abc123",
        # Our pid but another start time: the pid was reused by a new process.
        "reused": f"streamguard_{os.getpid()}_1_abc123",
        "live": live,
        "live_old_format": f"streamguard_{os.getpid()}_abc123",
        "foreign": "someone_elses_proxy",
    }
    api = ToxiproxyAPI(toxiproxy_url)
    try:
        for name in names.values():
            api.create_proxy(name, "127.0.0.1:9")
        pytester.makepyfile(USES_PROXY)
        run().assert_outcomes(passed=1)
        left = set(api.proxy_names())
        for name in left & set(names.values()):
            api.destroy_proxy(api.get_proxy(name))
    finally:
        api.close()
    assert names["dead"] not in left
    assert names["dead_old_format"] not in left
    assert names["reused"] not in left
    assert {names["live"], names["live_old_format"], names["foreign"]} <= left
    # The inner session's own proxy is gone too (deleted at its end).
    assert not [n for n in left if n.startswith("streamguard_") and n not in names.values()]
