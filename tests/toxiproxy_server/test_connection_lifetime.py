"""A connection through the embedded proxy is freed by reference counting when it closes, and
no garbage collection runs while connections are open.

The server runs without the automatic garbage collector (server.py): a collection stops every
stream through every proxy while it walks the live objects, so it runs only while no proxy has
a connection open (and at least once a minute). A connection left in a reference cycle would
stay in memory until then. The first check runs in a fresh process (the proxy's classes driven
on uvloop, as the server runs them), with the collector off from the start: each connection is
closed, and its ``Connection`` and ``Link`` objects must be gone (weak references dead) without
any collection, with no toxic, with a toxic whose stage task is cancelled on the way, and with
a toxic added and removed while the connection is open. The second counts the server's
collections (``python_gc_collections_total`` with ``-runtime-metrics``) around 300 connections
made while another one stays open, and that one runs once none is.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from toxiproxy_helpers import REPO, Upstream, connect, recv_exactly, start_server, wait_for

from pytest_streamguard.common.tls import tls_context

SCRIPT = textwrap.dedent(
    """
    import asyncio, gc, json, random, sys, time, weakref
    import uvloop
    from pytest_streamguard.toxiproxy_server.metrics import Metrics
    from pytest_streamguard.toxiproxy_server.proxy import Proxy, split_host_port
    from pytest_streamguard.toxiproxy_server.toxics import new_toxic

    LATENCY = {"name": "lag", "type": "latency", "attributes": {"latency": 1}}
    CUT = {"name": "cut", "type": "chunk_cut", "attributes": {"after_chunks": 5}}

    async def wait_until(condition, what):
        deadline = time.monotonic() + 10
        while not condition():
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {what}")
            await asyncio.sleep(0.005)

    async def echo(reader, writer):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()

    async def main():
        gc.disable()
        upstream = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = upstream.sockets[0].getsockname()[1]
        proxy = Proxy("p", "127.0.0.1:0", f"127.0.0.1:{port}", random.Random(1), Metrics(False))
        await proxy.start()
        host, listen = split_host_port(proxy.listen)
        alive = {}
        for case in ("direct", "latency", "added and removed", "chunk_cut"):
            if case in ("latency", "chunk_cut"):
                proxy.add_toxic(new_toxic(LATENCY if case == "latency" else CUT, lambda n: False))
            reader, writer = await asyncio.open_connection(host, listen)
            await wait_until(lambda: any(c.links for c in proxy.connections), "the links")
            connection = next(iter(proxy.connections))
            refs = [weakref.ref(connection)] + [weakref.ref(l) for l in connection.links.values()]
            del connection
            if case == "added and removed":
                proxy.add_toxic(new_toxic(LATENCY, lambda n: False))
            writer.write(b"ping")
            echoed = await reader.readexactly(4)
            if case == "added and removed":
                proxy.remove_toxic("lag")
            writer.close()
            await writer.wait_closed()
            await wait_until(lambda: not proxy.connections, "the connection to close")
            proxy.reset_toxics()
            await wait_until(lambda: all(r() is None for r in refs), f"{case}: freed")
            alive[case] = {"echoed": echoed.decode(), "alive": sum(r() is not None for r in refs)}
        proxy.stop()
        upstream.close()
        with open(sys.argv[1], "w") as out:
            json.dump(alive, out)

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())
    """
)


def test_closed_connections_are_freed_without_the_collector(tmp_path: Path) -> None:
    """Every case echoes, and leaves none of its connection's objects alive: a reference
    cycle would keep them until a collection, which never runs in this process."""
    result = tmp_path / "cases.json"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(result)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # The result comes in a file of its own: the proxy's log thread prints to the same stdout
    # ("Terminated proxy", ...), after the result or inside its line.
    cases = json.loads(result.read_text())
    assert cases == {
        case: {"echoed": "ping", "alive": 0}
        for case in ("direct", "latency", "added and removed", "chunk_cut")
    }


def collections(api: httpx.Client) -> dict[str, float]:
    """The server's garbage collections so far, per generation."""
    return {
        sample.labels["generation"]: sample.value
        for family in text_string_to_metric_families(api.get("/metrics").text)
        for sample in family.samples
        if sample.name == "python_gc_collections_total"
    }


def test_collections_run_only_while_no_connection_is_open(
    upstream: Callable[..., Upstream],
) -> None:
    """300 connections through the proxy (about 9,000 objects made and freed: a dozen young
    collections with the collector on) while one more stays open: no collection at all; once
    that one closes, a full collection within a few seconds (the server looks every second)."""
    server = start_server("-runtime-metrics")
    try:
        with httpx.Client(base_url=server.url, timeout=10, verify=tls_context()) as api:
            body = {"name": "gc", "listen": "127.0.0.1:0", "upstream": upstream().address}
            listen = api.post("/proxies", json=body).json()["listen"]
            with connect(listen) as held:
                held.sendall(b"x")
                assert recv_exactly(held, 1) == b"x"
                before = collections(api)
                for _ in range(6):
                    socks = [connect(listen) for _ in range(50)]
                    for sock in socks:
                        sock.sendall(b"ping")
                    for sock in socks:
                        assert recv_exactly(sock, 4) == b"ping"
                        sock.close()
                after = collections(api)
            wait_for(
                lambda: collections(api)["2"] > after["2"],
                10,
                "a full collection once no connection is open",
            )
    finally:
        assert server.stop() == 0
    assert set(before) == {"0", "1", "2"}
    assert after == before
