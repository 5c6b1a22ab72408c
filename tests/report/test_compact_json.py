"""The JSON report's size and ``streamguard_json_text`` in real runs: a passing 30-stream
load of 40 chunks from the bundled target takes at most 150 KB, a passing stream's chunks
leave their texts out and a failed one's keep them, and the option (or its ini key) keeps
every text. The compact form itself is tested in tests/report/test_compact.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from plugin_helpers import INI

from pytest_streamguard.report.compact import texts_stored
from pytest_streamguard.report.records import load_json

KB = 1_000


def test_a_passing_load_of_30_streams_of_40_chunks_writes_at_most_150_kb(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    # The subject is a passing record's size, so the deadline only has to pass: a busy make
    # test's reads came over 1 s late, which broke a 1 s chunk bound (and, before the body's
    # end was stamped on the wire, read as bodies held open after their last token).
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.token_deadline(ttft=10.0, chunk=10.0)
        def test_load(streamguard):
            result = streamguard.load(30, json={"prompt": "hello", "max_new_tokens": 40})
            assert result.completed == 30, [t.error for t in result.traces if t.error]
            assert len(result.gaps) == 30 * 39
        """
    )
    result = pytester.runpytest(
        "--streamguard",
        "--streamguard-toxiproxy",
        toxiproxy_url,
        "-p",
        "no:cacheprovider",
        "--streamguard-json",
        "report.json",
    )
    result.assert_outcomes(passed=1)
    path = pytester.path / "report.json"
    assert path.stat().st_size <= 150 * KB, path.stat().st_size
    report = json.loads(path.read_text(encoding="utf-8"))
    (test,) = report["tests"]
    assert test["verdict"] == "pass"
    # Each chunk: its index, arrival stamp, size and the bundled target's send stamp.
    assert {tuple(t["chunk_fields"]) for t in test["traces"]} == {
        ("index", "stamp_ns", "nbytes", "sent_ns")
    }
    assert sum(len(t["chunks"]) for t in test["traces"]) == 30 * 40
    _, (record,) = load_json(path)
    assert all(
        c.data is not None and c.data["sent_ns"] > 0 for t in record.traces for c in t.chunks
    )


TESTS = """
import pytest

@pytest.mark.token_deadline(ttft=2.0, chunk=1.0)
def test_pass(streamguard):
    streamguard.stream(json={"max_new_tokens": 3, "interval_s": 0.01})

@pytest.mark.token_deadline(ttft=2.0, chunk=0.05)
def test_fail(streamguard):
    streamguard.stream(json={"max_new_tokens": 3, "interval_s": 0.2})
"""


def _texts(report: dict[str, Any]) -> dict[str, list[str | None]]:
    """Per test (by name): each stream's text, or None where the report left it out."""
    texts: dict[str, list[str | None]] = {}
    for test in report["tests"]:
        name = test["nodeid"].split("::")[1]
        for trace in test["traces"]:
            fields = trace["chunk_fields"]
            text = (
                "".join(row[fields.index("text")] for row in trace["chunks"])
                if texts_stored(trace)
                else None
            )
            texts.setdefault(name, []).append(text)
    return texts


@pytest.mark.parametrize("how", ["default", "override", "ini"])
def test_json_text_keeps_every_chunks_text(
    pytester: pytest.Pytester, run: Callable[..., pytest.RunResult], how: str
) -> None:
    pytester.makepyfile(TESTS)
    args = ["--streamguard-json", "report.json"]
    if how == "override":
        args += ["-o", "streamguard_json_text=true"]
    if how == "ini":
        pytester.makeini(INI + "streamguard_json_text = true\n")
    run(*args).assert_outcomes(passed=1, failed=1)
    texts = _texts(json.loads((pytester.path / "report.json").read_text(encoding="utf-8")))
    passing = None if how == "default" else "tok0 tok1 tok2 "
    assert texts == {"test_pass": [passing], "test_fail": ["tok0 tok1 tok2 "]}


def test_a_bad_json_text_ini_value_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI + "streamguard_json_text = maybe\n")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess(
        "--streamguard", "--streamguard-target-url", "http://127.0.0.1:1", "-p", "no:cacheprovider"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: ini key streamguard_json_text: invalid truth value 'maybe'; expected true or "
            "false (or yes/no, on/off, 1/0)"
        ]
    )
