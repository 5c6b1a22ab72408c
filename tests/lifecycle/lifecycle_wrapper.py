"""A target wrapper for the lifecycle tests: it starts the real command as its own child.

``lifecycle_wrapper.py [--ignore-term] [--never-ready MARKER_DIR --port PORT] -- CMD...``

The command runs as a grandchild of the plugin (like ``sh -c '...'`` or a script that forks).
``--ignore-term`` makes the wrapper ignore SIGTERM and stay alive after the command ends, so
only SIGKILL stops it. ``--never-ready`` runs no command: the wrapper writes a marker file into
MARKER_DIR (so the test knows the plugin is waiting for the target) and a grandchild listens on
PORT without ever answering, so the target never becomes ready.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys


def main() -> int:
    """Run the wrapper (see the module docstring)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--ignore-term", action="store_true")
    parser.add_argument("--never-ready")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("cmd", nargs="*")
    args = parser.parse_args()
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.never_ready:
        # A forked grandchild that never answers, so the whole tree is the plugin's to stop.
        listen = (
            "import signal, socket\n"
            "s = socket.socket()\n"
            f"s.bind(('127.0.0.1', {args.port}))\n"
            "s.listen()\n"
            "while 1: signal.pause()\n"
        )
        child = subprocess.Popen([sys.executable, "-c", listen])
        path = os.path.join(args.never_ready, f"startup-{os.getpid()}")
        with open(path + ".tmp", "w") as marker:
            marker.write(str(child.pid))
        os.replace(path + ".tmp", path)
        while True:
            signal.pause()
    child = subprocess.Popen(args.cmd)
    code = child.wait()
    while args.ignore_term:
        signal.pause()
    return code


if __name__ == "__main__":
    sys.exit(main())
