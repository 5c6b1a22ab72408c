"""A new user's mistakes and first failing runs (issue 29, points 3 to 10), each run as a user
would: a pytest subprocess on the example app, through the session's embedded Toxiproxy."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from plugin_helpers import INI, error_section, streamguard_runner

SubRun = Callable[..., pytest.RunResult]


@pytest.fixture
def run_sub(pytester: pytest.Pytester, app_url: str, toxiproxy_url: str) -> SubRun:
    """Run pytest in a subprocess with the plugin on, against the shared app and server."""
    return streamguard_runner(pytester, toxiproxy_url, app_url, subprocess=True)


# --- point 6: a run without --streamguard says so, and --streamguard-require fails it ---

DEADLINE_TESTS = """
import pytest

@pytest.mark.token_deadline(ttft=1.0)
def test_marked(streamguard):
    streamguard.stream(json={"max_new_tokens": 3})

def test_uses_fixture(streamguard):
    pass

def test_plain():
    pass
"""


def test_a_run_without_the_flag_names_it_in_its_summary(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI + "streamguard_target_url = http://127.0.0.1:1\n")
    pytester.makepyfile(DEADLINE_TESTS)
    for args in ((), ("-q",)):
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
        result.assert_outcomes(passed=1, skipped=2)
        assert result.ret == 0
        result.stdout.fnmatch_lines(
            [
                "streamguard: 2 tests skipped: pytest-streamguard is off; run pytest with "
                "--streamguard to check them (--streamguard-require makes this an error)"
            ]
        )
    # Nothing to say when no collected test needs the plugin.
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "plain")
    result.assert_outcomes(passed=1, deselected=2)
    result.stdout.no_fnmatch_line("streamguard:*")


@pytest.mark.parametrize("how", ["flag", "ini"])
def test_streamguard_require_makes_the_forgotten_flag_an_error(
    pytester: pytest.Pytester, how: str
) -> None:
    ini = INI + "streamguard_target_url = http://127.0.0.1:1\n"
    args: tuple[str, ...] = ("-p", "no:cacheprovider")
    if how == "ini":
        ini += "streamguard_require = true\n"
    else:
        args += ("--streamguard-require",)
    pytester.makeini(ini)
    pytester.makepyfile(DEADLINE_TESTS)
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: 2 collected tests (such as test_*::test_marked) need pytest-streamguard "
            "(its fixtures or the token_deadline marker), but it is off: run pytest with "
            "--streamguard *"
        ]
    )
    # A run that collects no such test is not an error, even with the requirement in the ini.
    result = pytester.runpytest_subprocess(*args, "-k", "plain")
    result.assert_outcomes(passed=1, deselected=2)
    # Under pytest-xdist each such test errors at setup, naming the flag.
    result = pytester.runpytest_subprocess(*args, "-n", "2")
    result.assert_outcomes(passed=1, errors=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*this test needs pytest-streamguard (its fixtures or the token_deadline marker), "
            "but it is off: run pytest with --streamguard *"
        ]
    )


# --- point 7: a deadline above 60 s says deadlines are in seconds ---


def test_a_deadline_in_milliseconds_says_seconds(
    pytester: pytest.Pytester, run_sub: SubRun
) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.token_deadline(ttft=500, chunk=200)
        def test_ms(streamguard):
            streamguard.stream(json={"max_new_tokens": 3})

        @pytest.mark.token_deadline(total=600, long=True)
        def test_really_long(streamguard):
            trace = streamguard.stream(json={"max_new_tokens": 3})
            assert trace.completed
            assert streamguard.deadline.total == 600

        @pytest.mark.token_deadline(chunk=0.2, long="yes")
        def test_bad_long(streamguard):
            pass

        def test_explicit_checks_say_seconds_too(streamguard):
            trace = streamguard.stream(json={"max_new_tokens": 3})
            with pytest.raises(ValueError, match="is 200 seconds: deadlines are in seconds"):
                trace.assert_deadline(chunk=200)
            trace.assert_deadline(total=120, long=True)
            result = streamguard.load(2, json={"max_new_tokens": 3})
            with pytest.raises(ValueError, match="deadlines are in seconds"):
                result.assert_deadline(ttft=500)
            result.assert_deadline(ttft=500, long=True)
        """
    )
    result = run_sub()
    result.assert_outcomes(passed=2, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*token_deadline(ttft=500) is 500 seconds: deadlines are in seconds (for 500 ms "
            "write ttft=0.5); a deadline above 60 s needs long=True on the marker",
        ]
    )
    result.stdout.fnmatch_lines(["*token_deadline(long='yes') is not True or False.*"])


