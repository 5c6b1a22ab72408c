"""The bundled target's capacity on this machine, on its GPU where one is present: how many
concurrent streams hold the concurrency incident's deadlines (``test_concurrent_streams.py``),
found by ``streamguard.headroom``. ``make demo`` prints it in the summary's headroom line, the
test's id naming the device (``[cpu]`` or ``[cuda]``), and the HTML report plots each level.

The search goes up to the suite's target's own ``--max-concurrency`` (64, its default): above
that the target refuses streams by design, which is its limit, not its capacity. On a quiet
2-core machine every level up to 64 holds (the line says so); a slower machine shows where it
breaks and why.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from resilience_helpers import gauge, wait_for

from pytest_streamguard import StreamGuard
from pytest_streamguard.common.tls import tls_context

REQUEST = {"prompt": "how many users", "max_new_tokens": 32}
UP_TO = 64
# The device the bundled target picks (--device auto): CUDA where torch sees a GPU, which
# needs the NVIDIA driver (its per-GPU entries here); known before the target starts, so the
# test's id can name it.
_NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")
DEVICE = "cuda" if _NVIDIA_GPUS.is_dir() and any(_NVIDIA_GPUS.iterdir()) else "cpu"


@pytest.mark.parametrize("device", [DEVICE])
@pytest.mark.token_deadline(ttft=0.5, chunk=0.2, percentile=95)
def test_the_bundled_targets_capacity(
    streamguard: StreamGuard, device: str, request: pytest.FixtureRequest
) -> None:
    ready = httpx.get(streamguard.target.url + "/readyz", timeout=10, verify=tls_context()).json()
    assert ready["device"] == device, (
        f"the bundled target runs on {ready['device']}, but this machine has "
        f"{'an NVIDIA GPU' if device == 'cuda' else 'no NVIDIA GPU'} (torch without CUDA?)"
    )
    # For the JUnit XML, as the plugin adds its figures (pytest's record_property warns under
    # the xunit2 family, an error here, wherever the suite runs without xdist).
    request.node.user_properties.append(("device", ready["device"]))
    found = streamguard.headroom(json=REQUEST, vary="streams", up_to=UP_TO)
    assert found.value >= 1, found.describe()
    # The level reported ran twice at least; it broke on a repeat exactly when its spread
    # reaches below it, and a level above it held only as a repeat of broke_at, the spread's top.
    runs = [lv.held for lv in found.levels if lv.level == found.value]
    assert len(runs) >= 2, found.describe()
    low, high = found.span
    assert all(runs) == (low == found.value), found.describe()
    held_above = {lv.level for lv in found.levels if lv.level > found.value and lv.held}
    assert held_above <= {high} - {found.value}, found.describe()
    # The bundled target stamps its events: every level says how much of its delay was the hop.
    for level in found.levels:
        assert level.figures["forwarding_events"] > 0, level.forwarding
    # The levels that broke left streams the target may still be ending: the next test of
    # this session's target (test_connection_cut.py waits for exactly its own stream) starts
    # on an idle target.
    wait_for(
        lambda: gauge(streamguard.target, "streamguard_target_active_streams") == 0,
        30.0,
        "the target idle after the search",
    )
