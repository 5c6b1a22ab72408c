"""Size of the JSON report for a passing load: version 1 (every chunk an object with its text
and payload, indented a line per value) against version 2's compact form, on the same records.

Runs ``pytest --streamguard`` once on a generated test that reads ``--streams`` concurrent
streams of ``--tokens`` tokens from the bundled target (started by the plugin, through the
embedded Toxiproxy) with ``streamguard_json_text``, reads the records back, and writes them
again in each form. One row per form: bytes, bytes per chunk, and the ratio to version 1. The
last row is the compact form with every stamp moved to what a machine up a year stamps
(``perf_counter_ns`` counts from boot: 17 digits instead of the 13 to 15 of a machine up
hours or days), the longest the file gets for the same load. Issue 38's bound: at most 150 KB
for 30 streams of 40 chunks::

    .venv/bin/python benchmarks/json_size.py
    .venv/bin/python benchmarks/json_size.py --streams 100 --tokens 64
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import command_line

from pytest_streamguard.report.compact import dumps
from pytest_streamguard.report.records import TestRecord, json_document, load_json

# perf_counter_ns on a machine up a year.
YEAR_UP_NS = 365 * 24 * 3600 * 10**9
BOUND_BYTES = 150_000
TEST = """
import pytest

@pytest.mark.token_deadline(ttft=10.0, chunk=1.0)
def test_load(streamguard):
    result = streamguard.load({streams}, json={{"prompt": "hello", "max_new_tokens": {tokens}}})
    assert result.completed == {streams}, [t.error for t in result.traces if t.error]
"""


def run_load(folder: Path, streams: int, tokens: int) -> tuple[dict[str, Any], list[TestRecord]]:
    """The run's JSON report (every chunk's text kept), read back: its metadata and records."""
    (folder / "test_load.py").write_text(TEST.format(streams=streams, tokens=tokens))
    (folder / "pytest.ini").write_text("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "--streamguard",
        "-o",
        "streamguard_json_text=true",
        "--streamguard-json",
        "report.json",
    ]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the load failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return load_json(folder / "report.json")


def version_1(records: list[TestRecord], meta: dict[str, Any]) -> str:
    """The report as version 1 wrote it."""
    document = {**json_document(records, meta), "version": 1}
    document["tests"] = [record.to_dict() for record in records]
    return json.dumps(document, indent=1) + "\n"


def year_up(records: list[TestRecord]) -> list[TestRecord]:
    """The records with every stamp moved by :data:`YEAR_UP_NS`."""
    moved = []
    for record in records:
        raw = record.to_dict()
        for trace in raw["traces"]:
            for key in ("request_ns", "response_ns", "end_ns", "queued_ns"):
                if trace[key] is not None:
                    trace[key] += YEAR_UP_NS
            for chunk in trace["chunks"]:
                chunk["stamp_ns"] += YEAR_UP_NS
                chunk["first_byte_ns"] += YEAR_UP_NS
                if isinstance(chunk["data"], dict) and "sent_ns" in chunk["data"]:
                    chunk["data"]["sent_ns"] += YEAR_UP_NS
            trace["reads"] = [[stamp + YEAR_UP_NS, n] for stamp, n in trace["reads"]]
            trace["heartbeat_ns"] = [stamp + YEAR_UP_NS for stamp in trace["heartbeat_ns"]]
        moved.append(TestRecord.from_dict(raw))
    return moved


def main() -> None:
    """Parse the options, run the load, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=30, help="concurrent streams")
    parser.add_argument("--tokens", type=int, default=40, help="tokens per stream")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        meta, records = run_load(Path(folder), args.streams, args.tokens)
    meta = {k: v for k, v in meta.items() if k not in ("format", "version", "pooled", "matrix")}
    chunks = sum(len(t.chunks) for r in records for t in r.traces)
    rows = [
        ("version 1 (every text, indent=1)", version_1(records, meta)),
        ("version 2, streamguard_json_text", dumps(json_document(records, meta)) + "\n"),
        ("version 2 (default)", dumps(json_document(records, meta, texts=False)) + "\n"),
        (
            "version 2 (default), stamps of a machine up a year",
            dumps(json_document(year_up(records), meta, texts=False)) + "\n",
        ),
    ]
    before = len(rows[0][1].encode())
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M')}; {args.streams} passing streams of "
        f"{args.tokens} tokens from the bundled target, {chunks} chunks"
    )
    print(command_line("json_size.py"))
    print(f"{'form':<52} {'bytes':>9} {'B/chunk':>8} {'of v1':>6}  bound {BOUND_BYTES:,} B")
    for name, text in rows:
        size = len(text.encode())
        within = "within" if size <= BOUND_BYTES else "over"
        print(f"{name:<52} {size:>9,} {size / chunks:>8.0f} {size / before:>6.0%}  {within}")


if __name__ == "__main__":
    main()
