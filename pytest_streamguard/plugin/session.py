"""The runtime side of the plugin, registered only when ``--streamguard`` is on.

:class:`StreamGuardSession` validates each test's marker at setup, checks the test's streams
after its body (a violation fails the test as an assertion failure), keeps one
:class:`~pytest_streamguard.report.records.TestRecord` per test, adds JUnit properties, and writes
the terminal summary and the JSON and HTML reports. Under ``@pytest.mark.streamguard_matrix`` it
applies each item's profile after the fixtures are set up; with ``--streamguard-compare`` it
compares the run with a saved baseline and, when the ``--streamguard-compare-fail`` gate fails
(a regression over a bound, or nothing compared), fails the run through ``session.exitstatus``,
prints why at every verbosity, and ends the output with a line saying so (after pytest's counts).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from pytest_streamguard._moved import moved_name
from pytest_streamguard.common.display import counted, fit_lines, shown_path, shown_text
from pytest_streamguard.errors import DeadlineViolation
from pytest_streamguard.faults.fired import faults_not_fired
from pytest_streamguard.guard import StreamGuard
from pytest_streamguard.plugin import xdist
from pytest_streamguard.plugin.markers import resolve_deadline, resolve_fail_on
from pytest_streamguard.plugin.matrix import item_profile, matrix_test
from pytest_streamguard.plugin.settings import SETTINGS_KEY, Settings
from pytest_streamguard.report.baseline import Gate, compare
from pytest_streamguard.report.html import write_html
from pytest_streamguard.report.merge import Merger
from pytest_streamguard.report.records import (
    NOT_FIRED,
    TestRecord,
    findings_lines,
    json_document,
    load_json,
    matrix_lines,
    summary_lines,
    unfired_lines,
    write_json,
)
from pytest_streamguard.stream.trace import FaultRecord, StreamTrace
from pytest_streamguard.verdict.deadlines import (
    Deadline,
    Violation,
    check_traces,
    deadline_violation,
    format_violations,
)
from pytest_streamguard.verdict.findings import (
    Finding,
    findings_failed,
    not_cancelled,
    target_gauges,
)
from pytest_streamguard.verdict.probe import Probed, merge
from pytest_streamguard.verdict.stats import percentile

SESSION_KEY = pytest.StashKey["StreamGuardSession"]()
# pytest's own floor on the terminal width (its TerminalWriter never reports less).
_MIN_WIDTH = 40
DEADLINE_KEY = pytest.StashKey[Deadline | None]()
FAIL_ON_KEY = pytest.StashKey[tuple[str, ...]]()
GATED_KEY = pytest.StashKey[list[Finding]]()


#: Every guard a test made (the ``streamguard`` fixture's, a second ``make_streamguard``'s, one
#: made in a helper), in the order made: all their streams and faults are the test's.
GUARD_KEY = pytest.StashKey[list[StreamGuard]]()
PLUGIN_NAME = "streamguard-session"
__all__ = [
    "DEADLINE_KEY",
    "GUARD_KEY",
    "PLUGIN_NAME",
    "SESSION_KEY",
    "SETTINGS_KEY",
    "StreamGuardSession",
]


def _test_traces(guards: list[StreamGuard]) -> list[StreamTrace]:
    """Every stream the test's guards read, in the order the requests were sent."""
    traces = [trace for guard in guards for trace in guard.traces]
    return sorted(traces, key=lambda trace: trace.request_ns) if len(guards) > 1 else traces


def _test_probe(guards: list[StreamGuard]) -> Probed | None:
    """The samples of every probe the test's guards sent beside their streams."""
    return merge(guard.probe for guard in guards)


CLIENT_DELAY_WARN_S = 0.001


def client_delay_lines(records: list[TestRecord]) -> list[str]:
    """A warning when the client's own read delay (bytes arrived to bytes read, pooled over
    every stream that recorded one) passes 1 ms at p99: the client machine, not the server, was
    then the limit of the figures' timing."""
    reads = [d / 1e9 for r in records for t in r.traces for d in t.read_delay_ns]
    p99 = percentile(reads, 99)
    if p99 is None or p99 <= CLIENT_DELAY_WARN_S:
        return []
    return [
        f"warning: the client's own read delay (bytes arrived to bytes read) was "
        f"{p99 * 1e3:.1f} ms at p99, over 1 ms: the client machine was busy; arrival stamps "
        "are the kernel's, but events read together share the later one; a load reads on "
        "every core with processes='auto'"
    ]


# What each stamp source means, for streams whose stamps are not the kernel's.
_STAMP_SOURCES = {
    "loop": "when the event loop read the bytes (no kernel receive stamp on this platform)",
    "client": "when the client took the bytes (https, read by httpx's own transport)",
}


