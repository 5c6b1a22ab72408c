"""A connection through the embedded proxy is freed by reference counting when it closes.

The server runs without the automatic garbage collector (server.py): a connection left in a
reference cycle would stay in memory until the next scheduled collection, and a collection
of many at once stops every stream through the proxy. The check runs in a fresh process (the
proxy's classes driven on uvloop, as the server runs them), with the collector off from the
start: each connection is closed, and its ``Connection`` and ``Link`` objects must be gone
(weak references dead) without any collection, with no toxic, with a toxic whose stage task
is cancelled on the way, and with a toxic added and removed while the connection is open.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from toxiproxy_helpers import REPO

SCRIPT = textwrap.dedent(
    """
    import asyncio, gc, json, random, time, weakref
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
        print(json.dumps(alive))

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())
    """
)


def test_closed_connections_are_freed_without_the_collector() -> None:
    """Every case echoes, and leaves none of its connection's objects alive: a reference
    cycle would keep them until a collection, which never runs in this process."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    cases = json.loads(done.stdout.splitlines()[-1])
    assert cases == {
        case: {"echoed": "ping", "alive": 0}
        for case in ("direct", "latency", "added and removed", "chunk_cut")
    }
