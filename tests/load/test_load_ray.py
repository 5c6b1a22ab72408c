"""Loads sharded over a Ray cluster (``--streamguard-ray``): a real 2-node local cluster.

``ray.cluster_utils.Cluster`` starts two nodes of 1 CPU each on this machine, bound to
127.0.0.1 (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` makes Ray pick the loopback address, as it
does on a laptop). The pytester runs join it by address, as a CI job joins a KubeRay cluster.
Nothing of Ray outlives the module: the cluster is shut down and no ``raylet`` or
``gcs_server`` process may remain. Without Ray installed (the ``ray`` extra, which ``make
install`` installs) these tests fail and say so; Ray is imported by the cluster's fixture, not at
collection, where it cost every xdist worker 0.4 s of CPU.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from polling import wait_until

RAY_PROCESSES = (b"raylet", b"gcs_server")


def _ray_pids() -> list[int]:
    """Processes of this user whose command line names a Ray daemon."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if any(name in cmdline for name in RAY_PROCESSES):
            found.append(int(entry))
    return found


# The pytester runs reach the cluster object through this module (same interpreter).
CLUSTER: dict[str, Any] = {}


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    """Two nodes, 1 CPU each, on 127.0.0.1; shut down (and checked gone) after the module."""
    try:
        import ray
        from ray import cluster_utils
    except ImportError as exc:
        pytest.fail(f"Ray is not installed ({exc}): pip install -e '.[ray]' (make install does)")
    assert _ray_pids() == [], "Ray daemons were running before the test"
    saved = os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    cluster = cluster_utils.Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    try:
        CLUSTER["cluster"] = cluster
        CLUSTER["worker"] = cluster.add_node(num_cpus=1)
        yield cluster
    finally:
        CLUSTER.clear()
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
        if saved is None:
            del os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"]
        else:
            os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = saved
    wait_until(lambda: _ray_pids() == [], 30, "every raylet and gcs_server to exit")


def test_a_load_sharded_over_two_nodes_keeps_every_trace(
    pytester: pytest.Pytester, run, ray_cluster: Any
) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(
        """
import json

import pytest

from pytest_streamguard.verdict.stats import percentile

BODY = {"max_new_tokens": 6, "interval_s": 0.02}

def test_hundred_on_two_nodes(streamguard):
    result = streamguard.load(100, json=BODY)
    assert len(result.traces) == 100
    assert result.completed == 100, result.outcomes
    nodes = {t.node for t in result.traces}
    assert len(nodes) == 2 and None not in nodes, nodes
    assert [t.name for t in result.traces] == [
        f"stream {i} (POST /generate)" for i in range(1, 101)
    ]
    gaps = [g for t in result.traces for g in t.gaps]
    assert len(gaps) == 500
    for q in (50, 99):
        assert result.percentile(q) == percentile(gaps, q)
    with open("nodes.json", "w") as f:
        json.dump(sorted(nodes), f)

def test_latency_fault_in_every_shard(streamguard):
    streamguard.faults.latency(ms=300)
    result = streamguard.load(8, json=BODY, shards=4)
    assert result.completed == 8, result.outcomes
    by_node = {}
    for trace in result.traces:
        by_node.setdefault(trace.node, []).append(trace.ttft)
    assert len(by_node) == 2
    # The toxic is on the one proxy every shard dials: 300 ms before each shard's first token.
    assert all(min(ttfts) >= 0.3 for ttfts in by_node.values()), by_node

@pytest.mark.token_deadline(ttft=5.0)
def test_headroom_levels_over_ray(streamguard):
    found = streamguard.headroom(json=BODY, vary="streams", up_to=4, shards=2)
    assert found.value == 4, found.describe()
    for level in found.levels:
        # Each level's streams were read on the Ray nodes, on their own clocks.
        assert level.forwarding.startswith("not measured: streams read on other machines")
    # The levels' streams are the search's, not the test's.
    assert streamguard.traces == []
"""
    )
    result = run("--streamguard-ray", ray_cluster.address, "--streamguard-json", "r.json")
    result.assert_outcomes(passed=3)
    alive = {n["NodeID"] for n in ray_cluster.global_state.node_table() if n["Alive"]}
    assert set(json.loads((pytester.path / "nodes.json").read_text())) == alive
    report = json.loads((pytester.path / "r.json").read_text())
    assert {t["node"] for t in report["tests"][0]["traces"]} == alive


def test_a_node_removed_mid_load_leaves_its_streams_failed(
    pytester: pytest.Pytester, run, ray_cluster: Any
) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(
        f"""
import sys
import threading
import time

import pytest

CLUSTER = sys.modules[{__name__!r}].CLUSTER

def active_streams(target):
    return target.metrics()["stream_app_active_streams"].samples[0].value

def test_remove_node(streamguard):
    worker = CLUSTER["worker"]
    removed = []

    def remove_worker_mid_load():
        deadline = time.monotonic() + 120
        while active_streams(streamguard.target) < 10:
            assert time.monotonic() < deadline, "the 10 streams never were all open"
            time.sleep(0.02)
        CLUSTER["cluster"].remove_node(worker, allow_graceful=False)
        removed.append(worker.node_id)

    remover = threading.Thread(target=remove_worker_mid_load)
    remover.start()
    started = time.monotonic()
    # 60 tokens at 50 ms: each stream lasts about 3 s, far longer than removing the node.
    result = streamguard.load(10, json={{"max_new_tokens": 60, "interval_s": 0.05}}, shards=2)
    remover.join()
    assert removed
    assert len(result.traces) == 10
    assert result.outcomes == {{"completed": 5, "network": 5}}, result.outcomes
    lost = [t for t in result.traces if not t.completed]
    assert all(t.node == removed[0] for t in lost), [t.node for t in lost]
    assert all(f"on Ray node {{removed[0]}} was lost" in t.error for t in lost), lost[0].error
    # Within its bounds: the 60 s stream limit (--streamguard-max-stream-seconds) plus slack.
    assert time.monotonic() - started < 90
"""
    )
    run(
        "--streamguard-ray", ray_cluster.address, "--streamguard-max-stream-seconds", "60"
    ).assert_outcomes(passed=1)


def test_shards_without_ray_and_processes_with_ray_are_refused(
    pytester: pytest.Pytester, run
) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(
        """
import pytest

def test_shards_need_ray(streamguard):
    with pytest.raises(ValueError, match="load shards=2 needs a Ray cluster"):
        streamguard.load(4, shards=2)
    with pytest.raises(ValueError, match="load shards=0 is not accepted"):
        streamguard.load(4, shards=0)
"""
    )
    run().assert_outcomes(passed=1)


def test_bad_ray_address_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_nothing(): pass")
    result = pytester.runpytest("--streamguard", "--streamguard-ray", "head")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: 'head' from --streamguard-ray is not a valid streamguard_ray: expected "
            "'auto', 'local' or a Ray cluster address such as 127.0.0.1:6379 or ray://head:10001"
        ]
    )
