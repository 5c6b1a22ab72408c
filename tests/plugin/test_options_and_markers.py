"""Options, ini keys, the marker's registration and validation, and skipping when off
(pytester runs that never need the target or the Toxiproxy server)."""

from __future__ import annotations

import fnmatch
import re

import pytest
from plugin_helpers import INI, error_section

from pytest_streamguard.plugin.session import SETTINGS_KEY

USES_PLUGIN = """
import pytest

@pytest.mark.token_deadline(ttft=0.5, chunk=0.2)
def test_marked():
    pass

def test_fixture(streamguard):
    pass

def test_toxiproxy(toxiproxy):
    pass

def test_plain():
    pass
"""


def test_skipped_without_streamguard(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(USES_PLUGIN)
    result = pytester.runpytest("-rs")
    result.assert_outcomes(passed=1, skipped=3)
    result.stdout.fnmatch_lines(["*SKIPPED*run pytest with --streamguard*"])


def test_cli_beats_ini_beats_default(pytester: pytest.Pytester) -> None:
    config = pytester.parseconfigure()
    settings = config.stash[SETTINGS_KEY]
    assert (settings.enabled, settings.ttft, settings.chunk) == (False, 0.5, 0.2)
    assert settings.ready_path == "/readyz"
    assert settings.startup_timeout == 120.0
    assert settings.target_url is None
    assert settings.toxiproxy_url is None
    assert settings.target_description == "bundled target_app (tiny model)"
    pytester.makeini(INI + "streamguard_ttft = 1.5\nstreamguard_chunk = 0.3\nstreamguard = true\n")
    settings = pytester.parseconfigure().stash[SETTINGS_KEY]
    assert (settings.enabled, settings.ttft, settings.chunk) == (True, 1.5, 0.3)
    settings = pytester.parseconfigure("--streamguard-ttft", "2").stash[SETTINGS_KEY]
    assert (settings.ttft, settings.chunk) == (2.0, 0.3)


def test_target_cmd_is_split_without_a_shell(pytester: pytest.Pytester) -> None:
    config = pytester.parseconfigure("--streamguard-target-cmd", "python 'my app.py' --port {port}")
    assert config.stash[SETTINGS_KEY].target_cmd == ("python", "my app.py", "--port", "{port}")


@pytest.mark.parametrize("flag", ["--accel-off", "-Z", "--heartbeat=0.5"])
def test_target_args_take_a_lone_flag_as_typed(pytester: pytest.Pytester, flag: str) -> None:
    # A user's shell hands pytest ['--streamguard-target-args', '--accel-off']: argparse alone
    # reads the value as an option and stops with "expected one argument".
    pytester.makepyfile(
        f"""
        def test_args(request):
            assert request.config.getoption("streamguard_target_args") == {flag!r}
        """
    )
    result = pytester.runpytest_subprocess(
        "--streamguard-target-args", flag, "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize("option", ["--streamguard", "-v"])
def test_target_args_before_one_of_pytests_options_is_not_taken(
    pytester: pytest.Pytester, option: str
) -> None:
    # A forgotten value before another option: that option is not swallowed as the value (a
    # flag of the app's that is also one of pytest's, like -v or -q4, needs the = form).
    pytester.makepyfile("def test_a(): pass")
    result = pytester.runpytest_subprocess("--streamguard-target-args", option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*argument --streamguard-target-args: expected one argument*"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--streamguard-ttft", "fast"],
            "'fast' from --streamguard-ttft is not a valid streamguard_ttft: "
            "expected a positive number of seconds",
        ),
        (
            ["--streamguard-chunk", "-1"],
            "'-1' from --streamguard-chunk is not a valid streamguard_chunk*",
        ),
        (
            ["-o", "streamguard_startup_timeout=0"],
            "'0' from ini key streamguard_startup_timeout*positive number*",
        ),
        (
            ["--streamguard-target-url", "localhost:8000"],
            "'localhost:8000' from --streamguard-target-url is not a valid*"
            "expected an http(s) URL*",
        ),
        (["--streamguard-toxiproxy", "https://127.0.0.1:8474"], "*toxiproxy's API is plain http*"),
        (
            ["--streamguard-ready-path", "readyz"],
            "'readyz' from --streamguard-ready-path*expected a path starting with '/'*",
        ),
        (
            ["--streamguard-target-cmd", "python 'app.py"],
            "*not a valid streamguard_target_cmd: No closing quotation*",
        ),
        (
            ["--streamguard-target-url", "http://127.0.0.1:1", "--streamguard-target-cmd", "x"],
            "*are both set: give one of them*",
        ),
        (
            ["--streamguard-target-url", "http://127.0.0.1:1", "--streamguard-target-args=-v"],
            "streamguard_target_args (--streamguard-target-args) and streamguard_target_url*",
        ),
    ],
)
def test_bad_option_is_a_usage_error(
    pytester: pytest.Pytester, args: list[str], message: str
) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}"])


