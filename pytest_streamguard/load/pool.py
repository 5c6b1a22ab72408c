"""Sharded loads in local processes: ``streamguard.load(..., processes=N)`` (or ``"auto"``).

The load is split into ``N`` shards (:mod:`pytest_streamguard.load.shards`), each read by a
fresh Python process (running :func:`main`) with its own event loop, so a load uses every
core. The handshake over the child's stdin and stdout:

1. the parent sends the pickled shard (with its ``sys.path``, so a custom
   :class:`~pytest_streamguard.formats.StreamFormat` unpickles in the child);
2. the child imports what it needs, sets up its event loop and its load client, and answers
   ``ready``: none of that start-up delays a stream;
3. once every child is ready the parent sends one origin, a ``perf_counter_ns()`` a little in
   the future; every shard starts its streams at that instant (one machine, one monotonic
   clock), so an open-loop schedule stays the one asked for across processes;
4. the child reads its streams and answers with its traces (builtin-typed dicts), then exits.

Nothing outlives the load: each child is in its own session (Ctrl-C reaches the parent, which
stops them), and watches its stdin: it exits at once when the parent closes it or dies, however
it dies. A child that dies mid-load, or that overruns its shard's bound, leaves its streams in
the result as failed (``network``, ``timeout``), naming the process and why; a child that fails
before it is ready fails the load with its error output.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

from pytest_streamguard.common.numbers import whole
from pytest_streamguard.errors import ShardStartError
from pytest_streamguard.judge import NONE
from pytest_streamguard.load import LoadPlan, LoadResult, _loop_factory
from pytest_streamguard.load.shards import Shard, aread_shard, lost_traces, merge, split
from pytest_streamguard.stream.request import StreamRequest
from pytest_streamguard.stream.trace import StreamTrace

MAX_PROCESSES = 64
#: Seconds a child may take to start and import before the load fails (a busy CI machine).
READY_TIMEOUT = 60.0
#: From the go message to the origin: time for every child to read it.
_GO_LEAD_S = 0.05
#: Beyond a shard's bound: time for a child to pickle and send back a large result.
_RESULT_SLACK_S = 30.0
_STOP_GRACE_S = 2.0
_TAIL_LINES = 20
_READY = b"ready"
_HEADER = 8
# Where this package was imported from: the child falls back to it (last on its sys.path, so
# its own environment wins) when the package is not installed there.
_IMPORT_ROOT = str(Path(__file__).resolve().parents[2])
_BOOTSTRAP = (
    "import sys; sys.path.append(sys.argv[1]); "
    "from pytest_streamguard.load.pool import main; main()"
)


#: ``processes="auto"``: one shard process per core this process may use.
AUTO = "auto"


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity where the OS has one (a container's
    or ``taskset``'s limit), else every core of the machine."""
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        return len(affinity(0))
    return os.cpu_count() or 1


def check_processes(processes: object) -> int | str:
    """``processes`` as given to ``load()``, or a ValueError saying what is accepted."""
    if isinstance(processes, str) and processes == AUTO:
        return AUTO
    if not whole(processes) or not 1 <= processes <= MAX_PROCESSES:
        raise ValueError(
            f"load processes={processes!r} is not accepted: expected an int from 1 to "
            f"{MAX_PROCESSES} (processes that read the load's streams), 'auto' (one per core "
            "this process may use), or None to read them in this process"
        )
    return processes


def resolve_processes(processes: object, streams: int) -> int | None:
    """How many shard processes read a load of ``streams`` streams (or arrivals): None reads
    it in this process. ``"auto"`` is one per usable core (:func:`usable_cores`), never more
    than the streams, and None when that is one: a single shard process would only add its
    start-up. An int is taken as given; anything else is a ValueError."""
    if processes is None:
        return None
    checked = check_processes(processes)
    if isinstance(checked, int):
        return checked
    count = min(usable_cores(), MAX_PROCESSES, streams)
    return count if count > 1 else None


def _frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(_HEADER, "big") + payload


