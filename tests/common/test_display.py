"""How the plugin shows commands, paths and counts to a user (common/display.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pytest_streamguard.common.display import (
    counted,
    fit_lines,
    shown_command,
    shown_path,
    shown_text,
)


def test_a_command_is_shown_as_typed_with_paths_under_the_root_relative(tmp_path: Path) -> None:
    argv = [sys.executable, str(tmp_path / "app.py"), "--port", "{port}", "--name", "a b"]
    assert shown_command(argv, tmp_path) == "python app.py --port {port} --name 'a b'"


def test_a_port_placeholder_alone_is_not_quoted_but_shell_words_are() -> None:
    assert shown_command(["serve", "--bind=127.0.0.1:{port}"]) == "serve --bind=127.0.0.1:{port}"
    assert shown_command(["echo", "$HOME;{port}"]) == "echo '$HOME;{port}'"


def test_text_loses_only_the_root_prefix(tmp_path: Path) -> None:
    text = f"error in {tmp_path}/app.py and /elsewhere/app.py"
    assert shown_text(text, tmp_path) == "error in app.py and /elsewhere/app.py"
    assert shown_text(text, None) == text


def test_a_path_outside_the_root_is_kept_as_given(tmp_path: Path) -> None:
    inside = tmp_path / "reports" / "x.json"
    assert shown_path(inside, tmp_path) == str(Path("reports") / "x.json")
    assert shown_path("/elsewhere/x.json", tmp_path) == "/elsewhere/x.json"
    assert shown_path(inside, None) == str(inside)


@pytest.mark.parametrize(
    ("n", "noun", "plural", "expected"),
    [
        (1, "stream", None, "1 stream"),
        (2, "stream", None, "2 streams"),
        (0, "process", "processes", "0 processes"),
    ],
)
def test_counts_take_the_noun_in_the_right_number(
    n: int, noun: str, plural: str | None, expected: str
) -> None:
    assert counted(n, noun, plural) == expected


def test_long_lines_wrap_at_spaces_with_an_indented_continuation() -> None:
    lines = fit_lines(["  short", "  " + "word " * 10 + "x" * 30], 24)
    assert lines[0] == "  short"
    assert all(len(line) <= 24 for line in lines)
    assert all(line.startswith("      ") for line in lines[2:])
    assert "".join(lines[1:]).replace(" ", "") == ("word" * 10 + "x" * 30)
