"""How many processes a load reads in (``load/pool.py``): bad counts say what is accepted, and
``'auto'`` is one per usable core (the sharded loads' runs are in
tests/load/test_load_shards.py)."""

from __future__ import annotations

import pytest

from pytest_streamguard.load import pool
from pytest_streamguard.load.pool import check_processes, resolve_processes


@pytest.mark.parametrize("bad", [0, 65, 1.5, True, "2", "Auto", "all"])
def test_bad_processes_say_what_is_accepted(bad: object) -> None:
    with pytest.raises(
        ValueError, match=rf"^load processes={bad!r} is not accepted: expected an.*'auto'"
    ):
        check_processes(bad)


@pytest.mark.parametrize(
    ("cores", "streams", "expected"),
    [(4, 100, 4), (4, 3, 3), (2, 500, 2), (1, 500, None), (8, 1, None), (200, 1000, 64)],
)
def test_auto_processes_is_one_per_usable_core(
    monkeypatch: pytest.MonkeyPatch, cores: int, streams: int, expected: int | None
) -> None:
    # The affinity (a container's or taskset's limit) counts, not the machine's cores.
    monkeypatch.setattr(pool.os, "sched_getaffinity", lambda _: set(range(cores)), raising=False)
    monkeypatch.setattr(pool.os, "cpu_count", lambda: 999)
    assert resolve_processes("auto", streams) == expected
    # Given counts are kept, and None reads in this process.
    assert resolve_processes(3, streams) == 3
    assert resolve_processes(None, streams) is None


def test_auto_processes_without_an_affinity_uses_the_machines_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(pool.os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(pool.os, "cpu_count", lambda: 3)
    assert resolve_processes("auto", 100) == 3
    monkeypatch.setattr(pool.os, "cpu_count", lambda: None)
    assert resolve_processes("auto", 100) is None
