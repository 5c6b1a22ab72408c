"""The JSON report's compact form: a trace's chunks as rows, texts only where they are needed.

A trace's builtin-typed form (:meth:`~pytest_streamguard.stream.trace.StreamTrace.to_dict`)
has one object per chunk, which is what a pytest-xdist worker sends its controller and what
the HTML page is drawn from. In the JSON report file (version 2) a trace instead names its
chunks' fields once, in ``chunk_fields``, and each chunk is a row of values in that order
(:func:`compact_test`); which fields, and which streams keep their texts, is in
docs/reports.md ("JSON").

:func:`expanded` turns rows back into chunk objects (a trace already in that form, as in a
version-1 report or a worker's payload, is returned as it is), so every reader takes both.
:func:`dumps` writes the document indented, but a list without objects on one line, and a
list of lists one row per line: a report stays readable, without a line per number.
"""

from __future__ import annotations

import json
from typing import Any

from pytest_streamguard.verdict.findings.base import sent_ns

# Verdicts of a test whose streams' chunk texts are left out (every other verdict is a failure
# of some kind, whose texts help to tell why).
_PASSED = frozenset({"pass", "unchecked"})


def compact_test(test: dict[str, Any], *, texts: bool) -> dict[str, Any]:
    """A test record's builtin-typed form (``TestRecord.to_dict()``) with each trace's chunks
    as rows; ``texts``: keep every stream's chunk texts, passing or not."""
    keep = texts or test.get("verdict") not in _PASSED
    traces = [
        compact_trace(trace, texts=keep or trace.get("completed") is not True)
        for trace in test.get("traces", [])
    ]
    return {**test, "traces": traces}


def compact_trace(trace: dict[str, Any], *, texts: bool) -> dict[str, Any]:
    """A trace's builtin-typed form with its chunks as rows under ``chunk_fields``;
    ``texts``: keep each chunk's ``text``, ``data`` and ``parts``."""
    chunks: list[dict[str, Any]] = trace.get("chunks", [])
    columns: dict[str, list[Any]] = {
        "index": [c["index"] for c in chunks],
        "stamp_ns": [c["stamp_ns"] for c in chunks],
    }
    if any(c.get("first_byte_ns", c["stamp_ns"]) != c["stamp_ns"] for c in chunks):
        columns["first_byte_ns"] = [c.get("first_byte_ns", c["stamp_ns"]) for c in chunks]
    columns["nbytes"] = [c["nbytes"] for c in chunks]
    if texts:
        columns["text"] = [c["text"] for c in chunks]
        columns["data"] = [c.get("data") for c in chunks]
        _optional(columns, "parts", [c.get("parts") for c in chunks])
    else:
        _optional(columns, "sent_ns", [sent_ns(c.get("data")) for c in chunks])
        _optional(
            columns, "kind", ["+".join(c["parts"]) if c.get("parts") else None for c in chunks]
        )
    compact: dict[str, Any] = {}
    for key, value in trace.items():
        if key == "chunks":
            compact["chunk_fields"] = list(columns)
            compact["chunks"] = [list(row) for row in zip(*columns.values(), strict=True)]
        else:
            compact[key] = value
    return compact


def _optional(columns: dict[str, list[Any]], name: str, values: list[Any]) -> None:
    """Add the column unless every value is null."""
    if any(v is not None for v in values):
        columns[name] = values


def expanded(trace: dict[str, Any]) -> dict[str, Any]:
    """A trace with its chunks as objects (:meth:`StreamTrace.to_dict`'s form), from rows under
    ``chunk_fields``; a trace without ``chunk_fields`` is returned as it is. A chunk whose text
    was left out has the text ``""``, ``data`` ``{"sent_ns": ...}`` (or null) and ``parts``
    with an empty text per kind."""
    fields = trace.get("chunk_fields")
    if fields is None:
        return trace
    chunks = []
    for row in trace.get("chunks", []):
        values = dict(zip(fields, row, strict=True))
        if "text" not in values:
            sent = values.pop("sent_ns", None)
            kind = values.pop("kind", None)
            values["text"] = ""
            values["data"] = None if sent is None else {"sent_ns": sent}
            values["parts"] = None if kind is None else dict.fromkeys(kind.split("+"), "")
        chunks.append(values)
    rest = {k: v for k, v in trace.items() if k not in ("chunk_fields", "chunks")}
    return {**rest, "chunks": chunks}


def texts_stored(trace: dict[str, Any]) -> bool:
    """Whether a trace of a report holds its chunks' texts (false for a compact report's
    passing stream)."""
    fields = trace.get("chunk_fields")
    return fields is None or "text" in fields


def dumps(document: Any) -> str:
    """``document`` as JSON, indented by one space per level; a list without objects on one
    line, and a list of lists (chunk rows, reads) one inner list per line, unindented (a load's
    rows are most of the file: their indentation alone was a tenth of it)."""
    return _dumps(document, 0)


def _dumps(value: Any, depth: int) -> str:
    inner = "\n" + " " * (depth + 1)
    if isinstance(value, dict) and value:
        items = (f"{json.dumps(k)}: {_dumps(v, depth + 1)}" for k, v in value.items())
        return "{" + inner + ("," + inner).join(items) + "\n" + " " * depth + "}"
    if isinstance(value, list) and any(isinstance(v, dict) for v in value):
        items = (
            _dumps(v, depth + 1) if isinstance(v, dict) else json.dumps(v, separators=(",", ":"))
            for v in value
        )
        return "[" + inner + ("," + inner).join(items) + "\n" + " " * depth + "]"
    if isinstance(value, list) and any(isinstance(v, list) for v in value):
        rows = (json.dumps(v, separators=(",", ":")) for v in value)
        return "[\n" + ",\n".join(rows) + "\n" + " " * depth + "]"
    return json.dumps(value, separators=(",", ":"))
