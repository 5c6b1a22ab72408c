"""A real app whose stream raises ``queue.Empty`` mid-body (a streamer's too-short timeout):
the failure names the exception, at the hop that raised it, in its first 20 lines; the JSON
report keeps what the app wrote for the failed test and none for the passing one."""

from __future__ import annotations

import json
import sys

import pytest
from plugin_helpers import error_section

# A Starlette app on uvicorn: OpenAI-style chat chunks from a sync generator (run in a thread,
# as a streamer's loop is); "fail" makes it wait on an empty queue with a too-short timeout.
APP = """
import argparse, json, queue

import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route


def tokens(fail):
    for i in range(6):
        delta = {"choices": [{"index": 0, "delta": {"content": f"t{i} "}}]}
        yield f"data: {json.dumps(delta)}\\n\\n"
        if fail and i == 2:
            queue.Queue().get(timeout=0.05)
    yield "data: [DONE]\\n\\n"


async def chat(request):
    body = await request.json()
    return StreamingResponse(tokens(body.get("fail", False)), media_type="text/event-stream")


async def ready(request):
    return PlainTextResponse("ok")


app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]),
                        Route("/readyz", ready)])
parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int)
uvicorn.run(app, host="127.0.0.1", port=parser.parse_args().port)
"""

TESTS = """
import pytest


@pytest.mark.token_deadline(ttft=5.0, chunk=5.0)
def test_streams_whole(streamguard):
    streamguard.stream("/v1/chat/completions", json={"stream": True}, format="openai")


@pytest.mark.token_deadline(ttft=5.0, chunk=5.0)
def test_stream_dies_mid_body(streamguard):
    streamguard.stream("/v1/chat/completions", json={"fail": True}, format="openai")
"""


def test_a_server_exception_is_named_at_its_hop(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    pytester.makepyfile(app=APP, test_words=TESTS)
    report = pytester.path / "report.json"
    result = pytester.runpytest(
        "--streamguard",
        "--streamguard-toxiproxy",
        toxiproxy_url,
        "--streamguard-target-cmd",
        f"{sys.executable} app.py --port {{port}}",
        f"--streamguard-json={report}",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
    )
    result.assert_outcomes(passed=1, failed=1)
    failure = error_section(result.outlines, "test_stream_dies_mid_body")
    top = "\n".join(failure[:20])
    assert "server said: target: _queue.Empty (at " in top, "\n".join(failure)
    assert "likely cause: target raised _queue.Empty at " in top
    # The timeline shows it too, marked.
    assert any("target said: _queue.Empty" in line and "<--" in line for line in failure)
    tests = {t["nodeid"].rsplit("::", 1)[1]: t for t in json.loads(report.read_text())["tests"]}
    [died] = tests["test_stream_dies_mid_body"]["traces"]
    assert any(said["error"] and said["text"] == "_queue.Empty" for said in died["said"])
    assert all(said["hop"] == "target" for said in died["said"])
    findings = tests["test_stream_dies_mid_body"]["findings"]
    assert findings[0]["name"] == "server_error"
    assert findings[0]["hop"] == "target"
    assert findings[0]["data"]["exception"] == "_queue.Empty"
    [whole] = tests["test_streams_whole"]["traces"]
    assert "said" not in whole
    assert "server_error" not in [f["name"] for f in tests["test_streams_whole"]["findings"]]
