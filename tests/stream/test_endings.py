"""How a read that a pytest outcome broke off is recorded (stream/endings.py)."""

from __future__ import annotations

import asyncio

import pytest

from pytest_streamguard.stream.endings import stopped_mid_stream
from pytest_streamguard.stream.trace import StreamTrace


def _trace() -> StreamTrace:
    # One second between the request and the stop.
    return StreamTrace(
        name="stream 1 (POST /generate)",
        method="POST",
        url="http://127.0.0.1:1/generate",
        format="sse",
        request_ns=1_000_000_000,
        end_ns=2_000_000_000,
    )


def test_pytest_timeouts_failure_is_a_timeout_naming_its_limit() -> None:
    failed = pytest.fail.Exception("Timeout (>2.5s) from pytest-timeout.")
    assert stopped_mid_stream(failed, _trace()) == (
        "timeout",
        "pytest-timeout's limit of 2.5 s for the whole test ran out while this stream was read "
        "(0 chunks read in 1.000 s); it stopped the test mid-stream",
    )


def test_another_outcome_is_an_interruption_naming_it() -> None:
    failed = pytest.fail.Exception("stopped by a handler")
    assert stopped_mid_stream(failed, _trace()) == (
        "interrupted",
        "the test was stopped while this stream was read (0 chunks read in 1.000 s): "
        "Failed: stopped by a handler",
    )


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), asyncio.CancelledError()])
def test_ctrl_c_and_a_cancelled_task_keep_the_recorders_own_words(stop: BaseException) -> None:
    assert stopped_mid_stream(stop, _trace()) is None