# --- point 3: the test's own assert fails first, and the verdict still shows ---


def test_an_assert_that_fails_first_still_shows_the_verdict(
    pytester: pytest.Pytester, run_sub: SubRun
) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.token_deadline(ttft=2.0, chunk=0.5)
        def test_load_asserts_first(streamguard):
            result = streamguard.load(20, json={"max_new_tokens": 3, "fail_after": 1})
            assert result.completed == 20

        @pytest.mark.token_deadline(ttft=2.0, chunk=0.5)
        def test_unrelated_error_with_good_streams(streamguard):
            streamguard.stream(json={"max_new_tokens": 3})
            raise KeyError("not the streams")
        """
    )
    result = run_sub()
    result.assert_outcomes(failed=2)
    section = error_section(result.stdout.lines, "test_load_asserts_first")
    text = "\n".join(section)
    # The user's own failure, then the verdict that names the cause.
    assert "AssertionError: assert 0 == 20" in text, text
    assert text.index("AssertionError") < text.index("token deadline violated"), text
    result.stdout.fnmatch_lines(
        [
            "E       AssertionError: assert 0 == 20",
            "E       streamguard: this test's streams also broke its token deadline "
            "(checked after the body):",
            "E       token deadline violated (20 in 20 streams):",
            "E         20 streams read: 20 server; violations: 20 did not complete",
            "E         stream *: stream did not complete (server: server sent event: error: "
            "generation failed after 1 tokens)*",
        ]
    )
    # Streams that kept their deadline add nothing to another error.
    other = "\n".join(error_section(result.stdout.lines, "test_unrelated_error"))
    assert "KeyError: 'not the streams'" in other
    assert "token deadline" not in other
    result.stdout.fnmatch_lines(["*test_load_asserts_first * FAIL *"])


# --- point 4: a failing 20-stream load's verdict fits a screen; an empty stream once ---


def test_a_failing_load_verdict_fits_a_screen(pytester: pytest.Pytester, run_sub: SubRun) -> None:
    pytester.makepyfile(
        """
        import pytest

        # Every gap is 0.12 s against a 0.05 s bound: 11 marked gaps in each of 20 streams,
        # a timeline longer than a verdict shows.
        @pytest.mark.token_deadline(ttft=5.0, chunk=0.05)
        def test_slow_gaps(streamguard):
            streamguard.load(20, json={"max_new_tokens": 12, "interval_s": 0.12})

        # Each stream ends at once without a token: one violation each, not a ttft one too.
        @pytest.mark.token_deadline(ttft=15.0, chunk=0.2)
        def test_empty(streamguard):
            streamguard.load(20, json={"max_new_tokens": 0})
        """
    )
    result = run_sub("--streamguard-html", "reports/sg.html")
    result.assert_outcomes(failed=2)
    for name, counts in (
        ("test_slow_gaps", "20 streams read: 20 completed; violations: 20 chunk gap"),
        ("test_empty", "20 streams read: 20 empty; violations: 20 did not complete"),
    ):
        section = error_section(result.stdout.lines, name)
        assert len(section) <= 60, "\n".join(section)
        text = "\n".join(section)
        assert counts in text, text
        assert "... and 17 more violations in 17 more streams (worst shown first)" in text, text
        assert text.count("timeline of stream") == 3, text
        assert "every stream's verdict and timeline: the HTML report reports/sg.html" in text
    slow = "\n".join(error_section(result.stdout.lines, "test_slow_gaps"))
    # A clipped timeline keeps its marked chunks and says how much it left out.
    assert "<-- over 50.0 ms" in slow
    assert "lines left out)" in slow
    empty = error_section(result.stdout.lines, "test_empty")
    assert not any("no data event arrived" in line for line in empty), empty
    assert "token deadline violated (20 in 20 streams):" in "\n".join(empty)


# --- point 9: the summary fits the terminal; -q still names the reports; the HTML wording ---

WIDE_SUMMARY = """
import pytest

