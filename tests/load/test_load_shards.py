"""Sharded loads: ``streamguard.load(..., processes=N)`` and the shard protocol under it.

The split and the merge are checked directly in tests/load/ (``test_shards.py``,
``test_pool.py``); here the loads run through pytester against the example app (real uvicorn)
and the session's embedded Toxiproxy, each shard a real process.
"""

from __future__ import annotations

import pytest
from plugin_helpers import streamguard_runner

# Finds this process's shard children by their command line, for the tests that kill one and
# that check none is left.
SHARD_PIDS = """
import os

def shard_pids():
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if ppid == os.getpid() and b"pytest_streamguard.load.pool" in cmdline:
            found.append(int(entry))
    return found
"""


def test_auto_processes_starts_one_shard_per_usable_core(pytester: pytest.Pytester, run) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(
        """
import pytest
from pytest_streamguard.load import pool

@pytest.fixture
def started(monkeypatch):
    shards = []
    start = pool._Child.start

    async def counted(shard):
        shards.append(shard)
        return await start(shard)

    monkeypatch.setattr(pool._Child, "start", counted)
    return shards

def test_auto(streamguard, started):
    result = streamguard.load(12, json={"max_new_tokens": 4, "interval_s": 0.01},
                              processes="auto")
    assert result.completed == 12, result.outcomes
    cores = pool.usable_cores()
    if cores > 1:
        assert len(started) == min(cores, 12)
        assert sum(s.plan.n for s in started) == 12
    else:
        assert started == []

def test_auto_single_stream_reads_here(streamguard, started):
    result = streamguard.load(1, json={"max_new_tokens": 2}, processes="auto")
    assert result.completed == 1 and started == []

def test_auto_on_one_core_reads_here(streamguard, started, monkeypatch):
    monkeypatch.setattr(pool, "usable_cores", lambda: 1)
    result = streamguard.load(6, json={"max_new_tokens": 2}, processes="auto")
    assert result.completed == 6 and started == []
"""
    )
    run().assert_outcomes(passed=3)


def test_sharded_load_keeps_every_trace_and_pools_exact_percentiles(
    pytester: pytest.Pytester, run
) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(
        SHARD_PIDS
        + """
import pytest
from pytest_streamguard.verdict.stats import percentile

# The bounds are loose on purpose: this test is about the traces and the pooled percentiles; a
# busy 2-core machine running other workers stretched a gap to 1.9 s once.
@pytest.mark.token_deadline(ttft=5.0, chunk=5.0, percentile=95)
def test_hundred_in_two_processes(streamguard):
    result = streamguard.load(
        100, json={"max_new_tokens": 8, "interval_s": 0.02}, processes=2
    )
    assert len(result.traces) == 100
    assert result.completed == 100, result.outcomes
    assert streamguard.traces == result.traces
    assert [t.name for t in result.traces] == [
        f"stream {i} (POST /generate)" for i in range(1, 101)
    ]
    assert all(t.text == "".join(f"tok{i} " for i in range(8)) for t in result.traces)
    # Sent in order, and all in flight together across both processes.
    starts = [t.request_ns for t in result.traces]
    assert starts == sorted(starts)
    assert max(starts) < min(t.end_ns for t in result.traces)
    gaps = [g for t in result.traces for g in t.gaps]
    ttfts = [t.ttft for t in result.traces]
    assert len(gaps) == 700
    for q in (50, 95, 99, 100):
        assert result.percentile(q) == percentile(gaps, q)
        assert result.percentile(q, "ttft") == percentile(ttfts, q)
    assert shard_pids() == []
"""
    )
    run("--streamguard-json", "report.json").assert_outcomes(passed=1)
    report = (pytester.path / "report.json").read_text()
    assert report.count('"name": "stream ') == 100


def test_sharded_open_loop_keeps_the_schedule_and_the_proxys_faults(
    pytester: pytest.Pytester, run
) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(
        """
def test_poisson_in_three_processes(streamguard):
    streamguard.faults.latency(ms=300)
    result = streamguard.load(
        30, json={"max_new_tokens": 3, "interval_s": 0.01},
        rate=20, arrival="poisson", seed=4, processes=3,
    )
    assert result.completed == 30, result.outcomes
    offsets = [(t.request_ns - result.traces[0].request_ns) / 1e9 for t in result.traces]
    expected = result.plan.start_offsets()
    # Every request left on the one schedule, within 100 ms of its planned offset, whichever
    # process sent it (the schedule spans 1.5 s; three shard processes on two cores, one kept
    # busy, once ran 65 ms behind).
    assert all(abs(o - e) < 0.1 for o, e in zip(offsets, expected)), (offsets, expected)
    # The toxic on the session's proxy delayed every shard's streams (300 ms a chunk).
    assert min(result.ttft) >= 0.3
    assert all(t.active_faults() == ("latency(ms=300, jitter=0, stream='downstream')",)
               for t in result.traces)
"""
    )
    run().assert_outcomes(passed=1)