def stamp_source_lines(records: list[TestRecord]) -> list[str]:
    """A note for streams whose arrival stamps are not the kernel's: their figures hold the
    client's own delay, which the kernel's stamps leave out."""
    counts: dict[str, int] = {}
    for record in records:
        for trace in record.traces:
            if trace.stamps in _STAMP_SOURCES:
                counts[trace.stamps] = counts.get(trace.stamps, 0) + 1
    return [
        f"note: {counted(count, 'stream')} stamped {_STAMP_SOURCES[source]}, not at the "
        "kernel's receive stamp: their figures include the client's own delay"
        for source, count in sorted(counts.items())
    ]


class _Fitted:
    """The terminal reporter, with every line of the streamguard section wrapped to the
    terminal's width, so a wide test id or fault list does not run off a narrow terminal's
    edge. The width is known on a terminal or from ``COLUMNS``; output to a file or a pipe
    without ``COLUMNS`` (a CI log) has none, and keeps one row per test however wide."""

    def __init__(self, reporter: pytest.TerminalReporter, config: pytest.Config) -> None:
        self.reporter = reporter
        self.width: int | None = None
        if "COLUMNS" in os.environ or sys.stdout.isatty():
            self.width = max(config.get_terminal_writer().fullwidth, _MIN_WIDTH)

    def section(self, title: str) -> None:
        self.reporter.section(title)

    def write_line(self, line: str, **markup: bool) -> None:
        lines = [line] if self.width is None else fit_lines([line], self.width)
        for piece in lines:
            self.reporter.write_line(piece, **markup)


