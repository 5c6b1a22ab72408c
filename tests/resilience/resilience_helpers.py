"""Helpers shared by the resilience tests."""

from __future__ import annotations

import time
from collections.abc import Callable

from pytest_streamguard import Target


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll ``condition`` until true; return the seconds it took, fail after ``timeout``."""
    start = time.monotonic()
    while not condition():
        waited = time.monotonic() - start
        assert waited < timeout, f"{what}: not true within {timeout:g} s"
        time.sleep(0.01)
    return time.monotonic() - start


def gauge(target: Target, name: str) -> float:
    """The current value of one unlabelled gauge of the target."""
    family = target.metrics()[name]
    return float(family.samples[0].value)


def counter(target: Target, name: str, **labels: str) -> float:
    """The current value of one counter sample of the target (``name`` without ``_total``)."""
    for sample in target.metrics()[name].samples:
        if sample.name == f"{name}_total" and all(
            sample.labels.get(k) == v for k, v in labels.items()
        ):
            return float(sample.value)
    return 0.0