def test_a_killed_shard_process_leaves_its_streams_failed_and_nothing_behind(
    pytester: pytest.Pytester, run
) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(
        SHARD_PIDS
        + """
import signal
import threading
import time

import pytest

def active_streams(target):
    return target.metrics()["stream_app_active_streams"].samples[0].value

def test_kill_one(streamguard):
    killed = []

    def kill_one_shard_mid_load():
        deadline = time.monotonic() + 60
        # Every stream of both shards is being written: the load is in the middle.
        while active_streams(streamguard.target) < 20:
            assert time.monotonic() < deadline, "the 20 streams never were all open"
            time.sleep(0.02)
        pid = shard_pids()[0]
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    killer = threading.Thread(target=kill_one_shard_mid_load)
    killer.start()
    # 40 tokens at 50 ms: each stream lasts about 2 s, far longer than finding the shards.
    result = streamguard.load(20, json={"max_new_tokens": 40, "interval_s": 0.05}, processes=2)
    killer.join()
    assert killed
    assert len(result.traces) == 20
    assert result.outcomes == {"completed": 10, "network": 10}, result.outcomes
    lost = [t for t in result.traces if not t.completed]
    assert all(
        f"local process {killed[0]} died before it returned its traces: exited with code -9"
        in t.error
        for t in lost
    ), lost[0].error
    assert shard_pids() == []
"""
    )
    run().assert_outcomes(passed=1)


def test_async_twin_and_a_chunk_stall_in_shards(pytester: pytest.Pytester, run) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(
        """
import pytest

@pytest.mark.asyncio
async def test_aload_in_processes(streamguard):
    result = await streamguard.aload(6, json={"max_new_tokens": 3, "interval_s": 0.01},
                                     processes=2)
    assert result.completed == 6

def test_a_chunk_stall_reaches_the_shards(streamguard):
    record = streamguard.faults.stall(after_chunks=2, seconds=0.5)
    result = streamguard.load(4, json={"max_new_tokens": 4, "interval_s": 0.01}, processes=2)
    assert result.completed == 4
    for trace in result.traces:
        assert trace.max_gap == trace.gaps[1] >= 0.45, (trace.name, trace.gaps)
    assert streamguard.faults.judge(streamguard.traces) == []
    assert record.evidence.startswith("4 of 4 streams that reached chunk 2 waited")

def test_bad_processes(streamguard):
    with pytest.raises(ValueError, match="load processes=0 is not accepted"):
        streamguard.load(4, processes=0)
"""
    )
    run().assert_outcomes(passed=3)


JUDGED_SHARDS_CONFTEST = """
from pytest_streamguard import Assembly, ClientJudge, Replay, register_judge


class Shouting(ClientJudge):
    '''Concludes the body in capitals: never what the reader reads.'''

    name = "shouting"
    formats = frozenset({"ndjson"})
    module = "json"

    def judge(self, recorded):
        got = Assembly(self.name, Replay(recorded).stamp)
        got.add("text", recorded.body.decode().upper())
        return got.conclusion


register_judge(Shouting())
"""


def test_a_sharded_loads_streams_are_judged_in_their_shards_or_here(
    pytester: pytest.Pytester, app_url: str, toxiproxy_url: str
) -> None:
    # The openai client judges in each shard process (where the bytes are); a judge registered
    # in this process's conftest judges the bytes the shards send back; none judges nothing.
    pytester.makeconftest(JUDGED_SHARDS_CONFTEST)
    pytester.makepyfile(
        """
BODY = {"max_new_tokens": 4, "interval_s": 0.01, "stream": True}


def test_openai_in_shards(streamguard):
    result = streamguard.load(
        6, "/v1/completions", json=BODY, format="openai", processes=2, client="openai"
    )
    assert result.completed == 6, result.outcomes
    assert [(t.client, t.reader_agrees) for t in result.traces] == [("openai", True)] * 6
    assert len({t.end_reason for t in result.traces}) == 1


def test_none_in_shards(streamguard):
    result = streamguard.load(
        4, "/v1/completions", json=BODY, format="openai", processes=2, client="none"
    )
    assert [(t.client, t.reader_agrees) for t in result.traces] == [(None, None)] * 4


def test_registered_judge_here(streamguard):
    result = streamguard.load(4, "/ndjson", json=BODY, format="ndjson", processes=2)
    assert [(t.client, t.reader_agrees) for t in result.traces] == [("shouting", False)] * 4
    assert all(t.text.startswith('{"INDEX": 0') for t in result.traces)
"""
    )
    run = streamguard_runner(pytester, toxiproxy_url, app_url, subprocess=True)
    result = run("-o", "streamguard_transcripts=tx")
    result.assert_outcomes(passed=3)
    # The bytes of each disagreement came back from its shard and were saved here.
    saved = sorted(p.name for p in (pytester.path / "tx").rglob("*.json"))
    assert len(saved) == 4, saved
