"""The streams where the plugin's reader and the judging client differ, for the summary and the
HTML report.

A client judge (:mod:`pytest_streamguard.judge`) decides a stream's verdict; the reader runs
beside it. A difference that no documented stricter rule explains is a bug of the plugin's
reader; an exception the plugin's own code raised inside a judge is a judge defect (the
reader's verdict stands). The summary (:func:`disagreement_lines`) and the HTML report list each one
(:func:`disagreements`), what each side concluded, and the command that runs the test again,
to report it with.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_streamguard.common.display import counted
from pytest_streamguard.report.records import TestRecord

__all__ = ["Disagreement", "disagreement_lines", "disagreements", "heading"]


@dataclass(frozen=True)
class Disagreement:
    """One stream whose reader and client concluded differently, with no rule to explain it."""

    nodeid: str
    stream: str
    client: str
    client_concluded: str
    reader_concluded: str
    transcript: str | None = None
    """The recorded response saved as a transcript (``streamguard_transcripts``), if it was."""
    defect: bool = False
    """The judge's own code raised (``client_concluded`` says what): the reader's verdict stands."""
    differs: str | None = None
    """Every field on which they differ (``completed``, a kind's text, the end reason)."""

    @property
    def reproduce(self) -> str:
        """The command that runs the test again, judged by the same client."""
        return f"pytest '{self.nodeid}' --streamguard --streamguard-client {self.client}"


def disagreements(records: list[TestRecord]) -> list[Disagreement]:
    """Every stream of ``records`` whose reader and client disagree without a documented rule
    (a difference a rule explains is the plugin being stricter on purpose)."""
    found = []
    for record in records:
        for trace in record.traces:
            judged = trace.judged
            if trace.reader_agrees is not False or judged is None or judged["rule"] is not None:
                continue
            found.append(
                Disagreement(
                    record.nodeid,
                    trace.name,
                    trace.client or "?",
                    judged["client"] or "",
                    judged["reader"] or "",
                    judged.get("transcript"),
                    judged.get("defect") is not None,
                    judged.get("differs"),
                )
            )
    return found


def heading(count: int, defects: int = 0) -> str:
    """What a list of ``count`` disagreements (``defects`` of them judge defects) is, and what
    to do with it."""
    if defects:
        return (
            f"plugin bug: on {counted(count, 'stream')} the judge's own code failed (judge "
            "defect: the reader's verdict stands) or the reader and the judging client disagree "
            "(the client's verdict stands); please report these to pytest-streamguard:"
        )
    return (
        f"plugin bug: the reader and the judging client disagree on {counted(count, 'stream')} "
        "(the client's verdict stands; please report these to pytest-streamguard):"
    )


def disagreement_lines(records: list[TestRecord]) -> list[str]:
    """One line per stream whose reader and client disagree without a documented rule, under
    a heading; nothing when every judged stream agreed (or a rule explains the difference)."""
    found = disagreements(records)
    if not found:
        return []
    lines = [
        f"  {d.nodeid} {d.stream}: "
        + (
            f"{d.client_concluded} in the {d.client} judge; the reader's verdict stands "
            f"({d.reader_concluded})"
            if d.defect
            else f"the {d.client} client concluded {d.client_concluded}; "
            f"the reader {d.reader_concluded}"
            + (f"; they differ on {d.differs}" if d.differs else "")
        )
        + f"; reproduce: {d.reproduce}"
        + (f"; bytes: {d.transcript}" if d.transcript else "")
        for d in found
    ]
    return [heading(len(found), sum(d.defect for d in found)), *lines]
