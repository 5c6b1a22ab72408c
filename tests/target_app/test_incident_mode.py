"""``--text-streamer-timeout``: the incident's app. A token later than the streamer's timeout
makes ``queue.Empty`` escape mid-body (the answer ends unfinished, uvicorn prints the
traceback); with ``0`` (no timeout, the fix) the same late token is waited for."""

from __future__ import annotations

from collections.abc import Callable

import httpx
from target_harness import TargetProcess, wait_until

from pytest_streamguard.common.tls import tls_context
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
    with httpx.Client(base_url=target.url, timeout=30, verify=tls_context()) as client:
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


def test_generation_starts_off_the_loop_when_the_body_is_first_read() -> None:
    """``Thread.start()`` waits for the new thread to take the GIL, which running generations
    hold: on the loop, 30 requests in a row held it 0.1 s and more. The answer is returned with
    no thread started; its body, read in Starlette's thread pool, starts generation."""
    import asyncio
    import threading

    from target_app.engines.base import GenerationRequest
    from target_app.engines.incident import incident_response
    from target_app.faults import FaultKnobs
    from target_app.formats import ChatFormat
    from target_app.loading import load_model

    loaded = load_model(TargetConfig())
    ids = loaded.tokenizer("hi")["input_ids"]
    request = GenerationRequest("r1", list(ids), 3, ignore_eos=True, raise_after=None)
    # Generation held 0.3 s after its first token: a thread started is still there.
    held = FaultKnobs(stall_after=0, stall_s=0.3)
    answer = incident_response(loaded, request, ChatFormat("tiny", len(ids)), held, 0)
    assert "generate-r1" not in [thread.name for thread in threading.enumerate()]

    async def read() -> bytes:
        return b"".join([chunk async for chunk in answer.body_iterator])  # type: ignore[misc]

    body = asyncio.run(read())
    assert body.endswith(b"data: [DONE]\n\n"), body
    assert b'"finish_reason":"length"' in body, body
