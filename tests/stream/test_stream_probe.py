"""The probe's sender (:mod:`pytest_streamguard.stream.probe`): a thread beside a sync stream
or a task on the running loop, sampling the target's ready path or a TCP connect to it; a probe
that gets no answer records none, as does one still waiting when it is stopped. The probe
beside real streams, and the findings that read it, are run end to end in
``tests/stream/test_probe.py``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest
from polling import wait_until
from served import loopback_socket

from pytest_streamguard.stream.probe import (
    ProbeSpec,
    ProbeThread,
    cpu_wait_ns,
    cpu_waits_now,
    probing,
    process_tree,
)


def test_the_probe_thread_samples_the_ready_path_and_a_tcp_connect(app_url: str) -> None:
    for setting, kind, target in (("", "http", "/readyz"), ("tcp", "tcp", app_url[7:])):
        spec = ProbeSpec.for_target(setting, app_url, "/readyz", 0.01)
        assert (spec.kind, spec.target) == (kind, target)
        with ProbeThread(spec) as probe:
            probed = probe.probed
            assert probed is not None
            wait_until(lambda: len(probed.samples) >= 3, 10.0, "3 probes")  # noqa: B023
        assert probe.probed is not None
        stamps = [stamp for stamp, _ in probe.probed.samples]
        assert stamps == sorted(stamps)
        assert all(latency is not None for _, latency in probe.probed.samples)
    with ProbeThread(None) as off:
        assert off.probed is None


@pytest.mark.asyncio
async def test_a_probe_that_gets_no_answer_records_none() -> None:
    # A port nothing listens on: the connect is refused, the sample has no latency.
    with loopback_socket() as sock:
        port = sock.getsockname()[1]
        spec = ProbeSpec("tcp", f"http://127.0.0.1:{port}", f"127.0.0.1:{port}", 0.01)
        async with probing(spec) as probed:
            assert probed is not None
            deadline = time.monotonic() + 10.0
            while not probed.samples:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
    assert probed.samples[0][1] is None
    async with probing(None) as nothing:
        assert nothing is None
    with pytest.raises(ValueError, match="probe kind 'udp' is not known: expected one of"):
        ProbeSpec("udp", "http://x", "x")


@pytest.mark.asyncio
async def test_a_probe_still_waiting_at_the_stop_is_kept_without_an_answer() -> None:
    """A loop blocked until the streams ended answers the probe only after them: the probe's
    wait is kept as a sample without an answer, not dropped with the stop."""
    asked = asyncio.Event()

    async def never_answers(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        asked.set()
        await reader.read()  # until the probe's client goes away
        writer.close()

    server = await asyncio.start_server(never_answers, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    spec = ProbeSpec("http", f"http://127.0.0.1:{port}/readyz", "/readyz", interval_s=10.0)
    async with server, probing(spec) as probed:
        assert probed is not None
        await asyncio.wait_for(asked.wait(), 10.0)
        started = time.perf_counter_ns()
        # What is measured: the probe left waiting longer than a stall (PROBE_WAIT_S, 50 ms).
        await asyncio.sleep(0.1)
    ((sent, latency),) = probed.samples
    assert latency is None
    assert sent <= started


def test_the_probe_reads_the_targets_wait_for_a_cpu_beside_each_sample(app_url: str) -> None:
    # The app is served in this process: its main thread is this process's.
    spec = ProbeSpec.for_target("", app_url, "/readyz", 0.01, pid=os.getpid())
    with ProbeThread(spec) as probe:
        probed = probe.probed
        assert probed is not None
        wait_until(lambda: len(probed.samples) >= 3, 10.0, "3 probes")
    assert probe.probed is not None
    answered = [stamp for stamp, latency in probe.probed.samples if latency is not None]
    assert set(probe.probed.cpu_waits) == set(answered)
    assert all(wait >= 0 for wait in probe.probed.cpu_waits.values())
    # Without the target's process (one given by URL) there is nothing to read.
    with ProbeThread(ProbeSpec.for_target("", app_url, "/readyz", 0.01)) as plain:
        by_url = plain.probed
        assert by_url is not None
        wait_until(lambda: len(by_url.samples) >= 1, 10.0, "a probe")
    assert by_url.samples
    assert by_url.cpu_waits == {}


def test_two_processes_on_one_core_each_wait_for_it() -> None:
    """The kernel's run-queue wait, as the probe reads it: two busy processes pinned to one
    core take turns, so each waits for the core about half the time. The one the plugin
    started is a wrapper that sleeps while its child (the one that would answer) spins: the
    child's wait is read through it, as nginx's worker is through the ingress's wrapper."""
    core = min(os.sched_getaffinity(0))
    spin = [sys.executable, "-c", "while True: pass"]
    wrapped = [sys.executable, "-c", f"import subprocess; subprocess.run({spin!r})"]
    spinners = [subprocess.Popen(cmd, start_new_session=True) for cmd in (wrapped, spin)]
    try:
        wrapper = spinners[0].pid
        wait_until(lambda: len(process_tree(wrapper)) == 2, 30.0, "the wrapper's child")
        for pid in (*process_tree(wrapper), spinners[1].pid):
            os.sched_setaffinity(pid, {core})
        start = cpu_waits_now(wrapper)
        assert start is not None
        wait_until(
            lambda: (cpu_wait_ns(start, cpu_waits_now(wrapper)) or 0) >= 200_000_000,
            30.0,
            "a pinned spinner waited 0.2 s for its core",
        )
    finally:
        for spinner in spinners:
            os.killpg(spinner.pid, signal.SIGKILL)
            spinner.wait()
    # A process that is gone, or none named: nothing to read.
    assert cpu_waits_now(spinners[0].pid) is None
    assert cpu_waits_now(None) is None
    assert cpu_wait_ns(start, None) is None


