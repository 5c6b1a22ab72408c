"""The incident's ingress as a declared service: a real nginx (the plugin's
:class:`~pytest_streamguard.services.ingress.Ingress`) in front of ``--upstream HOST:PORT``
with ``proxy_read_timeout`` ``--read-timeout`` seconds. It prints its listening line (the
stack reads the port from it) and runs until SIGTERM or SIGINT.
Run: ``python ingress.py --upstream 127.0.0.1:8080 --read-timeout 0.5``.
"""

from __future__ import annotations

import argparse
import signal
import threading

from pytest_streamguard.services.ingress import Ingress


def main() -> None:
    """``python ingress.py --upstream HOST:PORT --read-timeout SECONDS``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="the gateway's HOST:PORT")
    parser.add_argument("--read-timeout", type=float, required=True)
    args = parser.parse_args()
    stop = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stop.set())
    with Ingress(args.upstream, read_timeout=args.read_timeout) as ingress:
        print(f"nginx listening on {ingress.url}", flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
