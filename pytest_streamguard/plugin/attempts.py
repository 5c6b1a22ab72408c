"""A test run more than once on the same item (pytest-rerunfailures): each attempt on its own.

pytest-rerunfailures runs a failed test's whole protocol again on the same ``pytest.Item``, so
whatever the plugin keeps on the item (its guards, its JUnit properties) would carry over into
the next attempt, which would then be judged over every earlier attempt's streams.
:func:`begin_attempt` counts the attempts and tells the session to start afresh;
:func:`counted_record` makes the latest attempt's record the test's, with the earlier attempts'
records kept inside it (``earlier_attempts``), so the summary, the verdict and the baseline
count the attempt that counted and the JSON report still holds the others.
"""

from __future__ import annotations

import pytest

from pytest_streamguard.report.recording import junit_properties
from pytest_streamguard.report.records import TestRecord

__all__ = ["attempt_lines", "begin_attempt", "counted_record"]

#: How many times the item's protocol has started (1 for a test run once).
ATTEMPT_KEY = pytest.StashKey[int]()
#: The record of the item's latest attempt that kept one.
RECORD_KEY = pytest.StashKey[TestRecord]()


def begin_attempt(item: pytest.Item) -> bool:
    """Count an attempt of ``item`` (called at its setup); True when it is a rerun. A rerun's
    item still holds the previous attempt's JUnit properties: they are taken off, since the
    report of this attempt would show both."""
    attempt = item.stash.get(ATTEMPT_KEY, 0) + 1
    item.stash[ATTEMPT_KEY] = attempt
    previous = item.stash.get(RECORD_KEY, None)
    if previous is not None:
        for prop in junit_properties(previous):
            if prop in item.user_properties:
                item.user_properties.remove(prop)
    return attempt > 1


def counted_record(item: pytest.Item, record: TestRecord, records: list[TestRecord]) -> None:
    """Add ``record``, the latest attempt's, to the session's ``records``: it replaces the
    record of an earlier attempt of the same item, which moves into its
    ``earlier_attempts`` (with those before it)."""
    record.attempt = item.stash.get(ATTEMPT_KEY, 1)
    previous = item.stash.get(RECORD_KEY, None)
    kept = [i for i, other in enumerate(records) if other is previous]
    if previous is not None and kept:
        del records[kept[0]]
        record.earlier_attempts = [*previous.earlier_attempts, previous]
        previous.earlier_attempts = []
    item.stash[RECORD_KEY] = record
    records.append(record)


def attempt_lines(records: list[TestRecord]) -> list[str]:
    """One line per test that ran more than once: the attempt that counted (the summary's row)
    and how each earlier one ended; empty when every test ran once."""
    rerun = [r for r in records if r.earlier_attempts]
    if not rerun:
        return []
    lines = [
        "reruns (each attempt judged on its own streams; the rows above are the last attempts, "
        "earlier ones are in the JSON report's earlier_attempts):"
    ]
    for record in rerun:
        before = ", ".join(f"{r.attempt} {_outcome(r)}" for r in record.earlier_attempts)
        lines.append(
            f"  {record.nodeid}: attempt {record.attempt} {_outcome(record)}; before: {before}"
        )
    return lines


def _outcome(record: TestRecord) -> str:
    chunks = sum(len(t.chunks) for t in record.traces)
    return f"{record.verdict} ({chunks} chunks)"