def test_bad_ini_value_names_the_ini_key(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI + "streamguard_chunk = soon\n")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*'soon' from ini key streamguard_chunk is not a valid streamguard_chunk*"]
    )


def test_marker_and_options_are_documented(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(
        [
            "@pytest.mark.token_deadline(ttft=None, chunk=None, total=None, percentile=None, "
            "long=False)*",
            "@pytest.mark.streamguard_matrix(*profiles): run the test once per named fault "
            "profile*",
        ]
    )
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(
        [
            "*--streamguard *Turn pytest-streamguard on*",
            "*--streamguard-target-cmd*",
            "*--streamguard-toxiproxy*",
            "*--streamguard-compare-fail=*",
            "*Bounds that fail a compare, e.g. ttft_p95:20%*",
            "*streamguard_chunk (string):*",
            "*streamguard_profiles (string):*",
        ]
    )
    # At most 26 options, each with one line that says what it is for; the settings rarely
    # typed on a command line are ini keys only.
    lines = result.stdout.lines
    options = [i for i, line in enumerate(lines) if line.startswith("  --streamguard")]
    assert 0 < len(options) <= 26
    for i in options:
        inline = re.fullmatch(r"  --\S+( {2,}\S.*)?", lines[i])
        assert inline, lines[i]
        helped, follow = (lines[i], lines[i + 1]) if inline[1] else (lines[i + 1], lines[i + 2])
        assert helped.strip(), lines[i]
        assert not follow.startswith(" " * 24), f"{lines[i]}: help wraps onto a second line"
    assert not any("--streamguard-probe-interval" in line for line in lines)
    result = pytester.runpytest("--fixtures")
    # pytest lists fixtures by their "file:line" text, so their order is no contract.
    result.stdout.fnmatch_lines(["streamguard -- *", "*Per-test handle*"])
    result.stdout.fnmatch_lines(["toxiproxy *-- *"])


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        (
            "token_deadline(0.5)",
            "token_deadline got positional arguments (0.5,). "
            "token_deadline accepts only keyword arguments ttft, chunk, total*",
        ),
        (
            "token_deadline(ttft=0.5, chunks=0.1)",
            "token_deadline got unknown argument(s) chunks. token_deadline accepts only*",
        ),
        ("token_deadline(ttft=-1)", "token_deadline(ttft=-1) must be > 0.*"),
        ("token_deadline(chunk='fast')", "token_deadline(chunk='fast') is not a number.*"),
        (
            "token_deadline(chunk=0.2, percentile=101)",
            "token_deadline(percentile=101) must be <= 100.*",
        ),
        ("token_deadline(percentile=95)", "token_deadline(percentile=...) needs chunk=...*"),
    ],
)
def test_bad_marker_errors_that_test_at_setup(
    pytester: pytest.Pytester, marker: str, message: str
) -> None:
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.{marker}
        def test_bad(streamguard):
            pass

        def test_other():
            pass
        """
    )
    # The marker is checked before any fixture starts a process, so this run needs no target.
    result = pytester.runpytest("--streamguard")
    result.assert_outcomes(passed=1, errors=1)
    # One line: the message itself, with no plugin traceback and no exception chain.
    section = error_section(result.stdout.lines, "ERROR at setup of test_bad")
    assert len(section) == 1, section
    assert fnmatch.fnmatch(section[0], message), section


def test_header_when_enabled(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest(
        "--streamguard", "--streamguard-target-url", "http://127.0.0.1:1", "--streamguard-seed=5"
    )
    result.stdout.fnmatch_lines(
        [
            "streamguard: target=url http://127.0.0.1:1, "
            "toxiproxy=embedded (started on first use), "
            "default deadline ttft=0.5s chunk=0.2s, seed=5",
            # Linux: the kernel's stamps (another OS would say "client", and why).
            "streamguard stamps: kernel (requests at their last byte's send, *)",
        ]
    )
    result = pytester.runpytest()
    result.stdout.no_fnmatch_line("streamguard: target=*")
    result.stdout.no_fnmatch_line("streamguard stamps: *")
