"""``--text-streamer-timeout``: the incident's app. A token later than the streamer's timeout
makes ``queue.Empty`` escape mid-body (the answer ends unfinished, uvicorn prints the
traceback); with ``0`` (no timeout, the fix) the same late token is waited for."""

from __future__ import annotations

from collections.abc import Callable

import httpx
from target_harness import TargetProcess, wait_until

from target_app.config import TargetConfig

LATE = {
    "messages": [{"role": "user", "content": "hi"}],
    "stream": True,
    "max_tokens": 6,
    "fault": {"stall_after": 2, "stall_s": 0.6},
}


def _read(target: TargetProcess) -> tuple[str, str | None]:
    """The answer's text, and the error that ended it (None: it ended cleanly)."""
    body = ""
    with httpx.Client(base_url=target.url, timeout=30) as client:
        try:
            with client.stream("POST", "/v1/chat/completions", json=LATE) as answer:
                for text in answer.iter_text():
                    body += text
        except httpx.RemoteProtocolError as exc:
            return body, str(exc)
    return body, None


def test_a_token_later_than_the_timeout_ends_the_stream_with_queue_empty(
    make_target: Callable[..., TargetProcess],
) -> None:
    target = make_target("--allow-fault-knobs", "--text-streamer-timeout", "0.2")
    body, error = _read(target)
    assert error is not None, body
    assert "incomplete chunked read" in error, (error, body)
    assert "[DONE]" not in body
    wait_until(lambda: "_queue.Empty" in target.stderr(), 10.0, "the traceback on stderr")


def test_without_a_timeout_the_late_token_is_waited_for(
    make_target: Callable[..., TargetProcess],
) -> None:
    target = make_target("--allow-fault-knobs", "--text-streamer-timeout", "0")
    body, error = _read(target)
    assert error is None, error
    assert body.rstrip().endswith("data: [DONE]"), body


def test_a_negative_timeout_names_the_flag() -> None:
    (problem,) = TargetConfig(text_streamer_timeout=-1.0).problems()
    assert problem.startswith("--text-streamer-timeout must be >= 0 seconds")
