"""The documentation's pages and the fenced code blocks in them, read the way Markdown does."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"

# An opening fence: up to 3 spaces, 3+ backticks or tildes, then the info string.
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")


def pages() -> list[Path]:
    """README.md and every page under docs/, in a stable order."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def where(path: Path, line: int = 0) -> str:
    """``docs/faults.md:42``: a page and line as a reader finds them."""
    name = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
    return f"{name}:{line}" if line else name


@dataclass(frozen=True)
class Block:
    """One fenced code block: its page, the line of its opening fence, language and code."""

    path: Path
    line: int
    language: str
    code: str

    @property
    def where(self) -> str:
        """The page and line of the opening fence."""
        return where(self.path, self.line)

    @property
    def is_test_module(self) -> bool:
        """A pytest test module (run by pytest), as opposed to a script (run by python)."""
        return re.search(r"^(async\s+)?def test_\w*\s*\(", self.code, re.MULTILINE) is not None


def blocks(path: Path, text: str | None = None) -> list[Block]:
    """Every fenced code block of a page, with the fences' own indentation removed."""
    lines = (path.read_text() if text is None else text).splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        language = opening["info"].split()[0].lower() if opening["info"].split() else ""
        closing = re.compile(rf"^ {{0,3}}{fence[0]}{{{len(fence)},}}\s*$")
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not closing.match(lines[j]):
            line = lines[j]
            body.append(line[min(indent, len(line) - len(line.lstrip(" "))) :])
            j += 1
        found.append(Block(path, i + 1, language, "\n".join(body) + "\n"))
        i = j + 1
    return found


def prose(text: str, *, inline_code: bool = False) -> str:
    """The page without its fenced code blocks, and without inline code unless asked for
    (links live outside code; a heading's inline code is part of its anchor)."""
    out: list[str] = []
    in_fence: re.Pattern[str] | None = None
    for line in text.splitlines():
        if in_fence is not None:
            if in_fence.match(line):
                in_fence = None
            out.append("")
            continue
        opening = _FENCE.match(line)
        if opening is not None:
            fence = opening["fence"]
            in_fence = re.compile(rf"^ {{0,3}}{fence[0]}{{{len(fence)},}}\s*$")
            out.append("")
            continue
        out.append(line if inline_code else re.sub(r"(`+)(?:(?!\1).)+?\1", "", line))
    return "\n".join(out)