class StreamGuardSession:
    """Per-session state and the hooks that only run when the plugin is on."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        # Under pytest-xdist the controller's merger also holds what each worker sent.
        self.merger = Merger()
        self.records: list[TestRecord] = self.merger.records
        # Filled by the session fixtures once they start things; reported at the end.
        self.meta: dict[str, Any] = {
            "target": shown_text(settings.target_description, config.rootpath),
            "toxiproxy": settings.toxiproxy_description,
            "seed": settings.seed,
        }
        # --streamguard-compare: the baseline's records (read now, so a bad file stops the
        # run before any test), and the changes computed at the end.
        self.baseline: list[TestRecord] | None = None
        if settings.compare_path is not None:
            try:
                _, self.baseline = load_json(settings.compare_path)
            except (OSError, KeyError, TypeError, ValueError, AttributeError) as exc:
                raise pytest.UsageError(
                    f"--streamguard-compare {settings.compare_path}: cannot read the baseline "
                    f"({exc}); expected a JSON report saved by --streamguard-save"
                ) from None
        self.gate: Gate | None = None

    @property
    def workers(self) -> dict[str, dict[str, Any]]:
        """Under pytest-xdist (controller only): what each worker sent."""
        return self.merger.parts

    @property
    def missing_workers(self) -> list[dict[str, str]]:
        """Under pytest-xdist (controller only): the workers that sent nothing."""
        return self.merger.missing

    def pytest_configure(self, config: pytest.Config) -> None:
        """Merge pytest-xdist workers' results on the controller (when xdist is loaded)."""
        xdist.register(config, self.merger, self.settings.seed)

    def _report_meta(self) -> dict[str, Any]:
        return self.merger.meta(self.meta)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """Validate the marker before any fixture starts a process."""
        error = None
        try:
            item.stash[DEADLINE_KEY] = resolve_deadline(item, self.settings)
            item.stash[FAIL_ON_KEY] = resolve_fail_on(item, self.settings)
        except ValueError as exc:
            error = str(exc)
        if error is not None:
            # The message says what is wrong and what is accepted; the plugin's frames do not
            # help, and failing outside the except block shows no exception chain.
            pytest.fail(error, pytrace=False)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, object, object]:
        """Apply a matrix item's profile right before the body (the fixture's teardown undoes
        it); after the body, check every stream it read against its deadline."""
        profile = item_profile(item)
        guards = item.stash.get(GUARD_KEY, [])
        guard = guards[0] if guards else None
        if profile is not None and guard is not None:
            guard.profile = profile
            self.meta.setdefault("profiles", {})[profile.name] = profile.to_dict()
            guard.faults.apply_profile(profile)
        try:
            result = yield
        except Exception as exc:
            violations, _ = self._record(item, body_failed=True)
            if violations and not isinstance(exc, DeadlineViolation):
                # The test's own assert (``result.completed == 30``) failed first: show the
                # verdict that names the cause with it, not instead of it.
                exc.add_note(
                    "streamguard: this test's streams also broke its token deadline "
                    "(checked after the body):\n" + self._verdict(violations, item)
                )
            raise
        except BaseException:
            # pytest's outcomes (skip, fail, xfail, exit) and Ctrl-C: nothing to add.
            self._record(item, body_failed=True)
            raise
        violations, unfired = self._record(item, body_failed=False)
        if violations:
            __tracebackhide__ = True
            raise deadline_violation(
                violations,
                traces=self._traces(item),
                report=self._report_where(),
                probe=_test_probe(item.stash.get(GUARD_KEY, [])),
            )
        gated = item.stash.get(GATED_KEY, [])
        if gated:
            __tracebackhide__ = True
            raise findings_failed(gated)
        if unfired and self.settings.strict_faults:
            __tracebackhide__ = True
            raise faults_not_fired(unfired)
        return result

    @staticmethod
    def _traces(item: pytest.Item) -> list[StreamTrace]:
        return _test_traces(item.stash.get(GUARD_KEY, []))

    def _verdict(self, violations: list[Violation], item: pytest.Item) -> str:
        return format_violations(
            violations,
            traces=self._traces(item),
            report=self._report_where(),
            probe=_test_probe(item.stash.get(GUARD_KEY, [])),
        )

    def _report_where(self) -> str | None:
        """Where every stream's verdict and timeline is written, when a report is asked for."""
        written = [
            f"{what} {self._shown(path)}"
            for what, path in (
                ("HTML report", self.settings.html_path),
                ("JSON report", self.settings.json_path),
            )
            if path is not None
        ]
        if not written:
            return None
        return "every stream's verdict and timeline: the " + " and the ".join(written)

    def _record(
        self, item: pytest.Item, *, body_failed: bool
    ) -> tuple[list[Violation], list[FaultRecord]]:
        """Keep the test's record and JUnit properties; return its deadline violations and
        the faults that never fired."""
        guards = item.stash.get(GUARD_KEY, [])
        traces = _test_traces(guards)
        faults = [record for guard in guards for record in guard.faults.records]
        profile = next((g.profile for g in guards if g.profile is not None), None)
        # A matrix item is kept even without streams (its cell says how it ended), and so is a
        # test that applied faults (whether they fired is part of its verdict).
        if not traces and profile is None and not faults:
            return [], []
        # Each guard's faults act on its own proxy, so each is judged on its own streams.
        unfired = [f for guard in guards for f in guard.faults.judge(guard.traces)]
        deadline = item.stash.get(DEADLINE_KEY, None)
        record = TestRecord(
            nodeid=item.nodeid,
            deadline=deadline,
            traces=traces,
            faults=faults,
            probe=_test_probe(guards),
        )
        # Generation that went on after a cut stream, on a target the plugin started (no other
        # client uses it) that exports its engine's requests (the bundled one).
        for guard in guards:
            if guard.target.process is None:
                continue
            left = not_cancelled(guard.traces, target_gauges(guard.target.url))
            if left is not None:
                record.server_findings.append(left)
        if profile is not None:
            record.profile = profile.name
            record.matrix_test = matrix_test(item.nodeid, profile.name)
        violations: list[Violation] = []
        caught = [headline for trace in traces for headline in trace.caught]
        if deadline is not None:
            violations = check_traces(traces, deadline)
            record.violations = [v.headline() for v in violations]
            record.verdict = "FAIL" if violations else "pass"
        elif caught:
            # No marker, but the test checked explicitly and the plugin found a violation:
            # the test expected it (it went on) or failed on it (body_failed below).
            record.violations = caught
            record.verdict = "caught"
        fail_on = item.stash.get(FAIL_ON_KEY, ())
        gated = [f for f in record.findings if f.name in fail_on]
        item.stash[GATED_KEY] = gated
        if gated:
            record.violations += [f"finding {f.describe()} (fail_on)" for f in gated]
            record.verdict = "FAIL"
        if unfired and self.settings.strict_faults and not body_failed:
            record.violations += [f"{NOT_FIRED}{f.describe()}: {f.evidence}" for f in unfired]
            record.verdict = "FAIL"
        if body_failed:
            record.verdict = "FAIL" if caught or violations else "error"
        self.records.append(record)
        ttft, max_gap = record.worst_ttft(), record.max_gap()
        if ttft is not None:
            item.user_properties.append(("streamguard_ttft_s", f"{ttft:.6f}"))
        if max_gap is not None:
            item.user_properties.append(("streamguard_max_gap_s", f"{max_gap:.6f}"))
        item.user_properties.append(("streamguard_verdict", record.verdict))
        if record.profile is not None:
            item.user_properties.append(("streamguard_profile", record.profile))
        return violations, unfired

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """The streamguard section: one row per test that read streams, no line wider than the
        terminal; quiet with -q (a count, and the report paths). Why the baseline gate failed
        (or what it warns about) is shown at every verbosity."""
        if xdist.is_worker(self.config):
            return
        out = _Fitted(terminalreporter, self.config)
        verbosity = self.config.get_verbosity()
        if verbosity < 0:
            if verbosity == -1 and self.records:
                on_faults = sum(r.failed_on_faults for r in self.records)
                failed = sum(r.verdict == "FAIL" for r in self.records) - on_faults
                caught = sum(r.verdict == "caught" for r in self.records)
                expected = f", {caught} caught as expected" if caught else ""
                if on_faults:
                    expected += f", {on_faults} failed on faults that never fired"
                out.write_line(
                    f"streamguard: {counted(len(self.records), 'test')} read streams, "
                    f"{failed} violated a deadline{expected}"
                )
                for line in unfired_lines(self.records, strict=self.settings.strict_faults):
                    out.write_line(line)
            self._write_gate_problems(out)
            self._write_report_paths(out)
            return
        out.section("streamguard")
        if self.workers or self.missing_workers:
            for line in self._worker_lines():
                out.write_line(line)
        else:
            out.write_line(
                f"target: {self.meta.get('target_url', self.meta['target'])}; "
                f"toxiproxy: {self.meta['toxiproxy']} "
                f"{self.meta.get('toxiproxy_version', '')}".rstrip()
            )
        if not self.records:
            out.write_line("no test read a stream")
        else:
            lines = [
                *summary_lines(self.records, out.width),
                *matrix_lines(self.records),
                *findings_lines(self.records),
                *unfired_lines(self.records, strict=self.settings.strict_faults),
                *client_delay_lines(self.records),
                *stamp_source_lines(self.records),
            ]
            for line in lines:
                out.write_line(line)
        if self.gate is not None:
            for line in self.gate.table_lines():
                out.write_line(line)
            self._write_gate_problems(out)
        if self.settings.save_path is not None:
            out.write_line(f"baseline saved: {self.settings.save_path}")
        self._write_report_paths(out)

    def _write_report_paths(self, out: _Fitted) -> None:
        if self.settings.json_path is not None:
            out.write_line(f"JSON report: {self._shown(self.settings.json_path)}")
        if self.settings.html_path is not None:
            out.write_line(f"HTML report: {self._shown(self.settings.html_path)}")

    def _write_gate_problems(self, out: _Fitted) -> None:
        if self.gate is None:
            return
        red = self.gate.failed
        for line in self.gate.problem_lines():
            out.write_line(line, red=red, yellow=not red)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """After pytest's counts line (the last line a CI log shows): say that the baseline
        gate failed the run, since the counts alone may read ``2 passed``."""
        if self.gate is None or not self.gate.failed or xdist.is_worker(config):
            return
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(self.gate.failure_line(), red=True, bold=True)

    def _shown(self, path: Path) -> str:
        return shown_path(path, self.config.rootpath)

    def _worker_lines(self) -> list[str]:
        lines = [
            f"merged {counted(len(self.records), 'test record')} "
            f"from {counted(len(self.workers), 'worker')}"
        ]
        for name, meta in sorted(self.workers.items()):
            lines.append(
                f"  {name}: {counted(meta['tests'], 'test')}; target: "
                f"{meta.get('target_url', meta.get('target'))}; toxiproxy: {meta.get('toxiproxy')}"
            )
        for missing in self.missing_workers:
            lines.append(
                f"  MISSING {missing['worker']}: {missing['reason']}; "
                "its tests' streams are not in this report"
            )
        return lines

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Write the JSON report and the baseline, compare with a saved baseline (a failed gate
        fails the run); on a pytest-xdist worker, send the records."""
        if xdist.is_worker(self.config):
            xdist.send(self.config, self.records, self.meta)
            return
        if self.baseline is not None and self.settings.compare_path is not None:
            changes = compare(
                self.baseline,
                self.records,
                self.settings.compare_fail,
                self.settings.compare_min_samples,
            )
            self.gate = Gate(
                str(self.settings.compare_path),
                self.settings.compare_fail,
                changes,
                [r.nodeid for r in self.records],
                [r.nodeid for r in self.baseline],
            )
            if self.gate.failed and session.exitstatus == 0:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if self.settings.json_path is not None:
            write_json(self.settings.json_path, self.records, self._report_meta())
        if self.settings.save_path is not None:
            write_json(self.settings.save_path, self.records, self._report_meta())
        if self.settings.html_path is not None:
            write_html(self.settings.html_path, json_document(self.records, self._report_meta()))


def __getattr__(name: str) -> object:
    """Names that moved out of this module (:mod:`pytest_streamguard._moved`)."""
    return moved_name(__name__, name)
