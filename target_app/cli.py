"""``python -m target_app``: parse flags, serve on uvicorn, print the listening line."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
from collections.abc import Sequence

from .app import create_app
from .config import TINY_MODEL, TargetConfig
from .server import TargetServer, uvicorn_config

LISTENING_MESSAGE = "streamguard target listening"
# The name usage and error lines give the program: streamguard-target sets it to its own name.
PROG_ENV = "STREAMGUARD_TARGET_PROG"


def build_parser() -> argparse.ArgumentParser:
    """The command line, with every default shown in ``--help``."""
    d = TargetConfig()
    p = argparse.ArgumentParser(
        prog=os.environ.get(PROG_ENV, "python -m target_app"),
        description="Streaming transformers target for pytest-streamguard.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind")
    p.add_argument("--port", type=int, default=8000, help="port to bind; 0 picks a free one")
    p.add_argument(
        "--model",
        default=TINY_MODEL,
        help=f"{TINY_MODEL!r} (offline tiny model), a Hugging Face model id or a local path",
    )
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default=d.device)
    p.add_argument("--dtype", choices=("auto", "float32", "float16", "bfloat16"), default=d.dtype)
    p.add_argument("--engine", choices=("batch", "generate"), default=d.engine)
    p.add_argument(
        "--cpu-threads",
        type=int,
        default=d.cpu_threads,
        metavar="N",
        help="torch's threads for one op on the CPU (default: 1 for the tiny model, whose ops "
        "are too small to split; torch's own, one per core, for any other); 0 = torch's own",
    )
    p.add_argument(
        "--naive",
        action="store_true",
        help="serve with the blocking anti-pattern (sync streamer iterated in the async handler)",
    )
    p.add_argument(
        "--text-streamer-timeout",
        type=float,
        default=d.text_streamer_timeout,
        metavar="SECONDS",
        help="serve as the incident's app did: a sync generator iterating transformers' "
        "TextIteratorStreamer(timeout=SECONDS), whose queue.Empty escapes mid-body when no "
        "token comes in time; 0 = no timeout (the fix)",
    )
    p.add_argument("--max-concurrency", type=int, default=d.max_concurrency)
    p.add_argument(
        "--heartbeat",
        type=float,
        default=d.heartbeat,
        help="seconds of silence before ': ping'; 0 = off",
    )
    p.add_argument("--max-new-tokens-limit", type=int, default=d.max_new_tokens_limit)
    p.add_argument(
        "--allow-fault-knobs", action="store_true", help="accept the per-request 'fault' object"
    )
    p.add_argument(
        "--send-timeout",
        type=float,
        default=d.send_timeout,
        help="seconds a byte written to a stream may wait for its client to take it (the "
        "oldest byte still in uvicorn's transport buffer or the kernel's send queue); past "
        "that the client is a slow reader: generation is cancelled and the stream is ended",
    )
    p.add_argument(
        "--max-unsent-bytes",
        type=int,
        default=d.max_unsent_bytes,
        help="bytes written to a stream that its client has not taken yet (transport buffer "
        "plus kernel send queue) beyond which the stream is ended as a slow reader",
    )
    p.add_argument(
        "--max-backlog",
        type=int,
        default=d.max_backlog,
        help="unsent tokens buffered per stream while its client is not reading",
    )
    p.add_argument(
        "--stream-timeout",
        type=float,
        default=d.stream_timeout,
        help="seconds without a token from the engine before the stream fails",
    )
    p.add_argument("--max-body-bytes", type=int, default=d.max_body_bytes)
    p.add_argument(
        "--send-buffer",
        type=int,
        default=d.send_buffer,
        help="SO_SNDBUF in bytes for every client connection (fixes the kernel's send buffer "
        "instead of letting it grow to megabytes, so a slow reader's backpressure reaches the "
        "app within a bounded amount of data); 0 = kernel default",
    )
    p.add_argument(
        "--max-header-bytes",
        type=int,
        default=d.max_header_bytes,
        help="largest request line plus headers accepted; a longer head gets 431 and the "
        "connection is closed without reading the rest",
    )
    p.add_argument(
        "--header-timeout",
        type=float,
        default=d.header_timeout,
        help="seconds a client has to send a complete request head (408 after)",
    )
    p.add_argument(
        "--body-timeout",
        type=float,
        default=d.body_timeout,
        help="seconds a client has to send the complete request body (408 after)",
    )
    p.add_argument(
        "--shutdown-grace",
        type=float,
        default=d.shutdown_grace,
        help="on SIGTERM/SIGINT: seconds open streams get to finish while new ones are refused "
        "with 503; streams still open then end with an error event saying the server is "
        "shutting down, and the process exits 0 (a second signal skips the wait)",
    )
    p.add_argument("--seed", type=int, default=d.seed)
    return p


def config_from_args(args: argparse.Namespace) -> TargetConfig:
    """The app settings named by parsed flags."""
    return TargetConfig(
        model=args.model,
        device=args.device,
        dtype=args.dtype,
        engine=args.engine,
        cpu_threads=args.cpu_threads,
        naive=args.naive,
        text_streamer_timeout=args.text_streamer_timeout,
        max_concurrency=args.max_concurrency,
        heartbeat=args.heartbeat,
        max_new_tokens_limit=args.max_new_tokens_limit,
        allow_fault_knobs=args.allow_fault_knobs,
        send_timeout=args.send_timeout,
        max_unsent_bytes=args.max_unsent_bytes,
        max_backlog=args.max_backlog,
        stream_timeout=args.stream_timeout,
        max_body_bytes=args.max_body_bytes,
        send_buffer=args.send_buffer,
        seed=args.seed,
        shutdown_grace=args.shutdown_grace,
        max_header_bytes=args.max_header_bytes,
        header_timeout=args.header_timeout,
        body_timeout=args.body_timeout,
    )


def bind_listener(host: str, port: int, send_buffer: int) -> socket.socket:
    """A bound TCP socket for uvicorn. ``send_buffer`` > 0 sets SO_SNDBUF on it, which Linux
    copies to every accepted connection."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if send_buffer > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


async def serve(config: TargetConfig, host: str, port: int) -> int:
    """Run uvicorn until a signal stops it; print the listening line once bound."""
    try:
        sock = bind_listener(host, port, config.send_buffer)
    except OSError as exc:
        print(f"error: cannot bind {host}:{port}: {exc}", file=sys.stderr, flush=True)
        return 1
    app = create_app(config)
    server = TargetServer(uvicorn_config(app, config, host=host, port=port), app.state.target)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    # uvicorn offers no "bound" event; startup takes milliseconds, and a failed bind ends the
    # task, so poll both.
    while not server.started:
        if task.done():
            break
        await asyncio.sleep(0.01)
    if server.started:
        bound = server.servers[0].sockets[0].getsockname()
        shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        print(
            json.dumps({"message": LISTENING_MESSAGE, "url": f"http://{shown}:{bound[1]}"}),
            flush=True,
        )
    try:
        await task
    except SystemExit as exc:
        return int(exc.code or 1)
    return 0 if server.started else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m target_app``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    config = config_from_args(args)
    problems = config.problems()
    if problems:
        parser.error("; ".join(problems))
    return asyncio.run(serve(config, args.host, args.port))


if __name__ == "__main__":
    sys.exit(main())
