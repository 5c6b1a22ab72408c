"""Per-test result records and the reports built from them.

A :class:`TestRecord` is builtin-typed through ``to_dict``/``from_dict`` so it can cross from a
pytest-xdist worker (``config.workeroutput``) and feed the JSON and HTML reports unchanged.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_streamguard.common.display import counted, fit_lines
from pytest_streamguard.common.numbers import whole
from pytest_streamguard.headroom.result import Headroom
from pytest_streamguard.report.compact import compact_test, dumps, expanded
from pytest_streamguard.stream.trace import FaultRecord, StreamTrace
from pytest_streamguard.verdict.deadlines import Deadline, likely_cause
from pytest_streamguard.verdict.findings import (
    KNOWN,
    SERVER_SIDE,
    Finding,
    Unchecked,
    findings_of,
)
from pytest_streamguard.verdict.hops import at_hops
from pytest_streamguard.verdict.probe import Probed
from pytest_streamguard.verdict.stats import percentile

JSON_FORMAT = "pytest-streamguard"
# 2: a trace's chunks are rows under its chunk_fields, with their texts only where kept
# (report.compact); version 1's chunk objects are still read.
JSON_VERSION = 2
# How a fault that never fired is listed among a test's violations under
# --streamguard-strict-faults.
NOT_FIRED = "fault never fired: "


@dataclass
class TestRecord:
    """What one test did with streams: its deadline, traces, violations and verdict."""

    __test__ = False  # not a test class, despite the name

    nodeid: str
    deadline: Deadline | None
    traces: list[StreamTrace] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    verdict: str = "unchecked"
    worker: str | None = None
    # Under @pytest.mark.streamguard_matrix: the profile's name and the test it expands.
    profile: str | None = None
    matrix_test: str | None = None
    # Every fault the test applied, judged (``fired``, ``evidence``), streams or not.
    faults: list[FaultRecord] = field(default_factory=list)
    # Findings read from the target's side when the test ended (``not_cancelled``).
    server_findings: list[Finding] = field(default_factory=list)
    # Under pytest-rerunfailures: which attempt of the test this record is (the one that
    # counted), and the records of the attempts before it, each judged on its own streams.
    attempt: int = 1
    earlier_attempts: list[TestRecord] = field(default_factory=list)
    # Every headroom search the test ran (``streamguard.headroom()``), in the order run.
    headroom: list[Headroom] = field(default_factory=list)
    # The samples of the probe sent to the target beside the test's streams (None: off).
    probe: Probed | None = None
    # The findings its fail_on names that could not be checked on this target, and why.
    unchecked: list[Unchecked] = field(default_factory=list)

    @property
    def findings(self) -> list[Finding]:
        """The named incidents the test's streams show (read with its probe's samples), and
        those the target showed after them (see docs/findings.md)."""
        found = at_hops(findings_of(self.traces, self.probe), self.traces) + self.server_findings
        return sorted(found, key=lambda f: list(KNOWN).index(f.name))

    def gaps(self) -> list[float]:
        """Every gap of every stream of the test (raw samples, for percentiles)."""
        return [g for t in self.traces for g in t.gaps]

    def worst_ttft(self) -> float | None:
        """The largest TTFT among the test's streams."""
        return max((t.ttft for t in self.traces if t.ttft is not None), default=None)

    def max_gap(self) -> float | None:
        """The largest gap among the test's streams."""
        return max(self.gaps(), default=None)

    def all_faults(self) -> list[FaultRecord]:
        """Every fault of the test: its own list, or (in a report written before tests kept
        one) the faults active during its streams, each once."""
        if self.faults:
            return list(self.faults)
        seen: list[FaultRecord] = []
        for trace in self.traces:
            seen.extend(f for f in trace.faults if f not in seen)
        return seen

    @property
    def failed_on_faults(self) -> bool:
        """Whether the test failed only because faults never fired (strict faults)."""
        return (
            self.verdict == "FAIL"
            and bool(self.violations)
            and all(v.startswith(NOT_FIRED) for v in self.violations)
        )

    def unfired(self) -> list[FaultRecord]:
        """The test's faults judged as never fired."""
        return [f for f in self.all_faults() if f.fired is False]

    def fault_names(self) -> list[str]:
        """Distinct faults of the test, in order; one that never fired is marked so."""
        marked = (
            f.describe() + (" (never fired)" if f.fired is False else "") for f in self.all_faults()
        )
        return list(dict.fromkeys(marked))

    def to_dict(self) -> dict[str, Any]:
        """Builtin-typed form."""
        return {
            "nodeid": self.nodeid,
            "deadline": self.deadline.to_dict() if self.deadline is not None else None,
            "traces": [t.to_dict() for t in self.traces],
            "violations": list(self.violations),
            "verdict": self.verdict,
            "worker": self.worker,
            "profile": self.profile,
            "matrix_test": self.matrix_test,
            "faults": [f.to_dict() for f in self.faults],
            "findings": [f.to_dict() for f in self.findings],
            "attempt": self.attempt,
            "earlier_attempts": [r.to_dict() for r in self.earlier_attempts],
            "headroom": [h.to_dict() for h in self.headroom],
            "probe": self.probe.to_dict() if self.probe is not None else None,
            "unchecked": [u.to_dict() for u in self.unchecked],
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TestRecord:
        """Inverse of :meth:`to_dict`."""
        deadline = raw.get("deadline")
        probe = raw.get("probe")
        traces = raw.get("traces", [])
        return cls(
            nodeid=str(raw["nodeid"]),
            deadline=Deadline.from_dict(deadline) if deadline is not None else None,
            traces=[StreamTrace.from_dict(expanded(t)) for t in traces],
            violations=list(raw.get("violations", [])),
            verdict=str(raw.get("verdict", "unchecked")),
            worker=raw.get("worker"),
            profile=raw.get("profile"),
            matrix_test=raw.get("matrix_test"),
            faults=[FaultRecord.from_dict(f) for f in raw.get("faults", [])],
            server_findings=[
                Finding.from_dict(f)
                for f in raw.get("findings", [])
                if f.get("name") in SERVER_SIDE
                # a passing test's server_error outlives the lines it was read from
                or (f.get("name") == "server_error" and not any(t.get("said") for t in traces))
            ],
            attempt=int(raw.get("attempt", 1)),
            earlier_attempts=[cls.from_dict(r) for r in raw.get("earlier_attempts", [])],
            headroom=[Headroom.from_dict(h) for h in raw.get("headroom", [])],
            probe=Probed.from_dict(probe) if probe is not None else None,
            unchecked=[Unchecked.from_dict(u) for u in raw.get("unchecked", [])],
        )


def _fmt(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f}"


def pooled_stats(records: list[TestRecord]) -> dict[str, Any]:
    """TTFT and gap percentiles over the raw samples of every stream of every test (seconds).

    Under pytest-xdist these are computed on the controller from the merged samples."""
    ttfts = [t.ttft for r in records for t in r.traces if t.ttft is not None]
    gaps = [g for r in records for g in r.gaps()]
    figures: dict[str, Any] = {
        "tests": len(records),
        "streams": sum(len(r.traces) for r in records),
    }
    for name, samples in (("ttft", ttfts), ("gap", gaps)):
        for q in (50, 95, 99):
            figures[f"{name}_p{q}_s"] = percentile(samples, q)
        figures[f"{name}_max_s"] = max(samples) if samples else None
    return figures


_SUMMARY_NOTE = "(times in ms; ttft is the worst stream's, gaps are pooled over the test's streams)"


def summary_lines(records: list[TestRecord], width: int | None = None) -> list[str]:
    """The terminal table: one row per test that read streams (times in ms), and with more
    than one test an ``all tests`` row pooled over every stream. On a terminal narrower than
    a row (``width``), each test's faults go on a line below its row, then its test id on a
    line above its figures too; no line is wider than ``width``."""
    header = ("test", "ttft", "gap p50", "gap p95", "gap max", "chunks", "verdict", "faults")
    rows = []
    for record in records:
        gaps = record.gaps()
        rows.append(
            (
                record.nodeid,
                _fmt(record.worst_ttft()),
                _fmt(percentile(gaps, 50)),
                _fmt(percentile(gaps, 95)),
                _fmt(max(gaps) if gaps else None),
                str(sum(len(t.chunks) for t in record.traces)),
                record.verdict,
                ", ".join(record.fault_names()) or "-",
            )
        )
    if len(records) > 1:
        pooled = pooled_stats(records)
        rows.append(
            (
                f"all {pooled['tests']} tests ({pooled['streams']} streams)",
                _fmt(pooled["ttft_max_s"]),
                _fmt(pooled["gap_p50_s"]),
                _fmt(pooled["gap_p95_s"]),
                _fmt(pooled["gap_max_s"]),
                str(sum(len(t.chunks) for r in records for t in r.traces)),
                f"{sum(r.verdict == 'FAIL' for r in records)} FAIL, "
                f"{sum(r.verdict == 'caught' for r in records)} caught",
                "-",
            )
        )
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]

    def columns(row: tuple[str, ...]) -> str:
        return "  ".join(
            [row[0].ljust(widths[0]), *(row[i].rjust(widths[i]) for i in range(1, len(widths)))]
        )

    lines = [f"{columns(row)}  {row[-1]}" for row in [header, *rows]]
    if width is None or max(len(line) for line in lines) <= width:
        lines.insert(1, _SUMMARY_NOTE)
        return lines if width is None else fit_lines(lines, width)
    if len(columns(header)) <= width:
        # Too wide only with the faults: they go on a line below their test's row.
        lines = [columns(header), _SUMMARY_NOTE]
        for row in rows:
            lines.append(columns(row))
            if row[-1] != "-":
                lines.append(f"  faults: {row[-1]}")
        return fit_lines(lines, width)
    return fit_lines(_stacked(header, rows), width)


