"""``python -m pytest_streamguard.report``: rebuild the HTML report from a saved JSON report, or
merge several into one (docs/reports.md, docs/ci.md).

Merging is :class:`~pytest_streamguard.report.merge.Merger`, the code that merges pytest-xdist
workers: every record is kept (labelled with its file), and the pooled percentiles and the
matrix are recomputed from the raw samples. Bad input is a one-line error on stderr and exit
status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pytest_streamguard.common.display import counted
from pytest_streamguard.report.html import write_html
from pytest_streamguard.report.merge import Merger
from pytest_streamguard.report.records import json_document, load_json, write_document

BAD_INPUT = 2


def read_document(path: Path) -> dict[str, Any]:
    """The JSON report at ``path``, its records checked (:func:`load_json`)."""
    load_json(path)
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return document


def merge_documents(parts: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """One report from several (name, document) parts, through :class:`Merger`; compact as
    the plugin writes it: chunk texts are kept for the streams that failed, and left out of
    passing streams (whether or not a part held them)."""
    merger = Merger()
    for name, document in parts:
        merger.add(name, document)
    meta = merger.meta({"merged_from": [n for n, _ in parts]})
    return json_document(merger.records, meta, texts=False)


def main(argv: list[str] | None = None) -> int:
    """Run the command; return its exit status (0, or 2 for bad input)."""
    parser = argparse.ArgumentParser(
        prog="python -m pytest_streamguard.report",
        description="Build the self-contained HTML report from one --streamguard-json report, "
        "or merge several (from runs on many machines) into one HTML and/or JSON report.",
    )
    parser.add_argument(
        "json_reports", type=Path, nargs="+", metavar="json_report", help="JSON report(s) to read"
    )
    parser.add_argument("-o", "--output", type=Path, help="the HTML file to write")
    parser.add_argument("--json", type=Path, help="the (merged) JSON report to write")
    args = parser.parse_args(argv)
    if args.output is None and args.json is None:
        parser.error("give -o/--output FILE.html and/or --json FILE.json")
    paths: list[Path] = args.json_reports
    repeated = sorted({str(p) for p in paths if paths.count(p) > 1})
    if repeated:
        print(f"error: {', '.join(repeated)} given more than once", file=sys.stderr)
        return BAD_INPUT
    try:
        parts = [(str(path), read_document(path)) for path in paths]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return BAD_INPUT
    # One report is shown as it was written; several are merged.
    document = parts[0][1] if len(parts) == 1 else merge_documents(parts)
    tests = len(document.get("tests", []))
    if args.json is not None:
        write_document(args.json, document)
        print(f"wrote {args.json} ({counted(tests, 'test')})")
    if args.output is not None:
        write_html(args.output, document)
        print(f"wrote {args.output} ({counted(tests, 'test')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
