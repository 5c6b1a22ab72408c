"""Every built-in stream format (and two user-defined ones) reads recorded vendor transcripts
through the plugin: the replay app (real uvicorn) as the target, behind the embedded Toxiproxy.

One pytester run per format reads each transcript with ``streamguard.stream`` (sync client),
``streamguard.astream`` (async client, several transcripts at once), ``streamguard.load(3)``
(load transport), and, for the built-in formats, ``streamguard.stream`` without ``format=``
(the format recognised from the answer), and dumps what it saw; the outer test checks it
against ``format_cases`` and, where the vendor has an official Python client, against the
text that client assembles from the same bytes (``oracles.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any

import pytest
from format_cases import FORMATS, PAUSE_S, Case, path_of

# TTFT must be at least the replay pause (the first token comes after it, whatever came
# before: the lower bound is what proves the pause is counted) and at most the pause plus
# this. The upper bound only rules out a TTFT taken from a much later event; a 2-core CI box
# with both cores busy was seen to add 1.7 s of scheduling delay to these parallel reads, so
# the slack is generous.
TTFT_SLACK_S = 5.0
# The replay server's pause may end up to a millisecond early (its event loop's timers), and
# the request is stamped when its last byte leaves: the lower bound allows that millisecond.
TIMER_SLACK_S = 0.001

INNER = """
import asyncio
import json

import pytest

from pytest_streamguard.formats import NDJSONFormat, SSEFormat

CASES = json.loads({cases!r})
AUTO_CASES = json.loads({auto_cases!r})
FORMAT = {fmt!r}
BODY = {{"model": "m", "stream": True, "messages": [{{"role": "user", "content": "hi"}}]}}

CUSTOM_FORMATS = {{
    "custom-sse": SSEFormat(
        "mine",
        token_events=("token",),
        end_events=("finished",),
        error_events=("failure",),
        heartbeat_events=(),
        done_data=None,
        text=lambda data: data["t"],
        end_on_eof=False,
    ),
    "custom-sse-text": SSEFormat(
        "plain",
        token_events=("message",),
        end_events=("done",),
        heartbeat_events=("keepalive",),
        json=False,
        text=lambda data: data,
    ),
    "custom-ndjson": NDJSONFormat(
        "mine",
        text=lambda obj: obj.get("out"),
        end=lambda obj: bool(obj.get("final")),
        error=lambda obj: obj.get("oops"),
        end_on_eof=False,
    ),
}}
fmt = CUSTOM_FORMATS.get(FORMAT, FORMAT)


def seen(trace):
    return {{
        "kinds": [c.kind for c in trace.chunks],
        "texts": [c.text for c in trace.chunks],
        "data_types": [type(c.data).__name__ for c in trace.chunks],
        "text": trace.text,
        "reasoning": trace.text_of("reasoning"),
        "tool": trace.text_of("tool"),
        "refusal": trace.text_of("refusal"),
        "heartbeats": trace.heartbeats,
        "format": trace.format,
        "format_auto": trace.format_auto,
        "ttft": trace.ttft,
        "completed": trace.completed,
        "error_kind": trace.error_kind,
        "error": trace.error,
    }}


def test_sync_and_load(streamguard):
    out = {{}}
    for name, path in CASES:
        trace = streamguard.stream(path, json=BODY, format=fmt)
        result = streamguard.load(3, path, json=BODY, format=fmt)
        out[name] = {{"stream": seen(trace), "load": [seen(t) for t in result.traces]}}
    with open("seen.json", "w") as f:
        json.dump(out, f)


def test_auto(streamguard):
    # No format=: recognised from the content type and the first events.
    out = {{name: seen(streamguard.stream(path, json=BODY)) for name, path in AUTO_CASES}}
    with open("seen_auto.json", "w") as f:
        json.dump(out, f)


