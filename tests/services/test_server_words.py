"""A real app whose stream raises ``queue.Empty`` mid-body (a streamer's too-short timeout):
the failure names the exception, at the hop that raised it, in its first 20 lines; the JSON
report keeps what the app wrote for the failed test and none for the passing one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from plugin_helpers import INI, error_section

from pytest_streamguard.services.processes import free_port

URL = "http://127.0.0.1:9"  # never dialled: the settings fail first

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


def test_a_url_targets_log_file_is_its_words(
    pytester: pytest.Pytester, toxiproxy_url: str, tmp_path: Path
) -> None:
    """A target that runs on its own, writing its log to a file the ini names: the exception
    it logs there is named at that file's NAME."""
    pytester.makepyfile(app=APP, test_words=TESTS)
    port = free_port()
    log = tmp_path / "model.log"
    with open(log, "wb") as stderr:
        app = subprocess.Popen(
            [sys.executable, "app.py", "--port", str(port)],
            cwd=pytester.path,
            stdout=stderr,
            stderr=stderr,
        )
    try:
        pytester.makeini(f"{INI}streamguard_log_files =\n    model = {log}\n")
        result = pytester.runpytest(
            "--streamguard",
            "--streamguard-toxiproxy",
            toxiproxy_url,
            "--streamguard-target-url",
            f"http://127.0.0.1:{port}",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
        )
    finally:
        app.terminate()
        app.wait(10)
    result.assert_outcomes(passed=1, failed=1)
    top = "\n".join(error_section(result.outlines, "test_stream_dies_mid_body")[:20])
    assert "server said: model: _queue.Empty (at " in top


@pytest.mark.parametrize(
    ("lines", "words"),
    [
        ("model /var/log/model.log", "not NAME = PATH"),
        ("model = a.log\n    model = b.log", "a name given twice"),
        ("bad name = a.log", "not NAME = PATH"),
    ],
)
def test_a_bad_log_files_line_is_a_usage_error(
    pytester: pytest.Pytester, lines: str, words: str
) -> None:
    pytester.makeini(f"{INI}streamguard_log_files =\n    {lines}\n")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess("--streamguard", "--streamguard-target-url", URL)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*from ini key streamguard_log_files*{words}; expected one*"])


def test_log_files_without_a_target_url_are_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini(f"{INI}streamguard_log_files =\n    app = app.log\n")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess("--streamguard")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*streamguard_log_files is set but the target is not given by URL*"]
    )


def test_a_stacks_model_exception_is_named_at_the_model(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    """The example gateway in front of the app as a stack's model: the model's exception is
    named at ``model``, first, though the gateway logs the break it made too."""
    pytester.makepyfile(app=APP, test_words=TESTS)
    gateway = Path(__file__).resolve().parents[2] / "examples" / "stack" / "gateway.py"
    pytester.makeini(
        f"{INI}streamguard_ready_path = /readyz\nstreamguard_services =\n"
        f"    model = {sys.executable} app.py --port {{port}}\n"
        f"    gateway = {sys.executable} {gateway} --port {{port}} --upstream {{model}}\n"
    )
    result = pytester.runpytest(
        "--streamguard", "--streamguard-toxiproxy", toxiproxy_url, "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1, failed=1)
    failure = error_section(result.outlines, "test_stream_dies_mid_body")
    top = "\n".join(failure[:20])
    assert "likely cause: model raised _queue.Empty at " in top, "\n".join(failure)
    assert "server said: model: _queue.Empty (at " in top


def test_a_server_error_gate_on_a_url_target_without_log_files_is_unchecked(
    pytester: pytest.Pytester, toxiproxy_url: str, app_url: str
) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.token_deadline(ttft=5.0, chunk=5.0, fail_on="server_error")
        def test_gated(streamguard):
            streamguard.stream(json={"max_new_tokens": 3, "interval_s": 0.01})
        """
    )
    result = pytester.runpytest(
        "--streamguard",
        "--streamguard-toxiproxy",
        toxiproxy_url,
        "--streamguard-target-url",
        app_url,
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*not checked: server_error (the target is given by URL and names no log file*"]
    )