def _stacked(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    """The summary table for a narrow terminal: the figures and the verdict in columns, each
    test's id on a line above its figures and its faults on a line below them."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(1, len(header) - 1)]

    def figures(row: tuple[str, ...]) -> str:
        return "  " + "  ".join(c.rjust(w) for c, w in zip(row[1:-1], widths, strict=True))

    lines = [figures(header) + "  (test above, faults below)", _SUMMARY_NOTE]
    for row in rows:
        lines.append(row[0])
        lines.append(figures(row))
        if row[-1] != "-":
            lines.append(f"  faults: {row[-1]}")
    return lines


def quiet_line(records: list[TestRecord]) -> str:
    """The summary in one line, as ``-q`` shows it: how many tests read streams, how many
    violated a deadline, and how many were caught as expected or failed on faults that never
    fired."""
    on_faults = sum(r.failed_on_faults for r in records)
    failed = sum(r.verdict == "FAIL" for r in records) - on_faults
    caught = sum(r.verdict == "caught" for r in records)
    expected = f", {caught} caught as expected" if caught else ""
    if on_faults:
        expected += f", {on_faults} failed on faults that never fired"
    return (
        f"streamguard: {counted(len(records), 'test')} read streams, "
        f"{failed} violated a deadline{expected}"
    )


def findings_lines(records: list[TestRecord]) -> list[str]:
    """One line per test whose streams show findings, naming them with their evidence."""
    lines = []
    for record in records:
        cause = likely_cause(record.traces, server=record.server_findings, probe=record.probe)
        if cause:
            lines.append(f"  {record.nodeid}: {cause}")
    return ["findings (see docs/findings.md):", *lines] if lines else []


def unchecked_lines(records: list[TestRecord], *, fail: bool) -> list[str]:
    """One line per ``fail_on`` gate a test could not check: ``test: not checked: <finding>
    (<reason>)``; empty when every gate was checked."""
    lines = [f"  {r.nodeid}: {u.describe()}" for r in records for u in r.unchecked]
    if not lines:
        return []
    gates = counted(len(lines), "fail_on gate")
    how = (
        "failed: --streamguard-unchecked fail"
        if fail
        else "--streamguard-unchecked fail fails them"
    )
    return [f"{gates} could not be checked ({how}):", *lines]


def headroom_lines(records: list[TestRecord]) -> list[str]:
    """One line per headroom search of the run: ``test: headroom streams: 8 (9 broke: ...)``."""
    return [f"{r.nodeid}: {h.describe()}" for r in records for h in r.headroom]


def unfired_lines(records: list[TestRecord], *, strict: bool) -> list[str]:
    """One line per fault that never fired, with why; empty when every fault fired."""
    unfired = [(r.nodeid, f) for r in records for f in r.unfired()]
    if not unfired:
        return []
    faults = counted(len(unfired), "fault")
    if strict:
        head = f"{faults} never fired (failed: --streamguard-strict-faults):"
    else:
        them = "it" if len(unfired) == 1 else "them"
        head = (
            f"warning: {faults} never fired, so their tests proved nothing about "
            f"{them} (--streamguard-strict-faults fails such tests):"
        )
    return [head, *(f"  {nodeid}: {f.describe()}: {f.evidence}" for nodeid, f in unfired)]


def matrix(records: list[TestRecord]) -> list[dict[str, Any]]:
    """The matrix of the run's ``streamguard_matrix`` tests: one row per test, one cell per
    profile (in marker order) with its verdict, worst TTFT and gap p95 (seconds)."""
    rows: dict[str, dict[str, Any]] = {}
    for record in records:
        if record.profile is None:
            continue
        test = record.matrix_test or record.nodeid
        row = rows.setdefault(test, {"test": test, "profiles": {}})
        row["profiles"][record.profile] = {
            "nodeid": record.nodeid,
            "verdict": record.verdict,
            "worst_ttft_s": record.worst_ttft(),
            "gap_p95_s": percentile(record.gaps(), 95),
            "streams": len(record.traces),
        }
    return list(rows.values())


def matrix_lines(records: list[TestRecord]) -> list[str]:
    """The terminal matrix: test x profile -> ``verdict ttft/gap-p95`` (ms); empty if none."""
    rows = matrix(records)
    if not rows:
        return []
    profiles = list(dict.fromkeys(p for row in rows for p in row["profiles"]))
    table = [["test", *profiles]]
    for row in rows:
        cells = [row["test"]]
        for name in profiles:
            cell = row["profiles"].get(name)
            cells.append(
                "-"
                if cell is None
                else f"{cell['verdict']} {_fmt(cell['worst_ttft_s'])}/{_fmt(cell['gap_p95_s'])}"
            )
        table.append(cells)
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    lines = ["matrix (verdict worst-ttft/gap-p95 in ms, per profile):"]
    for cells in table:
        lines.append("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
    return lines


def json_document(
    records: list[TestRecord], meta: dict[str, Any], *, texts: bool = True
) -> dict[str, Any]:
    """The versioned JSON report; ``texts``: keep every chunk's text (else only those of the
    streams that failed, see :mod:`.compact`)."""
    return {
        "format": JSON_FORMAT,
        "version": JSON_VERSION,
        "created_unix": time.time(),
        "clock": "time.perf_counter_ns (monotonic, ns)",
        "percentile_method": "nearest-rank",
        **meta,
        "pooled": pooled_stats(records),
        "matrix": matrix(records),
        "tests": [compact_test(r.to_dict(), texts=texts) for r in records],
    }


def write_json(
    path: Path, records: list[TestRecord], meta: dict[str, Any], *, texts: bool = False
) -> None:
    """Write the JSON report atomically (a reader never sees half a file); ``texts``: keep
    every chunk's text (``streamguard_json_text``), not only those of the streams that failed."""
    write_document(path, json_document(records, meta, texts=texts))


def write_document(path: Path, document: dict[str, Any]) -> None:
    """Write a JSON report document (:func:`json_document`) atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(dumps(document) + "\n", encoding="utf-8")
    tmp.replace(path)


def _read_document(path: Path) -> dict[str, Any]:
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
    if not whole(version) or version < 1:
        raise ValueError(f"{path} has report version {version!r}; expected an integer >= 1")
    if version > JSON_VERSION:
        raise ValueError(
            f"{path} is report version {version}; this plugin reads versions 1 to {JSON_VERSION}"
        )
    return raw


def load_json(path: Path) -> tuple[dict[str, Any], list[TestRecord]]:
    """Read a JSON report back: its metadata and records; :class:`ValueError` naming what is
    wrong (not JSON, not a report, a newer version, a malformed test record)."""
    raw = _read_document(path)
    try:
        records = [TestRecord.from_dict(t) for t in raw.get("tests", [])]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{path} has a malformed test record ({exc!r})") from None
    meta = {k: v for k, v in raw.items() if k != "tests"}
    return meta, records
