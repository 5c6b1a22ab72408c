"""A team's app behind its own nginx: starts the app's command (after ``--``), reads the URL
from its listening line, puts a real nginx in front of it (:class:`pytest_streamguard.Ingress`,
``proxy_read_timeout``, ``proxy_buffering``, ``gzip`` of event streams as the team configured
them) and prints nginx's URL on its own listening line. SIGTERM stops both.

    python behind_nginx.py --read-timeout 1 -- python starlette_chat.py --incident tool_pause
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from types import FrameType

from pytest_streamguard import Ingress
from pytest_streamguard.services.processes import listening_url


def stop(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--read-timeout", type=float, default=60.0)
    parser.add_argument("--buffering", action="store_true")
    parser.add_argument("--gzip", action="store_true")
    parser.add_argument("app", nargs="+")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, stop)
    with subprocess.Popen(args.app, stdout=subprocess.PIPE, text=True) as app:
        assert app.stdout is not None
        url = None
        for line in app.stdout:
            url = listening_url(line)
            if url is not None:
                break
        if url is None:
            sys.exit(f"the app exited without a listening line: {args.app}")
        try:
            ingress = Ingress(
                url, read_timeout=args.read_timeout, buffering=args.buffering, gzip=args.gzip
            )
            with ingress:
                print(f"listening on {ingress.url}", flush=True)
                app.wait()
        finally:
            app.terminate()


if __name__ == "__main__":
    main()
