"""Every relative link in README.md and docs/ resolves to a file, and its anchor to a heading.

``mkdocs build --strict`` checks the links between pages of the site; the README is not part of
the site, and GitHub renders both, so this test checks every page the same way: a relative link
must name an existing file inside the repository, and ``page.md#anchor`` must name a heading of
that page (slugged as Python-Markdown's toc extension does, which matches GitHub's for the
headings we write).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from doc_blocks import ROOT, pages, prose, where
from markdown.extensions.toc import slugify

_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?(?P<url>[^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)"
)
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(?P<url>\S+?)>?(?:\s+.*)?$")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(?P<title>.+?)\s*#*\s*$")


def anchors(page: Path, text: str | None = None) -> set[str]:
    """The anchors of a page's headings (an explicit ``{#id}`` wins over the slug)."""
    found = set()
    for line in prose(page.read_text() if text is None else text, inline_code=True).splitlines():
        heading = _HEADING.match(line)
        if heading is None:
            continue
        title = heading["title"]
        explicit = re.search(r"\{#(?P<id>[\w-]+)\}\s*$", title)
        if explicit:
            found.add(explicit["id"])
            continue
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)
        # Emphasis marks go (`code`, *em*, _em_); an underscore inside a word (held_open) stays,
        # as Python-Markdown's slug keeps it.
        title = re.sub(r"(?<!\w)_+|_+(?!\w)", "", re.sub(r"[`*]", "", title))
        found.add(slugify(title, "-"))
    return found


def links(page: Path, text: str | None = None) -> list[tuple[int, str]]:
    """``(line, url)`` of every Markdown link and image outside code."""
    found = []
    body = prose(page.read_text() if text is None else text)
    for number, line in enumerate(body.splitlines(), 1):
        found += [(number, m["url"]) for m in _LINK.finditer(line)]
        reference = _REFERENCE.match(line)
        if reference:
            found.append((number, reference["url"]))
    return found


def broken_links(page: Path, text: str | None = None) -> list[str]:
    """One line per relative link of the page that does not resolve, naming page and line."""
    problems = []
    for number, url in links(page, text):
        if not url or _SCHEME.match(url):
            continue
        path, _, anchor = url.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.is_relative_to(ROOT):
            problems.append(f"{where(page, number)}: {url} points outside the repository")
        elif not target.exists():
            problems.append(f"{where(page, number)}: {url}: no such file")
        elif anchor and target.suffix != ".md":
            problems.append(
                f"{where(page, number)}: {url}: an anchor into a file that is not a page"
            )
        elif anchor and anchor not in anchors(target, text if target == page else None):
            problems.append(f"{where(page, number)}: {url}: no heading with anchor #{anchor}")
    return problems


@pytest.mark.parametrize("page", pages(), ids=[where(p) for p in pages()])
def test_relative_links_resolve(page: Path) -> None:
    problems = broken_links(page)
    if problems:
        pytest.fail("broken links:\n" + "\n".join(problems), pytrace=False)


def test_the_readme_links_into_the_docs() -> None:
    readme = ROOT / "README.md"
    targets = {url.partition("#")[0] for _, url in links(readme)}
    for page in ("index", "getting-started", "deadlines", "faults", "protocols", "load"):
        assert f"docs/{page}.md" in targets, page


def test_broken_links_and_anchors_are_named_by_page_and_line() -> None:
    page = ROOT / "docs" / "index.md"
    text = (
        "# Title\n\n"
        "[fine](getting-started.md#options) and [fine too](#title)\n"
        "[gone](no-such-page.md)\n"
        "`[not a link](missing.md)` and ![picture](report.png)\n"
        "[bad anchor](faults.md#no-such-heading) [out](../../outside.md) <https://example.org>\n"
        "```text\n[inside code](missing.md)\n```\n"
    )
    assert broken_links(page, text) == [
        "docs/index.md:4: no-such-page.md: no such file",
        "docs/index.md:6: faults.md#no-such-heading: no heading with anchor #no-such-heading",
        "docs/index.md:6: ../../outside.md points outside the repository",
    ]


def test_anchors_follow_the_toc_slugs() -> None:
    assert "many-streams-in-one-test-streamguardload" in anchors(ROOT / "docs" / "load.md")
    assert "the-ingress-fault-nginx" in anchors(ROOT / "docs" / "faults.md")