@pytest.mark.parametrize("case", ["a-rather-long-parameter-id-as-real-suites-have-them-" * 2])
@pytest.mark.token_deadline(ttft=2.0, chunk=0.5)
def test_a_test_with_a_long_name_and_several_faults_on_its_streams(streamguard, case):
    streamguard.faults.latency(5, jitter=2)
    streamguard.faults.slicer(16, size_variation=4, delay_us=100)
    streamguard.faults.bandwidth(10000)
    streamguard.stream(json={"max_new_tokens": 5, "interval_s": 0.01})

def test_unmarked(streamguard):
    streamguard.stream(json={"max_new_tokens": 2})
"""


def _section(lines: list[str], title: str) -> list[str]:
    start = next(i for i, line in enumerate(lines) if line.startswith("=") and title in line)
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("="))
    return lines[start + 1 : end]


def test_the_summary_fits_the_terminal_and_q_names_the_reports(
    pytester: pytest.Pytester, run_sub: SubRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(WIDE_SUMMARY)
    reports = ("--streamguard-json", "r/sg.json", "--streamguard-html", "r/sg.html")
    monkeypatch.setenv("COLUMNS", "250")
    wide = _section(run_sub(*reports).stdout.lines, " streamguard ")
    # Laid out in one row per test, the table would not fit 100 columns.
    assert max(len(line) for line in wide) > 150, wide
    monkeypatch.setenv("COLUMNS", "100")
    result = run_sub(*reports)
    result.assert_outcomes(passed=2)
    section = _section(result.stdout.lines, " streamguard ")
    assert all(len(line) <= 100 for line in section), "\n".join(section)
    text = "\n".join(section)
    # Nothing dropped: every test, its figures, verdict and faults, and the report paths.
    for word in ("test_a_test_with_a_long_name", "test_unmarked", "pass", "unchecked"):
        assert word in text, text
    for fault in ("latency(ms=5, jitter=2", "slicer(", "bandwidth(kb_per_second=10000)"):
        assert fault in text, text
    assert "JSON report: r/sg.json" in text
    assert "HTML report: r/sg.html" in text
    # -q: the one-line count, and still where the reports are.
    quiet = run_sub(*reports, "-q")
    quiet.stdout.fnmatch_lines(
        ["streamguard: 2 tests read streams, 0 violated a deadline", "JSON report: r/sg.json"]
    )
    quiet.stdout.fnmatch_lines(["HTML report: r/sg.html"])
    html = (pytester.path / "r" / "sg.html").read_text()
    assert "(unchecked) (seconds)" not in html
    assert "Deadline: none (no token_deadline marker, so no stream was checked)" in html
    assert "Deadline: <code>ttft=2, chunk=0.5</code> (seconds)" in html


# --- point 5: require_done=True; trace.reads holds (perf_counter_ns, nbytes) ---

REQUIRE_DONE = """
import httpx
import pytest

BODY = {"prompt": "hi", "max_tokens": 3, "max_new_tokens": 3, "interval_s": 0.01,
        "stream": True}
NO_DONE = {**BODY, "drop_done": True}

