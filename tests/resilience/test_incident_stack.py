"""The incident this project exists for, as a stack: nginx -> a FastAPI gateway -> the bundled
target streaming from transformers' ``TextIteratorStreamer`` with a too-short ``timeout``.

The services are declared (``streamguard_services``) and started by an inner pytest run each:
``ingress`` (a real nginx, ``incident_stack/ingress.py``) in front of ``gateway``
(``incident_stack/gateway.py``) in front of ``model`` (``python -m target_app
--text-streamer-timeout SECONDS``: a sync generator iterating the streamer, as the incident's
app did). 30 streams at once each meet a token that comes late (the ``stall_after`` knob holds
generation 1 s after token 2, as a busy GPU's step does). With the incident's 0.3 s streamer
timeout, ``queue.Empty`` escapes the model's generator and the streams die mid-body: the
verdict names the model's exception (``server_error at model``) and the cut at the model, the
hop that made it (``idle_cut at model``), not the ingress the client read from. The fix is no
streamer timeout (``--text-streamer-timeout 0``): every stream completes, and no finding. nginx's
own read timeout cuts a stream that stalls longer than it, and the verdict names it at the
ingress (``idle_cut at ingress``).

nginx's ``proxy_read_timeout`` here is 2 s, not the incident's 0.5 s: on a busy 2-core machine
30 concurrent generations of even the tiny model make heads come 0.6 s late, so a 0.5 s ingress
cuts the fixed stack too (measured: 30 of 30 streams, ``--text-streamer-timeout 0``).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_streamguard import Finding

HERE = Path(__file__).resolve().parent / "incident_stack"
READ_TIMEOUT_S = 2.0
STREAMS = 30
LATE_TOKEN = {"stall_after": 2, "stall_s": 1.0}
# Longer than nginx's read timeout: nginx cuts it.
TOO_LATE = {"stall_after": 2, "stall_s": READ_TIMEOUT_S + 1.0}


def stack_ini(streamer_timeout: float) -> str:
    """The incident's stack, the model's streamer waiting ``streamer_timeout`` s (0: none)."""
    python = sys.executable
    return (
        "[pytest]\n"
        "asyncio_default_fixture_loop_scope = function\n"
        "streamguard_ready_path = /readyz\n"
        "streamguard_services =\n"
        f"    model = {python} -m target_app --port {{port}} --allow-fault-knobs "
        f"--text-streamer-timeout {streamer_timeout}\n"
        f"    gateway = {python} {HERE / 'gateway.py'} --port {{port}} --upstream {{model}}\n"
        f"    ingress = {python} {HERE / 'ingress.py'} --upstream {{gateway}} "
        f"--read-timeout {READ_TIMEOUT_S}\n"
    )


def inner_tests(**knobs: dict[str, float]) -> str:
    """One inner test per knob: 30 streams at once, each with that ``fault`` knob."""
    tests = [
        f"""
def test_{name}(streamguard):
    request = {{"messages": [{{"role": "user", "content": "tell me a story"}}], "stream": True,
                "max_tokens": 6, "fault": {fault!r}}}
    streamguard.load({STREAMS}, path="/v1/chat/completions", json=request, format="openai")
"""
        for name, fault in knobs.items()
    ]
    return "".join(tests)


def run(pytester: pytest.Pytester, toxiproxy_url: str, tests: int) -> dict[str, dict[str, Any]]:
    """Run the ``tests`` inner tests (each must pass); their records of the JSON report by
    test name."""
    report = pytester.path / "streamguard.json"
    result = pytester.runpytest_subprocess(
        "--streamguard",
        "--streamguard-toxiproxy",
        toxiproxy_url,
        "-p",
        "no:cacheprovider",
        "--streamguard-json",
        str(report),
    )
    result.assert_outcomes(passed=tests)
    return {
        record["nodeid"].rsplit("::", 1)[-1]: record
        for record in json.loads(report.read_text())["tests"]
    }


def described(record: dict[str, Any]) -> list[str]:
    """A record's findings as the verdict shows them."""
    return [Finding.from_dict(raw).describe() for raw in record["findings"]]


def ended(record: dict[str, Any]) -> set[str]:
    """How a record's streams ended (``completed``, or the error kind)."""
    return {t["error_kind"] or "completed" for t in record["traces"]}


def test_the_streamer_timeout_is_named_at_the_model(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    pytester.makeini(stack_ini(0.3))
    pytester.makepyfile(inner_tests(late_token=LATE_TOKEN))
    record = run(pytester, toxiproxy_url, tests=1)["test_late_token"]
    findings = described(record)
    assert "cut" in ended(record), ended(record)
    # The streams were ended by the model, after the streamer's timeout (one whose reader came
    # to the streamer after the late token, on a busy machine's thread pool, completes): placed
    # there by which side closed each hop's connection first, not at the ingress the client
    # read from.
    assert any(line.startswith("idle_cut at model") for line in findings), findings
    assert not any(" at ingress" in line for line in findings), findings
    # The model's own words name the exception, at its hop (its output kept: issue 43).
    assert any(
        line.startswith("server_error at model") and "_queue.Empty" in line for line in findings
    ), findings


def test_without_a_streamer_timeout_no_finding_and_nginx_cut_at_the_ingress(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    pytester.makeini(stack_ini(0))
    pytester.makepyfile(inner_tests(late_token=LATE_TOKEN, too_late=TOO_LATE))
    records = run(pytester, toxiproxy_url, tests=2)
    # The fix: every stream waited out its late token and completed, with no finding.
    fixed = records["test_late_token"]
    assert ended(fixed) == {"completed"}
    assert described(fixed) == []
    # A stall longer than nginx's read timeout: nginx cut every stream, after that silence.
    cut = records["test_too_late"]
    assert ended(cut) == {"cut"}
    silences = [
        float(m[1])
        for line in described(cut)
        if (
            m := re.match(
                rf"idle_cut at ingress: {STREAMS} streams ended cut after the same "
                r"(\d+\.\d+) s of silence",
                line,
            )
        )
    ]
    # nginx's timer starts at its last read from the gateway, a little before the client's.
    assert len(silences) == 1, described(cut)
    assert 0.9 * READ_TIMEOUT_S <= silences[0] <= READ_TIMEOUT_S + 0.3, described(cut)
