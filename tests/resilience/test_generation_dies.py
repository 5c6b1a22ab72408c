"""Incident 3, generation dies mid-stream: without care the streamer queue waits forever.

The target's ``raise_after`` knob makes generation raise after 5 tokens. The fix (every wait
on the stream has a deadline, a failed generation becomes ``event: error``) means the client
learns of the failure right after the last token instead of hanging until a read limit (10 s
here), and the plugin reports it.
"""

from __future__ import annotations

import pytest
from resilience_helpers import assert_no_findings, gauge, wait_for

from pytest_streamguard import DeadlineViolation, StreamGuard

CHUNK = 0.2
READ_TIMEOUT_S = 10.0
# An error event comes one token's time after the last token (ms; scheduling noise on a busy
# 2-core machine adds tens of ms), a hang lasts the whole 10 s read limit: a second between them.
ERROR_WITHIN_S = 1.0


def test_client_gets_an_error_event_instead_of_hanging(streamguard: StreamGuard) -> None:
    trace = streamguard.stream(
        json={"prompt": "doomed", "max_new_tokens": 32, "fault": {"raise_after": 5}},
        read_timeout=READ_TIMEOUT_S,
    )
    assert not trace.completed
    assert trace.error_kind == "server", trace.error
    assert len(trace.chunks) == 5
    assert trace.end_ns is not None
    # The error event came right after the last token, not after a client or proxy timeout.
    silence = (trace.end_ns - trace.chunks[-1].stamp_ns) / 1e9
    assert silence < ERROR_WITHIN_S, f"error event {silence:.3f} s after the last token"
    with pytest.raises(DeadlineViolation, match=r"stream did not complete .* after 5 chunk"):
        trace.assert_deadline(ttft=0.5, chunk=CHUNK)
    wait_for(
        lambda: gauge(streamguard.target, "streamguard_target_active_streams") == 0,
        1.0,
        "the failed stream's slot released",
    )
    # The streamer-queue hang has no finding of its own (the error event is the fix, and
    # what the verdict names); none of the others fires on it.
    assert_no_findings(streamguard)
