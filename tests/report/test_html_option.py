"""``--streamguard-html`` and its ini key ``streamguard_html``."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_streamguard.plugin.session import SETTINGS_KEY

INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"


def test_cli_beats_ini_beats_default(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    assert pytester.parseconfigure().stash[SETTINGS_KEY].html_path is None
    pytester.makeini(INI + "streamguard_html = from-ini.html\n")
    assert pytester.parseconfigure().stash[SETTINGS_KEY].html_path == Path("from-ini.html")
    config = pytester.parseconfigure("--streamguard-html", "reports/cli.html")
    assert config.stash[SETTINGS_KEY].html_path == Path("reports/cli.html")


def test_a_directory_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.mkdir("reports")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--streamguard-html", "reports")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*'reports' from --streamguard-html is not a valid streamguard_html: it is a "
            "directory; expected a file path such as reports/streamguard.html"
        ]
    )


def test_help_lists_the_option(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*--streamguard-html=*", "*streamguard_html (string):*"])