def test_finish_without_done(streamguard):
    # The openai client's own reading: a finish_reason on every choice is the end.
    assert streamguard.stream("/v1/completions", json=NO_DONE, format="openai").completed
    strict = streamguard.stream(
        "/v1/completions", json=NO_DONE, format="openai", require_done=True
    )
    assert (strict.completed, strict.error_kind) == (False, "truncated")
    assert "require_done=True" in strict.error
    assert len(strict.chunks) == 3
    # With [DONE] it completes, recognised format or named.
    assert streamguard.stream("/v1/completions", json=BODY, require_done=True).completed

def test_load_requires_done(streamguard):
    result = streamguard.load(4, "/v1/completions", json=NO_DONE, require_done=True)
    assert result.outcomes == {"truncated": 4}
    assert streamguard.load(4, "/v1/completions", json=BODY, require_done=True).completed == 4

async def test_astream_requires_done(streamguard):
    trace = await streamguard.astream("/v1/completions", json=NO_DONE, require_done=True)
    assert trace.error_kind == "truncated"
    result = await streamguard.aload(2, "/v1/completions", json=NO_DONE, require_done=True)
    assert result.outcomes == {"truncated": 2}

def test_a_format_without_a_terminal_frame_refuses_it(streamguard):
    with pytest.raises(ValueError, match="the raw format has no terminal frame"):
        streamguard.stream("/v1/completions", json=BODY, format="raw", require_done=True)
    with pytest.raises(ValueError, match="require_done='yes': expected True or False"):
        streamguard.stream("/v1/completions", json=BODY, require_done="yes")

def test_reads_are_stamps_and_byte_counts(streamguard):
    trace = streamguard.stream("/v1/completions", json=BODY)
    body = httpx.post(streamguard.target.url + "/v1/completions", json=BODY).content
    assert all(isinstance(n, int) and n > 0 for _, n in trace.reads)
    assert sum(n for _, n in trace.reads) == len(body)
    stamps = [stamp for stamp, _ in trace.reads]
    assert stamps == sorted(stamps)
    assert trace.request_ns < stamps[0] and stamps[-1] <= trace.end_ns
"""


def test_require_done_on_every_reader(pytester: pytest.Pytester, run_sub: SubRun) -> None:
    pytester.makepyfile(REQUIRE_DONE)
    run_sub("-o", "asyncio_mode=auto").assert_outcomes(passed=5)


# --- point 10: words that match what the code does ---

ROOT = Path(__file__).resolve().parents[2]


def test_an_empty_answer_names_both_usual_causes(
    pytester: pytest.Pytester, run_sub: SubRun
) -> None:
    pytester.makepyfile(
        """
        def test_empty(streamguard):
            trace = streamguard.stream(json={"max_new_tokens": 0})
            assert trace.error_kind == "empty"
            print("ERROR:", trace.error)
        """
    )
    result = run_sub("-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR: the sse stream ended before any token: it sent only event: done (pass "
            "allow_empty=True if an empty answer is expected; a server that cancels a request "
            "when another arrives ends it empty too, as llama-cpp-python's server (python -m "
            "llama_cpp.server) does unless started with --interrupt_requests False)*"
        ]
    )


def test_the_readme_says_what_make_installs_and_what_the_slow_reader_test_does() -> None:
    readme = (ROOT / "README.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    [extras] = re.findall(r"pip install -q (?:--[a-z-]+ )*-e '(\.\[[a-z,]+\])'", makefile)
    assert f'pip install -e "{extras}"' in readme
    [row] = [line for line in readme.splitlines() if line.startswith("| slow reader |")]
    [fault] = re.findall(r"`(bandwidth\(\d+\))`", row)
    suite = (ROOT / "tests" / "resilience" / "test_slow_reader.py").read_text()
    assert f"streamguard.faults.{fault}" in suite
    assert "slow_reader" not in row.split("|")[2]
