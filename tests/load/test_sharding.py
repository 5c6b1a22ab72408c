"""Where a load is read (load/sharding.py): its processes= and shards= arguments checked against
the session and the faults on, before anything starts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from pytest_streamguard.load import LoadPlan
from pytest_streamguard.load.cluster import RayShards
from pytest_streamguard.load.sharding import Sharded, sharding
from pytest_streamguard.stream.trace import FaultRecord

PLAN = LoadPlan(n=4)
# Only whether a session has a Ray cluster matters before the load starts.
RAY = cast(RayShards, object())


@dataclass
class FaultsOn:
    aimed_faults: list[FaultRecord] = field(default_factory=list)
    pending_on_reader: list[FaultRecord] = field(default_factory=list)


def stall(**params: Any) -> FaultRecord:
    return FaultRecord(kind="stall", params=params, toxics=[])


def test_a_load_without_processes_or_ray_is_read_here() -> None:
    assert sharding(PLAN, None, None, None, FaultsOn()) is None


def test_processes_shard_the_load_locally() -> None:
    assert sharding(PLAN, 2, None, None, FaultsOn()) == Sharded(2, None, None)


def test_under_ray_every_load_is_sharded_over_it() -> None:
    assert sharding(PLAN, None, 3, RAY, FaultsOn()) == Sharded(None, 3, RAY)


def test_processes_are_refused_under_ray_once_they_are_valid() -> None:
    with pytest.raises(ValueError, match=r"processes=2: this session shards every load over Ray"):
        sharding(PLAN, 2, None, RAY, FaultsOn())
    with pytest.raises(ValueError, match=r"processes=0 is not accepted"):
        sharding(PLAN, 0, None, RAY, FaultsOn())


def test_shards_need_a_ray_cluster() -> None:
    with pytest.raises(ValueError, match=r"shards=2 needs a Ray cluster"):
        sharding(PLAN, None, 2, None, FaultsOn())


@pytest.mark.parametrize(
    ("processes", "ray", "how"), [(2, None, "with processes="), (None, RAY, "over Ray")]
)
def test_a_fault_aimed_by_stream_index_refuses_a_sharded_load(
    processes: int | None, ray: RayShards | None, how: str
) -> None:
    faults = FaultsOn(aimed_faults=[stall(after_chunks=3, streams=[0])])
    with pytest.raises(ValueError, match=rf"faults\.stall\(after_chunks=3, .* load {how} does"):
        sharding(PLAN, processes, None, ray, faults)


def test_a_fault_set_off_by_this_reader_refuses_a_sharded_load() -> None:
    faults = FaultsOn(pending_on_reader=[FaultRecord(kind="freeze", params={}, toxics=[])])
    with pytest.raises(ValueError, match=r"faults\.freeze\(\) is set off by this process's"):
        sharding(PLAN, 2, None, None, faults)
    assert sharding(PLAN, None, None, None, faults) is None
