"""Bad input over real sockets: 4xx JSON naming the field and what is accepted, never a 500,
never a held slot."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest
from target_harness import TEST_FLAGS, TargetProcess, collect, metric

from pytest_streamguard.common.tls import tls_context


@pytest.fixture(scope="module")
def client(make_target: Callable[..., TargetProcess]) -> Iterator[httpx.Client]:
    """A client for a batch-engine target with fault knobs on."""
    target = make_target(*TEST_FLAGS)
    with httpx.Client(base_url=target.url, timeout=30, verify=tls_context()) as http:
        yield http


LONG_PROMPT = " ".join(["baba"] * 2040)

CASES = [
    pytest.param("/generate", b"{not json", 400, "body", id="malformed-json"),
    pytest.param("/generate", b"", 400, "body", id="empty-body"),
    pytest.param("/generate", b"[1, 2]", 400, "body", id="not-an-object"),
    pytest.param("/generate", b"\xff\xfe{}", 400, "body", id="non-utf8"),
    pytest.param("/generate", {"max_new_tokens": 4}, 400, "prompt", id="missing-prompt"),
    pytest.param("/generate", {"prompt": 5}, 400, "prompt", id="prompt-not-string"),
    pytest.param("/generate", {"prompt": ""}, 400, "prompt", id="empty-prompt"),
    pytest.param(
        "/generate", {"prompt": "a", "max_new_tokens": 0}, 400, "max_new_tokens", id="zero-tokens"
    ),
    pytest.param(
        "/generate", {"prompt": "a", "max_new_tokens": 2001}, 400, "max_new_tokens", id="too-many"
    ),
    pytest.param(
        "/generate", {"prompt": "a", "max_new_tokens": "5"}, 400, "max_new_tokens", id="str-count"
    ),
    pytest.param(
        "/generate", {"prompt": "a", "max_new_tokens": 5.0}, 400, "max_new_tokens", id="float"
    ),
    pytest.param(
        "/generate", {"prompt": "a", "max_new_tokens": True}, 400, "max_new_tokens", id="bool"
    ),
    pytest.param("/generate", {"prompt": "a", "temperature": 1}, 400, "temperature", id="unknown"),
    pytest.param("/generate", {"prompt": "a", "ignore_eos": 1}, 400, "ignore_eos", id="eos-int"),
    pytest.param(
        "/generate", {"prompt": LONG_PROMPT, "max_new_tokens": 64}, 400, "prompt", id="too-long"
    ),
    pytest.param(
        "/generate", {"prompt": "a", "fault": {"stall_s": 1}}, 400, "fault.stall_after", id="half"
    ),
    pytest.param(
        "/generate", {"prompt": "a", "fault": {"boom": 1}}, 400, "fault.boom", id="fault-unknown"
    ),
    pytest.param(
        "/generate",
        {"prompt": "a", "fault": {"cold_start_s": -1}},
        400,
        "fault.cold_start_s",
        id="fault-negative",
    ),
    pytest.param(
        "/generate",
        {"prompt": "a", "fault": {"raise_after": "x"}},
        400,
        "fault.raise_after",
        id="fault-type",
    ),
    pytest.param("/generate", {"prompt": "a", "fault": 3}, 400, "fault", id="fault-not-object"),
    pytest.param(
        "/generate",
        {"prompt": "a", "fault": {"pad_bytes": 65537}},
        400,
        "fault.pad_bytes",
        id="fault-pad-too-big",
    ),
    pytest.param(
        "/generate",
        {"prompt": "a", "fault": {"keep_generating": 1}},
        400,
        "fault.keep_generating",
        id="fault-keep-generating-type",
    ),
    pytest.param("/v1/completions", {"prompt": "a", "stream": "yes"}, 400, "stream", id="stream"),
    pytest.param("/v1/completions", {"prompt": "a", "max_tokens": -1}, 400, "max_tokens", id="neg"),
    pytest.param("/v1/chat/completions", {"max_tokens": 2}, 400, "messages", id="no-messages"),
    pytest.param("/v1/chat/completions", {"messages": []}, 400, "messages", id="empty-messages"),
    pytest.param(
        "/v1/chat/completions",
        {"messages": [{"role": "robot", "content": "a"}]},
        400,
        "messages[0].role",
        id="bad-role",
    ),
    pytest.param(
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": 1}]},
        400,
        "messages[0].content",
        id="bad-content",
    ),
]


@pytest.mark.parametrize(("path", "body", "status", "field"), CASES)
def test_bad_input_is_rejected_with_field_and_accepted_values(
    client: httpx.Client, path: str, body: bytes | dict[str, object], status: int, field: str
) -> None:
    if isinstance(body, bytes):
        reply = client.post(path, content=body, headers={"content-type": "application/json"})
    else:
        reply = client.post(path, json=body)
    assert reply.status_code == status, reply.text
    payload = reply.json()
    assert payload["field"] == field
    assert payload["error"]
    assert payload["accepted"]
    assert metric(client, "streamguard_target_active_streams") == 0


def test_huge_body_is_413(client: httpx.Client) -> None:
    reply = client.post("/generate", content=b"x" * (1 << 20 | 1))
    assert reply.status_code == 413
    assert reply.json()["field"] == "body"
    assert "1048576 bytes" in reply.json()["accepted"]


def test_huge_chunked_body_is_413(client: httpx.Client) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(17):
            yield b" " * 65536

    reply = client.post("/generate", content=chunks())
    assert reply.status_code == 413


def test_server_still_serves_after_bad_input(client: httpx.Client) -> None:
    labels = {"reason": "bad_request"}
    before = metric(client, "streamguard_target_requests_rejected_total", labels)
    for path, body, status, _ in (case.values for case in CASES):
        if isinstance(body, bytes):
            reply = client.post(
                str(path), content=body, headers={"content-type": "application/json"}
            )
        else:
            reply = client.post(str(path), json=body)
        assert reply.status_code == status
    rejected = metric(client, "streamguard_target_requests_rejected_total", labels)
    assert rejected - before >= len([c for c in CASES if c.values[2] == 400])
    events = collect(client, "/generate", {"prompt": "baba", "max_new_tokens": 3})
    assert events[-1].kind == "done"
    assert events[-1].data["tokens"] == 3
