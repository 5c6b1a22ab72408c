"""Where a load's streams are read: in this process, in local shard processes (``processes=``,
:mod:`pytest_streamguard.load.pool`) or over a Ray cluster (``--streamguard-ray``,
:mod:`pytest_streamguard.load.cluster`).

:func:`sharding` checks ``load()``'s ``processes`` and ``shards`` against the session and the
faults on, before anything starts; :class:`Sharded` reads a load in its shards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from pytest_streamguard.load import LoadPlan, LoadResult
from pytest_streamguard.load.cluster import RayShards, check_shards
from pytest_streamguard.load.pool import (
    arun_processes,
    check_processes,
    resolve_processes,
)
from pytest_streamguard.stream.request import StreamRequest
from pytest_streamguard.stream.trace import FaultRecord


class ShardedFaults(Protocol):
    """What :func:`sharding` asks of the test's faults (``streamguard.faults``)."""

    @property
    def aimed_faults(self) -> list[FaultRecord]:
        """The faults on now that are aimed at streams by their index (``streams=``)."""

    @property
    def pending_on_reader(self) -> list[FaultRecord]:
        """The faults still waiting for this process's reader to see chunk N."""


@dataclass(frozen=True)
class Sharded:
    """A load read in shards: over ``ray`` in ``shards`` tasks (None: one per alive node) when
    it is set, else in ``processes`` local processes."""

    processes: int | None
    shards: int | None
    ray: RayShards | None

    async def arun(self, plan: LoadPlan, request: StreamRequest, client: str) -> LoadResult:
        """Read ``plan`` in the shards, each judging its streams by ``client``, and merge
        their traces."""
        if self.ray is not None:
            return await self.ray.arun(plan, request, self.shards, client)
        assert self.processes is not None
        return await arun_processes(plan, request, self.processes, client)


def sharding(
    plan: LoadPlan,
    processes: int | str | None,
    shards: int | None,
    ray: RayShards | None,
    faults: ShardedFaults,
) -> Sharded | None:
    """How ``load()`` reads ``plan``: None in this process, else its :class:`Sharded` (under
    ``ray`` every load, and ``processes`` is refused). Bad arguments, or a fault that only this
    process's reader can set off, are a ValueError before anything starts."""
    if ray is not None:
        local = None
        if processes is not None:
            check_processes(processes)
            raise ValueError(
                f"load processes={processes!r}: this session shards every load over Ray "
                "(--streamguard-ray); use shards= for the number of Ray tasks"
            )
    else:
        local = resolve_processes(processes, plan.n)
    if shards is not None:
        check_shards(shards)
        if ray is None:
            raise ValueError(
                f"load shards={shards!r} needs a Ray cluster (--streamguard-ray); on this "
                "machine use processes="
            )
    if local is None and ray is None:
        return None
    aimed = faults.aimed_faults
    if aimed:
        how = "with processes=" if local is not None else "over Ray"
        raise ValueError(
            f"faults.{aimed[0].describe()} aims at streams by their index in this test's "
            f"request order, which a load {how} does not keep (its shards number their "
            "own streams): read the load without processes= (or --streamguard-ray), or "
            "aim the fault without streams="
        )
    pending = faults.pending_on_reader
    if pending:
        raise ValueError(
            f"faults.{pending[0].describe()} is set off by this process's reader counting "
            "chunks, which a load with processes= reads elsewhere: read it without "
            "processes=, or set it off without after_chunks"
        )
    return Sharded(local, shards, ray)
