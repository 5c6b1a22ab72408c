"""The probe's sender (:mod:`pytest_streamguard.stream.probe`): a thread beside a sync stream
or a task on the running loop, sampling the target's ready path or a TCP connect to it; a probe
that gets no answer records none. The probe beside real streams, and the findings that read it,
are run end to end in ``tests/plugin/test_probe.py``.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from polling import wait_until
from served import loopback_socket

from pytest_streamguard.stream.probe import ProbeSpec, ProbeThread, probing


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
