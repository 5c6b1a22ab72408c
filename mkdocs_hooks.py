"""MkDocs hook (``hooks:`` in mkdocs.yml): Sphinx cross-reference roles read as plain code.

The docstrings use Sphinx roles (``:class:`~pkg.mod.Name```, ``:meth:`stream```), which
mkdocstrings renders literally. The site shows the name alone, the way Sphinx would.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:class|meth|func|mod|attr|exc|data|obj):<code>(~?)([^<]*)</code>")


def _name(match: re.Match[str]) -> str:
    # ``~pkg.mod.Name`` shows as ``Name``, as in Sphinx; a plain target keeps its full text.
    tilde, target = match.groups()
    return f"<code>{target.rsplit('.', 1)[-1] if tilde else target}</code>"


def on_page_content(html: str, **kwargs: Any) -> str:
    """Rewrite every rendered role into a code span of the name it refers to."""
    return _ROLE.sub(_name, html)
