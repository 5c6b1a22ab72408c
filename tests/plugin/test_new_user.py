"""A new user's mistakes and first failing runs (issue 29, points 3 to 10), each run as a user
would: a pytest subprocess on the example app, through the session's embedded Toxiproxy."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from plugin_helpers import INI

SubRun = Callable[..., pytest.RunResult]


@pytest.fixture
def run_sub(pytester: pytest.Pytester, app_url: str, toxiproxy_url: str) -> SubRun:
    """Run pytest in a subprocess with the plugin on, against the shared app and server."""

    def run_pytest(*args: str) -> pytest.RunResult:
        return pytester.runpytest_subprocess(
            "--streamguard",
            "--streamguard-toxiproxy",
            toxiproxy_url,
            "--streamguard-target-url",
            app_url,
            "-p",
            "no:cacheprovider",
            *args,
        )

    return run_pytest


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
            "ERROR: 2 collected tests need pytest-streamguard (its fixtures or the "
            "token_deadline marker), e.g. test_*::test_marked, but it is off: run pytest "
            "with --streamguard *"
        ]
    )
    # A run that collects no such test is not an error, even with the requirement in the ini.
    result = pytester.runpytest_subprocess(*args, "-k", "plain")
    result.assert_outcomes(passed=1, deselected=2)


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
        """
    )
    result = run_sub()
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*token_deadline(ttft=500) is 500 seconds: deadlines are in seconds (for 500 ms "
            "write ttft=0.5); a deadline above 60 s needs long=True on the marker",
        ]
    )
    result.stdout.fnmatch_lines(["*token_deadline(long='yes') is not True or False.*"])
