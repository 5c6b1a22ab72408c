"""How commands and paths are shown to the user: in the header, the summary and the reports.

Paths under the rootdir are shown relative to it, and the interpreter running pytest
(``sys.executable``, as a whole argument) as ``python``, so a report or a screenshot does not
carry the absolute paths of the machine it ran on; a command is shown as a shell would take it,
with the ``{port}`` placeholder as the user wrote it (not quoted as ``'{port}'``).
"""

from __future__ import annotations

import os
import shlex
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

PORT = "{port}"


def shown_text(text: str, rootdir: Path | None) -> str:
    """``text`` with every ``<rootdir>/`` prefix removed (paths under it become relative)."""
    if rootdir is None:
        return text
    root = str(rootdir).rstrip(os.sep) + os.sep
    return text.replace(root, "") if root != os.sep else text


def _quote(arg: str) -> str:
    # Quote as shlex would, but judge the argument with {port} stood in by a plain word: the
    # braces alone must not make it look like something a shell would need quoted.
    plain = arg.replace(PORT, "port")
    return arg if shlex.quote(plain) == plain else shlex.quote(arg)


def _shown_arg(arg: str, rootdir: Path | None) -> str:
    if sys.executable and arg == sys.executable:
        return "python"
    return shown_text(arg, rootdir)


def shown_command(argv: Sequence[str], rootdir: Path | None = None) -> str:
    """A command line as the user would type it, paths under ``rootdir`` made relative."""
    return " ".join(_quote(_shown_arg(arg, rootdir)) for arg in argv)


def shown_path(path: Path | str, rootdir: Path | None) -> str:
    """``path`` relative to ``rootdir`` when it lies under it, else as given."""
    if rootdir is not None:
        absolute = Path(path) if Path(path).is_absolute() else Path.cwd() / path
        try:
            return str(absolute.resolve().relative_to(rootdir.resolve()))
        except ValueError:
            pass
    return str(path)


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 stream``, ``2 streams``: a count with its noun in the right number."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def fit_lines(lines: Sequence[str], width: int) -> list[str]:
    """``lines`` with every line longer than ``width`` wrapped at spaces (a word longer than
    the width is split), its continuation lines indented four columns past the line's own."""
    fitted: list[str] = []
    for line in lines:
        if len(line) <= width:
            fitted.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip()) + 4)
        fitted.extend(
            textwrap.wrap(
                line,
                width,
                subsequent_indent=indent[: max(width // 2, 0)],
                break_on_hyphens=False,
                replace_whitespace=False,
            )
            or [line[:width]]
        )
    return fitted