class _Child:
    """The parent's side of one shard process."""

    def __init__(self, shard: Shard, process: asyncio.subprocess.Process) -> None:
        self.shard = shard
        self.process = process
        self.tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        self.drain = asyncio.ensure_future(self._drain())

    @classmethod
    async def start(cls, shard: Shard) -> _Child:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _BOOTSTRAP,
            _IMPORT_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        return cls(shard, process)

    async def send_shard(self) -> None:
        """Send the shard, with this process's ``sys.path`` to unpickle it by."""
        assert self.process.stdin is not None
        self.process.stdin.write(_frame(pickle.dumps((list(sys.path), pickle.dumps(self.shard)))))
        await self.process.stdin.drain()

    async def _drain(self) -> None:
        assert self.process.stderr is not None
        async for line in self.process.stderr:
            self.tail.append(line.decode("utf-8", "replace").rstrip())

    def where(self) -> str:
        """``shard 1 of 2 (50 streams), local process 1234``."""
        return f"{self.shard.describe()}, local process {self.process.pid}"

    async def _receive(self) -> bytes:
        assert self.process.stdout is not None
        size = int.from_bytes(await self.process.stdout.readexactly(_HEADER), "big")
        return await self.process.stdout.readexactly(size)

    async def _exit_note(self) -> str:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_STOP_GRACE_S):
                await self.process.wait()
                await self.drain
        code = self.process.returncode
        status = "is still running" if code is None else f"exited with code {code}"
        tail = "\n".join(self.tail)
        return status + (f"; its output:\n{tail}" if tail else "")

    async def ready(self) -> None:
        """Wait for the child's ``ready``; ShardStartError if it fails first."""
        try:
            answer = await self._receive()
        except asyncio.IncompleteReadError:
            answer = b""
        if answer != _READY:
            raise ShardStartError(
                f"streamguard load {self.where()} failed to start: {await self._exit_note()}"
            )

    def go(self, origin_ns: int) -> None:
        """Tell the child when the load starts."""
        assert self.process.stdin is not None
        self.process.stdin.write(origin_ns.to_bytes(_HEADER, "big"))

    async def result(self, origin_ns: int) -> dict[str, Any] | list[StreamTrace]:
        """The shard's result; failed traces for its streams if it dies or overruns."""
        bound = self.shard.bound_s + _RESULT_SLACK_S
        try:
            async with asyncio.timeout(bound):
                raw = await self._receive()
        except asyncio.IncompleteReadError:
            error = f"{self.where()} died before it returned its traces: "
            return lost_traces(self.shard, origin_ns, "network", error + await self._exit_note())
        except TimeoutError:
            self.process.kill()
            error = f"{self.where()} returned nothing within its bound {bound:g} s; killed: "
            return lost_traces(self.shard, origin_ns, "timeout", error + await self._exit_note())
        result: dict[str, Any] = pickle.loads(raw)
        return result

    async def stop(self) -> None:
        """Make sure the child is gone: close its stdin (it exits at once), then SIGKILL."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        if self.process.returncode is None:
            try:
                async with asyncio.timeout(_STOP_GRACE_S):
                    await self.process.wait()
            except TimeoutError:
                self.process.kill()
        await self.process.wait()
        self.drain.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.drain


async def arun_processes(
    plan: LoadPlan, request: StreamRequest, processes: int | str, client: str = NONE
) -> LoadResult:
    """Run ``plan`` in ``processes`` shard processes (fewer when there are fewer streams;
    ``"auto"``: one per usable core, at least one here)."""
    shards = split(plan, request, resolve_processes(processes, plan.n) or 1, client)
    children: list[_Child] = []
    try:
        for shard in shards:
            children.append(await _Child.start(shard))
            await children[-1].send_shard()
        try:
            async with asyncio.timeout(READY_TIMEOUT):
                await asyncio.gather(*(child.ready() for child in children))
        except TimeoutError:
            raise ShardStartError(
                f"streamguard load: not every one of {len(children)} shard process(es) was "
                f"ready within {READY_TIMEOUT:g} s"
            ) from None
        origin_ns = time.perf_counter_ns() + round(_GO_LEAD_S * 1e9)
        for child in children:
            child.go(origin_ns)
        results = await asyncio.gather(*(child.result(origin_ns) for child in children))
    finally:
        await asyncio.gather(*(child.stop() for child in children))
    return merge(plan, list(results), origin_ns)


# The child's side.


def _read_exact(fd: int, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        more = os.read(fd, size - len(data))
        if not more:
            return None
        data += more
    return data


async def _read(shard: Shard, channel: BinaryIO) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    go: asyncio.Future[int] = loop.create_future()
    received = bytearray()

    def on_stdin() -> None:
        data = os.read(0, _HEADER)
        if not data or go.done():
            # EOF, or anything after the origin: the parent is gone or stopping the load.
            os._exit(1)
        received.extend(data)
        if len(received) >= _HEADER:
            go.set_result(int.from_bytes(received[:_HEADER], "big"))

    async def origin() -> int:
        # Ready only now, with the loop and the shard's client set up: none of that start-up
        # can delay the first streams.
        loop.add_reader(0, on_stdin)
        channel.write(_frame(_READY))
        channel.flush()
        return await go

    return await aread_shard(shard, origin)


def main() -> None:
    """Read one shard as the parent asks (see the module docstring)."""
    channel = os.fdopen(os.dup(1), "wb")
    # Anything else printed (a custom format's debugging, a warning) goes to stderr.
    os.dup2(2, 1)
    header = _read_exact(0, _HEADER)
    if header is None:
        return
    payload = _read_exact(0, int.from_bytes(header, "big"))
    if payload is None:
        return
    path, shard_bytes = pickle.loads(payload)
    sys.path[:0] = [p for p in path if p not in sys.path]
    shard: Shard = pickle.loads(shard_bytes)
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        result = runner.run(_read(shard, channel))
    channel.write(_frame(pickle.dumps(result)))
    channel.flush()