@pytest.mark.asyncio
async def test_async(streamguard):
    # Concurrent, but not all at once: on a busy 2-core machine 20 streams at once would
    # measure the machine's queue, not the first token's pause.
    slots = asyncio.Semaphore(4)

    async def one(path):
        async with slots:
            return await streamguard.astream(path, json=BODY, format=fmt)

    traces = await asyncio.gather(*(one(path) for _, path in CASES))
    with open("seen_async.json", "w") as f:
        json.dump({{name: seen(t) for (name, _), t in zip(CASES, traces)}}, f)
"""


def check(case: Case, seen: dict[str, Any], where: str) -> None:
    """Assert one trace (as dumped by the inner run) reads ``case`` as the vendor means it."""
    label = f"{case.name} ({where})"
    assert seen["kinds"] == list(case.kinds), (label, seen)
    assert seen["text"] == case.text, (label, seen)
    assert seen["reasoning"] == case.reasoning, (label, seen)
    assert seen["tool"] == case.tool, (label, seen)
    assert seen["refusal"] == case.refusal, (label, seen)
    assert seen["heartbeats"] == case.heartbeats, (label, seen)
    if case.data_type is not None:
        assert seen["data_types"] == [case.data_type] * len(case.kinds), (label, seen)
    if case.error_kind is None:
        assert seen["completed"] is True, (label, seen)
        assert seen["error_kind"] is None, (label, seen)
    else:
        assert seen["completed"] is False, (label, seen)
        assert seen["error_kind"] == case.error_kind, (label, seen)
        assert case.error_has in (seen["error"] or ""), (label, seen)
    if case.kinds:
        assert seen["ttft"] is not None, (label, seen)
        assert PAUSE_S - TIMER_SLACK_S <= seen["ttft"] <= PAUSE_S + TTFT_SLACK_S, (label, seen)
    else:
        assert seen["ttft"] is None, (label, seen)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_format_reads_its_transcripts(
    fmt: str,
    official_clients: ModuleType,
    pytester: pytest.Pytester,
    run: Callable[..., pytest.RunResult],
    replay_url: str,
) -> None:
    _, cases = FORMATS[fmt]
    pairs = [[case.name, path_of(fmt, case)] for case in cases]
    builtin = not fmt.startswith("custom")
    auto = [pair for pair, case in zip(pairs, cases, strict=True) if builtin and case.auto]
    pytester.makepyfile(INNER.format(cases=json.dumps(pairs), auto_cases=json.dumps(auto), fmt=fmt))
    # The reader's reading of each transcript, alone: the client judges' reading of the same
    # bytes is compared with the oracles in tests/judge.
    result = run("--streamguard-client", "none")
    result.assert_outcomes(passed=3)
    seen = json.loads((pytester.path / "seen.json").read_text())
    seen_async = json.loads((pytester.path / "seen_async.json").read_text())
    seen_auto = json.loads((pytester.path / "seen_auto.json").read_text())
    for case in cases:
        check(case, seen[case.name]["stream"], "stream")
        assert seen[case.name]["stream"]["format_auto"] is False
        check(case, seen_async[case.name], "astream")
        assert len(seen[case.name]["load"]) == 3
        for i, trace in enumerate(seen[case.name]["load"]):
            check(case, trace, f"load trace {i}")
        if case.name in seen_auto:
            got = seen_auto[case.name]
            check(case, got, "auto")
            recognised = case.kinds or case.error_kind == "empty"
            assert (got["format"], got["format_auto"]) == (fmt if recognised else "auto", True)
    assert len(seen_auto) == len(auto)
    # The official client, where there is one, reads the same bytes the same way (the SDKs are
    # imported by the fixture, not at collection, where they cost every xdist worker seconds).
    oracle = official_clients.ORACLES.get(fmt)
    if oracle is not None:
        # Independent reads of different transcripts: in parallel, to keep the run short.
        with ThreadPoolExecutor(max_workers=8) as pool:
            checks = [
                pool.submit(
                    oracle.check, replay_url, path_of(fmt, case), case, seen[case.name]["stream"]
                )
                for case in cases
            ]
            for done in checks:
                done.result()
