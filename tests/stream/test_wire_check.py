"""The request stamp against a packet capture (issue 28): 10 direct streams of a load and one
``stream()`` under tcpdump.

``benchmarks/wire.py --check`` captures loopback traffic while the load reads 10 streams, then
while the single-stream client reads one, and fails unless every trace's request stamp is after
its connection's SYN (a stamp taken before the connect, when the stream's coroutine starts,
fails here) and within 20 ms of the request's last byte on the wire, each stream matched to its
connection by the client's local port (a client that does not name its connection fails). It
needs tcpdump and root (``make system-deps`` installs tcpdump); without them it fails and says so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_request_stamp_is_after_connect_and_on_the_wire() -> None:
    assert shutil.which("tcpdump") or Path("/usr/bin/tcpdump").exists(), (
        "tcpdump not found: install it (apt-get install tcpdump; make system-deps does)"
    )
    assert os.geteuid() == 0, "the wire check captures on lo with tcpdump, which needs root"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "wire.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
