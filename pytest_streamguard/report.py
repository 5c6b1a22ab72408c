"""Rebuild the HTML report from a saved JSON report.

Usage: ``python -m pytest_streamguard.report results.json -o out.html``. The page is the one
``--streamguard-html`` writes, built from the same document. Bad input (a missing file, a file
that is not JSON, not a pytest-streamguard report, a newer report version, a malformed test
record) is a one-line error on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pytest_streamguard.html_report import write_html
from pytest_streamguard.reports import JSON_FORMAT, JSON_VERSION, load_json

BAD_INPUT = 2


def read_document(path: Path) -> dict[str, Any]:
    """The JSON report at ``path``, checked; :class:`ValueError` naming what is wrong otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{path} is not JSON ({exc}); expected a report written by --streamguard-json"
        ) from None
    if not isinstance(raw, dict) or raw.get("format") != JSON_FORMAT:
        found = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
        raise ValueError(
            f"{path} is not a pytest-streamguard report (format: {found!r}); expected a JSON "
            f'object with "format": "{JSON_FORMAT}", as --streamguard-json writes'
        )
    version = raw.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"{path} has report version {version!r}; expected an integer >= 1")
    if version > JSON_VERSION:
        raise ValueError(
            f"{path} is report version {version}; this plugin reads versions 1 to {JSON_VERSION}"
        )
    try:
        load_json(path)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{path} has a malformed test record ({exc!r})") from None
    return raw


def main(argv: list[str] | None = None) -> int:
    """Run the command; return its exit status (0, or 2 for bad input)."""
    parser = argparse.ArgumentParser(
        prog="python -m pytest_streamguard.report",
        description="Build the self-contained HTML report from a --streamguard-json report.",
    )
    parser.add_argument("json_report", type=Path, help="the JSON report to read")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the HTML file to write")
    args = parser.parse_args(argv)
    try:
        document = read_document(args.json_report)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return BAD_INPUT
    write_html(args.output, document)
    print(f"wrote {args.output} ({len(document.get('tests', []))} test(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
