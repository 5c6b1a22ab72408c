"""``--naive``: the blocking anti-pattern still serves correct streams (slowly, one at a time),
and a target without ``--allow-fault-knobs`` refuses fault knobs."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest
from target_harness import TargetProcess, collect, metric

from pytest_streamguard.common.tls import tls_context


@pytest.fixture(scope="module")
def client(make_target: Callable[..., TargetProcess]) -> Iterator[httpx.Client]:
    """A client for a naive target started without fault knobs."""
    target = make_target("--naive", "--heartbeat", "0.2")
    with httpx.Client(base_url=target.url, timeout=30, verify=tls_context()) as http:
        yield http


def test_naive_mode_streams_every_token(client: httpx.Client) -> None:
    assert client.get("/readyz").json()["engine"] == "naive"
    events = collect(client, "/generate", {"prompt": "baba", "max_new_tokens": 16})
    tokens = [e for e in events if e.kind == "data"]
    assert [e.data["index"] for e in tokens] == list(range(16))
    assert events[-1].kind == "done"
    assert events[-1].data["tokens"] == 16


def test_naive_mode_blocks_the_event_loop(client: httpx.Client) -> None:
    collect(client, "/generate", {"prompt": "baba", "max_new_tokens": 200})
    # The handler never yields to the loop while it waits on the streamer, so the loop-lag
    # probe sees roughly the whole 200-token generation as one stall. The engines' lag stays
    # at a few ms (benchmarks/target_load.py compares them); 0.05 s is far below the stall.
    assert metric(client, "streamguard_target_event_loop_lag_max_seconds") > 0.05


def test_fault_knobs_need_the_flag(client: httpx.Client) -> None:
    reply = client.post(
        "/generate", json={"prompt": "baba", "fault": {"stall_after": 1, "stall_s": 1}}
    )
    assert reply.status_code == 400
    assert reply.json()["field"] == "fault"
    assert "--allow-fault-knobs" in reply.json()["error"]
