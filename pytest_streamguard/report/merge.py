"""Merging per-test records from several parts into one report.

One code path for both kinds of part: the payload a pytest-xdist worker sends its controller
(:mod:`pytest_streamguard.plugin.xdist`) and a saved JSON report read back by
``python -m pytest_streamguard.report A.json B.json ...`` (:mod:`pytest_streamguard.report.cli`).
Each part adds its records (raw samples included) and its metadata under its name; every
percentile of the merged report is then computed from the pooled raw samples, never averaged
from the parts' percentiles.
"""

from __future__ import annotations

from typing import Any

from pytest_streamguard.common.display import counted
from pytest_streamguard.report.records import TestRecord

# Keys of a JSON report that describe the report itself or are recomputed after a merge.
_DERIVED = ("format", "version", "tests", "pooled", "matrix", "workers", "missing_workers")


def part_meta(part: dict[str, Any]) -> dict[str, Any]:
    """A part's metadata: a worker payload's ``meta``, or a JSON report's top-level keys."""
    if isinstance(part.get("meta"), dict):
        return dict(part["meta"])
    return {k: v for k, v in part.items() if k not in _DERIVED}


class Merger:
    """Records merged from named parts, which parts sent them, and which sent nothing."""

    def __init__(self) -> None:
        self.records: list[TestRecord] = []
        self.parts: dict[str, dict[str, Any]] = {}
        self.missing: list[dict[str, str]] = []

    def add(self, name: str, part: dict[str, Any]) -> list[TestRecord]:
        """Add a part's records, each labelled with where it ran: ``name``, or
        ``name/worker`` for a record that already came from an xdist worker of that part."""
        if name in self.parts:
            raise ValueError(f"part {name!r} is merged twice")
        records = [TestRecord.from_dict(raw) for raw in part.get("tests", [])]
        for record in records:
            record.worker = name if record.worker is None else f"{name}/{record.worker}"
        self.records.extend(records)
        self.parts[name] = {**part_meta(part), "tests": len(records)}
        for missing in part.get("missing_workers") or []:
            self.missing.append({**missing, "worker": f"{name}/{missing.get('worker')}"})
        return records

    def add_missing(self, name: str, reason: str) -> None:
        """A part that sent nothing (a crashed worker): named in the reports."""
        self.missing.append({"worker": name, "reason": reason})

    def worker_lines(self) -> list[str]:
        """The summary's lines on the parts: how many records came from how many, each part's
        tests and target, and each part that sent nothing."""
        lines = [
            f"merged {counted(len(self.records), 'test record')} "
            f"from {counted(len(self.parts), 'worker')}"
        ]
        for name, meta in sorted(self.parts.items()):
            lines.append(
                f"  {name}: {counted(meta['tests'], 'test')}; target: "
                f"{meta.get('target_url', meta.get('target'))}; toxiproxy: {meta.get('toxiproxy')}"
            )
        for missing in self.missing:
            lines.append(
                f"  MISSING {missing['worker']}: {missing['reason']}; "
                "its tests' streams are not in this report"
            )
        return lines

    def meta(self, base: dict[str, Any]) -> dict[str, Any]:
        """``base`` plus the parts and the missing ones, when anything was merged, and the
        definitions of the fault profiles any part ran under."""
        if not self.parts and not self.missing:
            return dict(base)
        profiles: dict[str, Any] = {}
        for part in self.parts.values():
            profiles.update(part.get("profiles") or {})
        profiles.update(base.get("profiles") or {})
        merged = {**base, "workers": dict(self.parts), "missing_workers": list(self.missing)}
        if profiles:
            merged["profiles"] = profiles
        return merged
