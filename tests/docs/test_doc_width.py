"""Code blocks of the first pages a user reads fit the site's content column at 1400 px.

In the built site (mkdocs Material, a 1400 px wide window) a code block shows about 80
characters before it scrolls sideways, as a screenshot of headless Chromium showed; 76 leaves a
margin for fonts that run wider. The front pages and the CI page are held to it; a long command
is broken with a shell continuation, a long output line is wrapped and the page says so.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from doc_blocks import DOCS, README, Block, blocks

MAX_COLUMNS = 76
FRONT_PAGES = [README, DOCS / "index.md", DOCS / "getting-started.md", DOCS / "ci.md"]


@pytest.mark.parametrize("page", FRONT_PAGES, ids=lambda p: p.name)
def test_code_blocks_fit_the_content_column(page: Path) -> None:
    found: list[Block] = blocks(page)
    assert found, f"{page} has no code block: is it the page this test means?"
    too_wide = [
        f"{block.path.name}:{block.line + 1 + number}: {len(line)} columns: {line}"
        for block in found
        for number, line in enumerate(block.code.splitlines())
        if len(line) > MAX_COLUMNS
    ]
    assert not too_wide, "\n".join(too_wide)
