"""Runs the API server and every proxy in one asyncio loop until SIGTERM or SIGINT.

The garbage collector does not run on its own here: a collection stops the loop, and with it
every stream through every proxy, for as long as it walks the live objects (up to 1.5 ms of
CPU with 500 connections open, measured). The data path leaves no reference cycles (a
connection is freed by reference counting as its sockets close), so only the API and toxic
re-wiring leave garbage for the collector, and :func:`collect_garbage` runs it while no
connection is open, or once a minute at the latest.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import random
import signal
import socket
import time
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import uvicorn

from .api import VERSION, Api
from .collection import Collection, PopulateError
from .decode import parse_body
from .errors import ApiError
from .logs import log, log_now
from .metrics import Metrics


@dataclass(frozen=True)
class ServerSettings:
    """What the command line chose."""

    host: str = "127.0.0.1"
    port: int = 8474
    config: Path | None = None
    seed: int | None = None
    runtime_metrics: bool = False


GC_CHECK_S: Final = 1.0
"""How often :func:`collect_garbage` looks whether a collection is due."""
GC_LONGEST_S: Final = 60.0
"""The longest time between two collections, connections open or not."""


async def collect_garbage(collection: Collection) -> None:
    """Run the garbage collector while no proxy has a connection open (when objects were made
    and kept since the last run), and at least every :data:`GC_LONGEST_S`; until cancelled."""
    last = time.monotonic()
    while True:
        await asyncio.sleep(GC_CHECK_S)
        now = time.monotonic()
        idle = not any(proxy.connections for proxy in collection.proxies.values())
        if (idle and gc.get_count()[0] > 0) or now - last >= GC_LONGEST_S:
            gc.collect()
            last = now


class CannotServe(Exception):
    """The server cannot start (bad config file, API port unavailable)."""


class _Uvicorn(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        # Our own handlers stop the loop; uvicorn's would re-raise the signal at exit and
        # turn a clean SIGTERM shutdown into death by signal.
        yield


def bind_api(host: str, port: int) -> socket.socket:
    """Bind and listen on the API address; port 0 picks a free port."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise CannotServe(f"cannot resolve -host {host!r}: {exc}") from None
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    family, _, _, _, sockaddr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(socket.SOMAXCONN)
    except OSError as exc:
        sock.close()
        raise CannotServe(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


async def populate_file(collection: Collection, path: Path) -> int:
    """Populate from a ``-config`` file; any problem stops the start with a clear message."""
    try:
        data = await asyncio.to_thread(path.read_bytes)
    except OSError as exc:
        raise CannotServe(f"cannot read -config file {path}: {exc.strerror or exc}") from None
    try:
        proxies = await collection.populate(parse_body(data))
    except (ApiError, PopulateError) as exc:
        raise CannotServe(
            f"-config file {path} is not a valid Toxiproxy populate file (a JSON array of "
            f"{{name, listen, upstream, enabled}} objects): {exc}"
        ) from None
    return len(proxies)


async def serve(settings: ServerSettings) -> None:
    """Start everything, print the startup line, and run until a stop signal."""
    rng = random.Random(settings.seed)
    metrics = Metrics(runtime=settings.runtime_metrics)
    collection = Collection(rng, metrics)
    try:
        if settings.config is not None:
            count = await populate_file(collection, settings.config)
            log("info", "Populated proxies from file", config=str(settings.config), proxies=count)
        sock = bind_api(settings.host, settings.port)
    except BaseException:
        collection.close()
        raise
    config = uvicorn.Config(
        Api(collection, metrics),
        lifespan="off",
        log_config=None,
        access_log=False,
        server_header=False,
        # h11 takes any method token, so an unknown method gets Go's 404/405 rather than
        # httptools' 400; the API's traffic is too light for the parser's speed to matter.
        http="h11",
        timeout_graceful_shutdown=2,
        timeout_keep_alive=60,
    )
    server = _Uvicorn(config)
    loop = asyncio.get_running_loop()

    def stop() -> None:
        server.should_exit = True

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop)
    log_now(
        "info",
        "Starting Toxiproxy HTTP server",
        host=settings.host,
        port=str(sock.getsockname()[1]),
        version=VERSION,
    )
    # What start-up made (imports, the API app, the populated proxies) lives as long as the
    # process: keep it out of the collector's walks, which otherwise stop every proxy for
    # tens of milliseconds (a full collection walked 79,000 objects) under many connections.
    gc.collect()
    gc.freeze()
    gc.disable()
    collector = loop.create_task(collect_garbage(collection))
    try:
        await server.serve(sockets=[sock])
    finally:
        collector.cancel()
        gc.enable()
        collection.close()
        sock.close()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
