"""A live check against a server nobody here wrote: ``transformers serve``.

transformers' own OpenAI-compatible server (FastAPI on uvicorn, the ``transformers[serving]``
extra) is started by ``--streamguard-target-cmd`` with the bundled tiny model plus a chat
template, and a user-style test module reads its streams through the plugin's proxy: chat
completions and legacy completions (``format="openai"``) and the Responses API
(``format="openai-responses"``). Each stream is counted token for token against the server's
own answer and usage, read by the official ``openai`` client straight from the server, and a
cut through the proxy ends as ``cut``. One pytester run holds every case, so the server starts
once.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\nfilterwarnings = error\n"

# The user-style module. Every generated token of the tiny model is one visible word (its
# special tokens are suppressed), so with greedy decoding a request for N new tokens always
# streams exactly N words and ends with finish_reason "length": an exact count to check.
USER_TESTS = """
import httpx
import openai
import pytest
from pytest_streamguard.common.tls import tls_context

MODEL = {model!r}
PROMPT = "bada bade gagi"
N = 16
# Past the response head (~200 bytes) and the first events, well before the end of a
# 16-token stream (~4 KB): the connection closes inside the chunked body.
CUT_AFTER = 1200

REQUESTS = {{
    "chat": ("/v1/chat/completions", {{
        "model": MODEL,
        "messages": [{{"role": "user", "content": PROMPT}}],
        "max_tokens": N,
        "temperature": 0,
    }}),
    "completions": ("/v1/completions", {{
        "model": MODEL, "prompt": PROMPT, "max_tokens": N, "temperature": 0,
    }}),
}}


@pytest.fixture
def api(streamguard):
    # Straight to the server, not through the proxy: the reference reading of each answer.
    with httpx.Client(trust_env=False, timeout=60.0, verify=tls_context()) as http:
        yield openai.OpenAI(
            base_url=streamguard.target.url + "/v1",
            api_key="unused",
            max_retries=0,
            http_client=http,
        )


def reference(api, endpoint):
    # The server's own non-streamed answer, and its streamed one as the openai client reads
    # it: (text, completion tokens, finish reason) each.
    body = dict(REQUESTS[endpoint][1])
    if endpoint == "chat":
        answer = api.chat.completions.create(**body)
        whole = answer.choices[0].message.content
        usage, finish = answer.usage.completion_tokens, answer.choices[0].finish_reason
        chunks = list(api.chat.completions.create(**body, stream=True))
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        answer = api.completions.create(**body)
        whole = answer.choices[0].text
        usage, finish = answer.usage.completion_tokens, answer.choices[0].finish_reason
        chunks = list(api.completions.create(**body, stream=True))
        streamed = "".join(c.choices[0].text for c in chunks if c.choices)
    streamed_usage = [c.usage.completion_tokens for c in chunks if c.usage is not None]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    finishes = [reason for reason in finishes if reason]
    return (whole, usage, finish), (streamed, streamed_usage, finishes)


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_stream_is_counted_token_for_token(streamguard, api, endpoint):
    (whole, usage, finish), (streamed, streamed_usage, finishes) = reference(api, endpoint)
    assert (usage, finish) == (N, "length")
    assert streamed == whole
    assert streamed_usage == [N]
    assert finishes == ["length"]

    path, body = REQUESTS[endpoint]
    trace = streamguard.stream(path, json={{**body, "stream": True}}, format="openai")

    assert trace.status_code == 200
    assert trace.error_kind is None, trace.error
    assert trace.completed is True
    assert len(trace.chunks) == N
    assert trace.text == whole
    # One chunk per token: each carries exactly one of the answer's words.
    assert [chunk.text.strip() for chunk in trace.chunks] == whole.split()
    assert all(len(chunk.text.split()) == 1 for chunk in trace.chunks)
    assert trace.ttft is not None


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_cut_through_the_proxy_is_cut(streamguard, api, endpoint):
    (whole, _, _), _ = reference(api, endpoint)
    path, body = REQUESTS[endpoint]
    streamguard.faults.cut(after_bytes=CUT_AFTER)
    trace = streamguard.stream(path, json={{**body, "stream": True}}, format="openai")

    assert trace.status_code == 200
    assert trace.completed is False
    assert trace.error_kind == "cut", trace.error
    assert 0 < len(trace.chunks) < N
    assert whole.startswith(trace.text)


def test_responses_stream_is_counted_token_for_token(streamguard, api):
    body = {{"model": MODEL, "input": PROMPT, "max_output_tokens": N, "temperature": 0}}
    answer = api.responses.create(**body, stream=False)
    assert answer.usage.output_tokens == N

    trace = streamguard.stream(
        "/v1/responses", json={{**body, "stream": True}}, format="openai-responses"
    )

    assert trace.error_kind is None, trace.error
    assert trace.completed is True
    assert len(trace.chunks) == N
    assert trace.text == answer.output_text
    assert [chunk.text.strip() for chunk in trace.chunks] == answer.output_text.split()


def test_forgotten_stream_flag_is_protocol(streamguard):
    path, body = REQUESTS["chat"]
    trace = streamguard.stream(path, json=body, format="openai")

    assert trace.status_code == 200
    assert trace.completed is False
    assert trace.error_kind == "protocol"
    assert "application/json" in trace.error
    assert '"stream": true' in trace.error
    assert trace.chunks == []


def test_record_target_pid(streamguard):
    with open({pid_file!r}, "w") as f:
        f.write(str(streamguard.target.pid))
"""

USER_TEST_COUNT = 7


def serve_command(model_dir: Path) -> str:
    """The ``--streamguard-target-cmd`` that starts ``transformers serve`` on the plugin's port.

    ``python -m transformers.cli.transformers`` is the module behind the ``transformers``
    console script; the model path is ``force_model``, so it is loaded before the server
    answers ``/health`` and every request must name it.
    """
    return shlex.join(
        [
            sys.executable,
            "-m",
            "transformers.cli.transformers",
            "serve",
            str(model_dir),
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
            "--device",
            "cpu",
        ]
    )


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_transformers_serve_streams_through_the_plugin(
    pytester: pytest.Pytester,
    served_model_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from transformers.utils.import_utils import is_serve_available

    # Not a skip: without the extra this acceptance check has not run, so it fails and says why.
    assert is_serve_available(), (
        "transformers serve needs the transformers[serving] extra (fastapi, uvicorn, pydantic, "
        "openai): pip install 'transformers[serving]==5.24.0'"
    )
    # Everything offline: the model is a local directory, and the CLI's daily PyPI version
    # check is off; a fresh HF home keeps the user's hub cache out of it.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_UPDATE_CHECK", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    pid_file = tmp_path / "target.pid"
    pytester.makeini(INI)
    pytester.makepyfile(
        test_user_app=USER_TESTS.format(model=str(served_model_dir), pid_file=str(pid_file))
    )

    result = pytester.runpytest_subprocess(
        "--streamguard",
        "--streamguard-target-cmd",
        serve_command(served_model_dir),
        "--streamguard-ready-path",
        "/health",
        "-p",
        "no:cacheprovider",
    )

    result.assert_outcomes(passed=USER_TEST_COUNT)
    pid = int(pid_file.read_text())
    # The server ran as a child of the inner session and is gone with it.
    assert not _pid_alive(pid), f"transformers serve (pid {pid}) outlived the session"