def test_only_waits_for_a_cpu_that_held_the_answer_up_are_taken_off() -> None:
    """Figures read on a 2-core machine kept busy, in ms: ``(time on a CPU, run-queue wait,
    runs)`` of the target's main thread and of the probe's thread over one sample."""
    ms = 1_000_000

    def sample(elapsed: int, target: tuple[int, int, int], probe: tuple[int, int, int]) -> int:
        before = {-1: (0, 0, 0), 0: (0, 0, 0), 7: (0, 0, 0), 8: (0, 0, 0)}
        after = {-1: (elapsed * ms, 0, 0), 0: scaled(probe), 7: (0, 0, 0), 8: scaled(target)}
        return cpu_wait_ns(before, after) or 0

    def scaled(stats: tuple[int, int, int]) -> tuple[int, int, int]:
        return stats[0] * ms, stats[1] * ms, stats[2]

    # The naive target's loop, asleep in a blocking queue.get between its 2,822 tokens, and the
    # load's loop (the probe's) reading them: their waits stretched the block, not the answer.
    assert sample(1822, (110, 152, 2822), (115, 474, 4439)) < 1 * ms
    # A free loop on a busy machine: it waited for a CPU for most of the sample, never slept.
    assert sample(225, (20, 200, 10), (2, 5, 3)) == 205 * ms
    # ... and the probe's own thread, woken by the answer, waited for a CPU to read it.
    assert sample(118, (10, 5, 4), (3, 100, 4)) >= 100 * ms


def test_the_default_probe_asks_no_model_route() -> None:
    """Issue 45: llama-cpp-python answers ``/v1/models`` by ending the stream in progress, so
    where the ready path is a model route the default probe asks ``/health``; a path the user
    sets is asked as set."""
    url = "http://127.0.0.1:8000"
    for ready, probed in (
        ("/v1/models", "/health"),
        ("/api/tags", "/health"),
        ("/readyz", "/readyz"),
    ):
        assert ProbeSpec.for_target("", url, ready, 0.05).url == url + probed
    assert ProbeSpec.for_target("/v1/models", url, "/v1/models", 0.05).target == "/v1/models"
