"""The summary's list of streams where the plugin's reader and the judging client differ.

A client judge (:mod:`pytest_streamguard.judge`) decides a stream's verdict; the reader runs
beside it. A difference that no documented stricter rule explains is a bug of the plugin's
reader: the summary lists each one, what each side concluded, and the command that runs the
test again, to report it with.
"""

from __future__ import annotations

from pytest_streamguard.common.display import counted
from pytest_streamguard.report.records import TestRecord

__all__ = ["disagreement_lines"]


def disagreement_lines(records: list[TestRecord]) -> list[str]:
    """One line per stream whose reader and client disagree without a documented rule, under
    a heading; nothing when every judged stream agreed (or a rule explains the difference)."""
    lines = []
    for record in records:
        for trace in record.traces:
            judged = trace.judged
            if trace.reader_agrees is not False or judged is None or judged["rule"] is not None:
                continue
            lines.append(
                f"  {record.nodeid} {trace.name}: the {trace.client} client concluded "
                f"{judged['client']}; the reader {judged['reader']}; reproduce: "
                f"pytest '{record.nodeid}' --streamguard --streamguard-client {trace.client}"
            )
    if not lines:
        return []
    streams = counted(len(lines), "stream")
    head = (
        f"plugin bug: the reader and the judging client disagree on {streams} (the client's "
        "verdict stands; please report these to pytest-streamguard):"
    )
    return [head, *lines]
