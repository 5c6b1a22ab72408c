"""A client of one's own judges streams end to end: registered in a conftest, picked by
``client=auto`` for its format (or named), its verdict stands, and where it differs from the
reader the trace, the JSON report and the terminal summary say so, with the command that
reproduces it and, with ``streamguard_transcripts``, the file its bytes were saved in;
``client="none"`` keeps the reader's verdict alone."""

from __future__ import annotations

import json

import pytest
from plugin_helpers import streamguard_runner

from pytest_streamguard import Recorded

CONFTEST = """
from pytest_streamguard import Assembly, ClientJudge, Recorded, Replay, register_judge


class Shouting(ClientJudge):
    '''Concludes the body in capitals: never what the reader reads.'''

    name = "shouting"
    formats = frozenset({"ndjson"})
    module = "json"

    def judge(self, recorded):
        got = Assembly(self.name, Replay(recorded).stamp)
        got.add("text", recorded.body.decode().upper())
        return got.conclusion


register_judge(Shouting())
"""

TESTS = """
BODY = {"max_new_tokens": 2, "interval_s": 0.01}


def test_judged(streamguard):
    trace = streamguard.stream("/ndjson", json=BODY, format="ndjson")
    assert (trace.client, trace.reader_agrees, trace.completed) == ("shouting", False, True)
    assert trace.text.startswith('{"INDEX": 0, "TEXT": "TOK0 "}')
    assert trace.judged["rule"] is None


def test_reader_alone(streamguard):
    trace = streamguard.stream("/ndjson", json=BODY, format="ndjson", client="none")
    assert (trace.client, trace.reader_agrees, trace.judged) == (None, None, None)
    assert (trace.completed, trace.text) == (True, "tok0 tok1 ")
"""


def test_a_registered_client_judges_and_its_disagreement_is_reported(
    pytester: pytest.Pytester, app_url: str, toxiproxy_url: str
) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(TESTS)
    # In a subprocess: the registration must not outlive the run.
    run = streamguard_runner(pytester, toxiproxy_url, app_url, subprocess=True)
    result = run("--streamguard-json", "out.json", "-o", "streamguard_transcripts=tx")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "plugin bug: the reader and the judging client disagree on 1 stream (the client's "
            "verdict stands; please report these to pytest-streamguard):",
            "  test_a_registered_client_judges*.py::test_judged stream 1 (POST /ndjson): the "
            "shouting client concluded completed (text * chars); the reader completed (text 10 "
            "chars); they differ on text; reproduce: pytest "
            "'test_a_registered_client_judges*.py::test_judged' "
            "--streamguard --streamguard-client shouting; bytes: "
            "tx/test_a_registered_client_judges*.py-test_judged/stream-1-POST-ndjson.json",
        ]
    )
    (saved,) = (pytester.path / "tx").glob("*/stream-1-POST-ndjson.json")
    recorded = Recorded.load(saved)
    assert (recorded.status, recorded.format, recorded.ending) == (200, "ndjson", "close")
    assert recorded.body == b'{"index": 0, "text": "tok0 "}\n{"index": 1, "text": "tok1 "}\n'
    assert len(list((pytester.path / "tx").rglob("*.json"))) == 1  # the agreeing one: none
    tests = json.loads((pytester.path / "out.json").read_text())["tests"]
    fields = {t["nodeid"].split("::")[1]: t["traces"][0] for t in tests}
    assert (fields["test_judged"]["client"], fields["test_judged"]["reader_agrees"]) == (
        "shouting",
        False,
    )
    assert fields["test_judged"]["judged"]["reader"] == "completed (text 10 chars)"
    assert (
        fields["test_reader_alone"]["client"],
        fields["test_reader_alone"]["reader_agrees"],
    ) == (
        None,
        None,
    )


def test_a_transcripts_path_that_is_a_file_is_a_usage_error(
    pytester: pytest.Pytester, app_url: str, toxiproxy_url: str
) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    (pytester.path / "taken").write_text("")
    run = streamguard_runner(pytester, toxiproxy_url, app_url)
    result = run("-o", "streamguard_transcripts=taken")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*'taken' from ini key streamguard_transcripts is not a valid streamguard_transcripts: "
            "it is a file; expected a directory path"
        ]
    )
