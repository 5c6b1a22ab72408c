"""The product's client judges against the differential harness's oracles, and the ruling.

Every protocol's generated transcripts (a fixed seed) are replayed into the product's judge of
that protocol and read by the harness's oracle (``tests/formats/oracles.py``) over its own
replay transport: both must conclude the same (completed or failed, and when the client did
not fail, the text of every kind and the end reason).
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import threading
from types import SimpleNamespace

import differential
import pytest
from streamgen import PROTOCOLS, Transcript, generate

from pytest_streamguard.judge import (
    JUDGES,
    ClientJudge,
    Conclusion,
    Replay,
    check_client,
    judge_for,
    register_judge,
    rule,
)
from pytest_streamguard.judge.base import Assembly, Output
from pytest_streamguard.judge.chunks import read_chunks
from pytest_streamguard.judge.replay import kept_client
from pytest_streamguard.judge.ruling import collector_paused
from pytest_streamguard.report.disagreements import disagreement_lines
from pytest_streamguard.report.records import TestRecord
from pytest_streamguard.stream.recorded import Recorded
from pytest_streamguard.stream.trace import Chunk, StreamTrace

SEED = 36
PER_PROTOCOL = 60
_ENDINGS = {"close": "close", "reset": "reset", "chunked-cut": "cut"}


def recorded_of(transcript: Transcript) -> Recorded:
    """The transcript as the recorder keeps a response: decoded reads stamped 1000, 1001..."""
    recorded = Recorded(
        "POST", "http://127.0.0.1:1/v" + transcript.suffix, {"stream": True}, transcript.protocol
    )
    recorded.answered(200, [("content-type", transcript.content_type)])
    for index, piece in enumerate(transcript.pieces):
        recorded.keep(piece, 1000 + index)
    recorded.broke(_ENDINGS[transcript.ending], "the connection broke")
    return recorded


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_product_judge_concludes_what_the_oracle_does(protocol: str) -> None:
    transport = differential.ReplayTransport()
    judge = judge_for(
        {**differential.HELPERS, "openai-responses": "openai.stream"}.get(protocol, "auto"),
        protocol,
    )
    assert judge is not None
    differ = []
    for index in range(PER_PROTOCOL):
        transcript = generate(protocol, SEED, index)
        transport.transcripts["k"] = transcript
        theirs = differential.client_verdict(transcript, "http://replay.invalid/t/k", transport)
        ours = judge.judge(recorded_of(transcript))
        same = ours.completed == theirs.completed and (ours.error is None) == (
            theirs.why == "no failure"
        )
        if same and ours.error is None:
            same = ours.parts == theirs.parts and ours.end_reason == theirs.reason
        if not same:
            differ.append(f"{transcript.replay()}\n  ours={ours}\n  theirs={theirs}")
    assert not differ, "\n".join(differ[:5])


def test_each_output_carries_the_stamp_of_the_read_that_let_it_yield() -> None:
    body = [
        b'data: {"choices":[{"index":0,"delta":{"content":"He"}}]}\n\ndata: {"choi',
        b'ces":[{"index":0,"delta":{"content":"llo"}}]}\n',
        b'\ndata: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n',
    ]
    recorded = Recorded("POST", "http://h/v1/chat/completions", format="openai")
    recorded.answered(200, [("content-type", "text/event-stream")])
    for stamp, data in zip((10, 20, 30), body, strict=True):
        recorded.keep(data, stamp)
    conclusion = JUDGES["openai"].judge(recorded)
    assert conclusion.completed
    assert conclusion.end_reason == "stop"
    assert [(o.text, o.stamp_ns) for o in conclusion.outputs] == [("He", 10), ("llo", 30)]


def test_the_replay_raises_the_recorded_ending_and_leaves_out_the_wire_headers() -> None:
    import httpx

    recorded = Recorded("POST", "http://h/x")
    recorded.answered(200, [("content-type", "text/plain"), ("content-encoding", "gzip")])
    recorded.keep(b"abc", 5)
    recorded.broke("reset", "reset by peer")
    replay = Replay(recorded)
    with replay.client(httpx) as client, client.stream("POST", "http://h/x") as response:
        assert "content-encoding" not in response.headers
        reads = response.iter_bytes()
        assert (next(reads), replay.stamp()) == (b"abc", 5)
        with pytest.raises(httpx.ReadError, match="reset by peer"):
            next(reads)


def _chat(texts: list[str], ending: str = "close") -> Recorded:
    """A chat stream of one chunk per text, each read stamped by its index, then ``ending``."""
    recorded = Recorded("POST", "http://h/v1/chat/completions", format="openai")
    recorded.answered(200, [("content-type", "text/event-stream")])
    for stamp, text in enumerate(texts):
        chunk = {"choices": [{"index": 0, "delta": {"content": text}}]}
        recorded.keep(f"data: {json.dumps(chunk)}\n\n".encode(), stamp)
    if ending == "close":
        recorded.keep(b"data: [DONE]\n\n", len(texts))
    recorded.broke(ending, "the connection broke")
    return recorded


def test_a_thread_keeps_one_client_and_judges_each_stream_on_its_own() -> None:
    import httpx2
    import openai

    cut, whole = _chat(["a", "b", "c"], ending="cut"), _chat(["x", "y"])
    first = JUDGES["openai"].judge(cut)
    second = JUDGES["openai"].judge(whole)
    assert (first.completed, first.text_of("text")) == (False, "abc")
    assert first.error is not None
    assert first.error.startswith("APIConnectionError")
    assert second.completed
    assert [(o.text, o.stamp_ns) for o in second.outputs] == [("x", 0), ("y", 1)]
    replay, client = kept_client(openai.OpenAI, httpx2, cut)
    assert kept_client(openai.OpenAI, httpx2, whole) == (replay, client)
    assert replay.recorded is whole
    elsewhere: list[object] = []
    worker = threading.Thread(
        target=lambda: elsewhere.append(kept_client(openai.OpenAI, httpx2, whole)[1])
    )
    worker.start()
    worker.join()
    assert len(elsewhere) == 1
    assert elsewhere[0] is not client


@pytest.mark.parametrize("before", [True, False])
def test_the_collector_is_paused_while_a_load_is_judged_and_left_as_it_was(before: bool) -> None:
    (gc.enable if before else gc.disable)()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert gc.isenabled() is before
    finally:
        gc.enable()


def _trace(completed: bool, kind: str | None, text: str) -> StreamTrace:
    trace = StreamTrace("s", "POST", "http://h/", "openai", 0)
    trace.completed, trace.error_kind = completed, kind
    trace.error = None if kind is None else f"{kind} happened"
    trace.chunks = [Chunk(0, 5, 5, 3, text)] if text else []
    return trace


def _said(text: str, error: str | None = None, stamp: int = 7) -> Conclusion:
    return Conclusion("openai", error, [Output("text", text, stamp)] if text else [])


def test_agreement_leaves_the_readers_trace_as_it_was() -> None:
    trace = _trace(True, None, "hi")
    rule(trace, _said("hi"))
    assert (trace.client, trace.reader_agrees, trace.judged) == ("openai", True, None)
    assert trace.chunks[0].nbytes == 3


def test_a_clean_cut_stays_truncated_by_the_documented_rule() -> None:
    trace = _trace(False, "truncated", "hi")
    rule(trace, _said("hi"))
    assert not trace.completed
    assert trace.error_kind == "truncated"
    assert trace.reader_agrees is False
    assert trace.judged is not None
    assert trace.judged["rule"] == "truncated"


def test_the_client_failing_fails_a_stream_the_reader_completed() -> None:
    trace = _trace(True, None, "hi")
    rule(trace, _said("hi", "APIError: error event"))
    assert not trace.completed
    assert trace.error_kind == "client"
    assert trace.error is not None
    assert "APIError: error event" in trace.error
    assert trace.judged is not None
    assert trace.judged["rule"] is None


def test_the_clients_outputs_become_the_chunks_where_the_text_differs() -> None:
    trace = _trace(False, "protocol", "h")
    rule(trace, _said("hi", stamp=42))
    assert trace.completed
    assert trace.error_kind is None
    assert [(c.text, c.stamp_ns) for c in trace.chunks] == [("hi", 42)]
    assert trace.judged is not None
    assert trace.judged["rule"] is None


def test_the_judge_fields_travel_in_the_json() -> None:
    trace = _trace(True, None, "hi")
    rule(trace, _said("hi", "ValueError: x"))
    again = StreamTrace.from_dict(trace.to_dict())
    assert (again.client, again.reader_agrees, again.judged) == (
        trace.client,
        trace.reader_agrees,
        trace.judged,
    )


def test_client_choices_are_checked() -> None:
    assert check_client("auto") == "auto"
    assert check_client("none") == "none"
    assert check_client("openai") == "openai"
    with pytest.raises(ValueError, match=r"client= 'gpt': expected one of auto, none, openai"):
        check_client("gpt")
    assert judge_for("none", "openai") is None
    assert judge_for("auto", "sse") is None
    assert judge_for("anthropic", "openai") is None


def test_a_registered_judge_is_picked_for_its_format() -> None:
    class Upper(ClientJudge):
        name = "upper"
        formats = frozenset({"ndjson"})
        module = "json"

        def judge(self, recorded: Recorded) -> Conclusion:
            replay = Replay(recorded)
            got = Assembly(self.name, replay.stamp)
            got.add("text", recorded.body.decode().upper())
            return got.conclusion

    try:
        register_judge(Upper())
        assert check_client("upper") == "upper"
        judge = judge_for("auto", "ndjson")
        assert judge is not None
        recorded = Recorded("GET", "http://h/")
        recorded.keep(b"ab", 3)
        assert judge.judge(recorded).outputs == [Output("text", "AB", 3)]
    finally:
        JUDGES.pop("upper")


def test_importing_the_plugin_imports_no_client_library() -> None:
    code = (
        "import sys, pytest_streamguard, pytest_streamguard.judge\n"
        "sdks = {'openai', 'anthropic', 'google.genai', 'ollama', 'huggingface_hub', 'httpx2',"
        " 'mistralai', 'groq'}\n"
        "print(sorted(sdks & set(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_an_answer_that_is_not_a_stream_stays_protocol_by_the_documented_rule() -> None:
    trace = _trace(False, "protocol", "")
    trace.error = "answered application/json, not a stream: did you send stream?"
    rule(trace, _said("hi"))
    assert trace.error_kind == "protocol"
    assert trace.judged is not None
    assert trace.judged["rule"] == "protocol"


DAMAGED_PER_PROTOCOL = 60


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_no_judge_fails_by_its_own_code_on_the_sdks_models_damaged(protocol: str) -> None:
    """The SDKs' own models with fields missing, null and unknown (typedgen's ``damage``):
    whatever each judge concludes, its own code raises nothing (no judge defect)."""
    from typedgen import generate_typed  # the SDKs' models: imported on use, not at collection

    defects = []
    for name, judge in JUDGES.items():
        if protocol not in judge.formats:
            continue
        for index in range(DAMAGED_PER_PROTOCOL):
            transcript = generate_typed(protocol, SEED, index, damage=True)
            conclusion = judge.judge(recorded_of(transcript))
            if conclusion.defect is not None:
                defects.append(f"{name}: {conclusion.defect}\n  {transcript.replay()}")
    assert not defects, "\n".join(defects[:5])


def test_an_exception_of_the_plugins_own_code_is_a_judge_defect_not_the_clients() -> None:
    # tool_calls that are no list: the plugin's own assembly (chunks.py) raises on it.
    delta = SimpleNamespace(content="hi", tool_calls=5)
    chunk = SimpleNamespace(choices=[SimpleNamespace(finish_reason=None, delta=delta)])
    got = Assembly("openai", lambda: 0)
    said = got.run(lambda: read_chunks([chunk], got))
    assert (said.error, said.defect) == (None, "TypeError: 'int' object is not iterable")
    assert not said.completed
    # Raised by a library (or by the team's own code, here this file): the client's conclusion.
    got = Assembly("openai", lambda: 0)
    said = got.run(lambda: json.loads("{"))
    assert said.defect is None
    assert said.error is not None
    assert said.error.startswith("JSONDecodeError")


def test_a_judge_defect_leaves_the_readers_verdict_and_is_listed_as_such() -> None:
    trace = _trace(True, None, "hi")
    rule(trace, Conclusion("openai", outputs=[Output("text", "hi", 7)], defect="TypeError: x"))
    assert (trace.completed, trace.error_kind, trace.reader_agrees) == (True, None, False)
    assert trace.judged is not None
    assert trace.judged["defect"] == "TypeError: x"
    assert trace.judged["rule"] is None
    record = TestRecord(nodeid="t.py::test_a", deadline=None, traces=[trace])
    (line,) = disagreement_lines([record])[1:]
    assert "judge defect: TypeError: x in the openai judge" in line
    assert "the reader's verdict stands (completed (text 2 chars))" in line
    assert "client concluded" not in line


def test_the_comparison_names_every_field_that_differs_the_end_reason_too() -> None:
    trace = _trace(True, None, "hi")
    trace.end_reason = "stop"
    rule(trace, Conclusion("openai", None, [Output("text", "hi", 7)], end_reason="length"))
    assert trace.judged is not None
    assert trace.judged["differs"] == "end reason (stop vs length)"
    record = TestRecord(nodeid="t.py::test_a", deadline=None, traces=[trace])
    assert "they differ on end reason (stop vs length)" in disagreement_lines([record])[1]
