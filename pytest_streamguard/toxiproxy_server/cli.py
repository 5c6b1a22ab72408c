"""``streamguard-toxiproxy``: toxiproxy-server's command line for the embedded server."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from .api import VERSION
from .logs import flush_logs
from .server import CannotServe, ServerSettings, serve


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}: expected 0-65535") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"invalid port {port}: expected 0-65535")
    return port


def build_parser() -> argparse.ArgumentParser:
    """The flags of toxiproxy-server; each works with one dash or two, and with ``=``."""
    parser = argparse.ArgumentParser(
        prog="streamguard-toxiproxy",
        description="A server that speaks Toxiproxy 2.12's HTTP API (pytest-streamguard).",
        allow_abbrev=False,
    )
    parser.add_argument("-host", "--host", default="127.0.0.1", help="API host (127.0.0.1)")
    parser.add_argument(
        "-port", "--port", type=_port, default=8474, help="API port; 0 picks one (8474)"
    )
    parser.add_argument(
        "-config", "--config", type=Path, help="JSON populate file to load at start"
    )
    parser.add_argument(
        "-seed",
        "--seed",
        type=int,
        help="seed for toxicity, jitter and slicer draws (reproducible; the real server "
        "ignores it since 2.9)",
    )
    parser.add_argument(
        "-proxy-metrics",
        "--proxy-metrics",
        action="store_true",
        help="accepted for compatibility: proxy metrics are always on /metrics here",
    )
    parser.add_argument(
        "-runtime-metrics",
        "--runtime-metrics",
        action="store_true",
        help="also export process metrics on /metrics",
    )
    parser.add_argument("-version", "--version", action="store_true", help="print the version")
    return parser


def _run(settings: ServerSettings) -> None:
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(settings))
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve(settings))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the server; exit status 0 after SIGTERM/SIGINT, 1 if it cannot start."""
    args = build_parser().parse_args(argv)
    if args.version:
        print(f"toxiproxy-server version {VERSION}")
        return 0
    settings = ServerSettings(
        host=args.host,
        port=args.port,
        config=args.config,
        seed=args.seed,
        runtime_metrics=args.runtime_metrics,
    )
    try:
        _run(settings)
    except CannotServe as exc:
        print(f"streamguard-toxiproxy: {exc}", file=sys.stderr)
        return 1
    finally:
        flush_logs()
    return 0
