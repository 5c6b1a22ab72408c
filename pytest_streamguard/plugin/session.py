"""The runtime side of the plugin, registered only when ``--streamguard`` is on.

:class:`StreamGuardSession` validates each test's markers at setup, applies a matrix item's
profile before the body, keeps each test's record and JUnit properties after it and raises the
failure its verdict returns; at the end it writes the terminal summary and the reports, and
fails the run through ``session.exitstatus`` when the baseline gate fails. A test that
pytest-rerunfailures runs again is judged on each attempt's own streams
(:mod:`pytest_streamguard.plugin.attempts`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator, Iterable
from pathlib import Path
from typing import Any, NoReturn

import pytest

from pytest_streamguard.common.display import fit_lines, shown_path, shown_text
from pytest_streamguard.errors import NeedsEmbeddedToxiproxy
from pytest_streamguard.faults.fired import faults_not_fired
from pytest_streamguard.guard import StreamGuard
from pytest_streamguard.plugin import xdist
from pytest_streamguard.plugin.attempts import attempt_lines, begin_attempt, counted_record
from pytest_streamguard.plugin.markers import (
    headroom_shortfalls,
    resolve_deadline,
    resolve_fail_on,
    resolve_headroom,
)
from pytest_streamguard.plugin.matrix import item_profile
from pytest_streamguard.plugin.settings import SETTINGS_KEY, Settings
from pytest_streamguard.report import timing
from pytest_streamguard.report.baseline import Gate, compare
from pytest_streamguard.report.disagreements import disagreement_lines
from pytest_streamguard.report.html import write_html
from pytest_streamguard.report.merge import Merger
from pytest_streamguard.report.recording import RecordedTest, junit_properties, record_test
from pytest_streamguard.report.records import (
    TestRecord,
    findings_lines,
    headroom_lines,
    json_document,
    load_json,
    matrix_lines,
    quiet_line,
    summary_lines,
    unchecked_lines,
    unfired_lines,
    write_json,
)
from pytest_streamguard.verdict.deadlines import Deadline
from pytest_streamguard.verdict.judge import body_failure_note, failure_of, reports_line

SESSION_KEY = pytest.StashKey["StreamGuardSession"]()
# pytest's own floor on the terminal width (its TerminalWriter never reports less).
_MIN_WIDTH = 40
DEADLINE_KEY = pytest.StashKey[Deadline | None]()
FAIL_ON_KEY = pytest.StashKey[tuple[str, ...]]()
HEADROOM_KEY = pytest.StashKey[tuple[tuple[str, float], ...]]()


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


def _skip_at_the_test(reason: str) -> NoReturn:
    """Skip the running test with ``reason``, reported at the test's own line (as a skip mark
    is), not at this module's."""
    raise pytest.skip.Exception(reason, _use_item_location=True)


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

    def write_lines(self, lines: Iterable[str], **markup: bool) -> None:
        for line in lines:
            self.write_line(line, **markup)


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

    def pytest_configure(self, config: pytest.Config) -> None:
        """Merge pytest-xdist workers' results on the controller (when xdist is loaded)."""
        xdist.register(config, self.merger, self.settings.seed)

    def _report_meta(self) -> dict[str, Any]:
        return self.merger.meta(self.meta)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """Validate the marker before any fixture starts a process. A rerun of the item
        (pytest-rerunfailures) starts with none of the previous attempt's guards."""
        if begin_attempt(item):
            item.stash[GUARD_KEY] = []
        error = None
        try:
            item.stash[DEADLINE_KEY] = resolve_deadline(item, self.settings)
            item.stash[FAIL_ON_KEY] = resolve_fail_on(item, self.settings)
            item.stash[HEADROOM_KEY] = resolve_headroom(item)
        except ValueError as exc:
            error = str(exc)
        if error is not None:
            # The message says what is wrong and what is accepted; the plugin's frames do not
            # help, and failing outside the except block shows no exception chain.
            pytest.fail(error, pytrace=False)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, object, object]:
        """Apply a matrix item's profile right before the body (the fixture's teardown undoes
        it); after the body, keep the test's record and raise its verdict's failure. A fault
        that this Toxiproxy cannot apply (:class:`NeedsEmbeddedToxiproxy`, from the profile or
        the body) skips the test with its reason instead."""
        profile = item_profile(item)
        guards = item.stash.get(GUARD_KEY, [])
        guard = guards[0] if guards else None
        unsupported: str | None = None
        if profile is not None and guard is not None:
            guard.profile = profile
            self.meta.setdefault("profiles", {})[profile.name] = profile.to_dict()
            try:
                guard.faults.apply_profile(profile)
            except NeedsEmbeddedToxiproxy as exc:
                unsupported = f"profile {profile.name!r}: {exc}"
        if unsupported is not None:
            # Skipped before the body runs; outside the except block, so no exception chain.
            _skip_at_the_test(unsupported)
        try:
            result = yield
        except NeedsEmbeddedToxiproxy as exc:
            # Streams read before the refusal are kept; a test that read none has no row.
            if any(guard.traces for guard in guards):
                self._record(item, body_failed=True)
            unsupported = str(exc)
        except Exception as exc:
            recorded = self._record(item, body_failed=True)
            note = body_failure_note(
                exc,
                recorded.violations,
                traces=recorded.traces,
                report=self._reports_line(),
                probe=recorded.probe,
            )
            if note is not None:
                exc.add_note(note)
            raise
        except BaseException:
            # pytest's outcomes (skip, fail, xfail, exit) and Ctrl-C: nothing to add.
            self._record(item, body_failed=True)
            raise
        if unsupported is not None:
            _skip_at_the_test(unsupported)
        recorded = self._record(item, body_failed=False)
        failure = failure_of(
            recorded.violations,
            traces=recorded.traces,
            gated=recorded.gated,
            unfired=recorded.unfired,
            strict_faults=self.settings.strict_faults,
            not_fired=faults_not_fired,
            report=self._reports_line(),
            probe=recorded.probe,
            unchecked=recorded.unchecked,
        )
        if failure is not None:
            __tracebackhide__ = True
            raise failure
        self._check_headroom(item, recorded)
        return result

    def _check_headroom(self, item: pytest.Item, recorded: RecordedTest) -> None:
        """Fail a test whose headroom is short of its ``headroom`` markers' bounds."""
        record = recorded.record
        short = headroom_shortfalls(
            item.stash.get(HEADROOM_KEY, ()), [] if record is None else record.headroom
        )
        if short:
            if record is not None:
                record.violations += short
                record.verdict = "FAIL"
            pytest.fail("streamguard headroom short:\n  " + "\n  ".join(short), pytrace=False)

    def _reports_line(self) -> str | None:
        html, json = self.settings.html_path, self.settings.json_path
        return reports_line(
            html=None if html is None else self._shown(html),
            json=None if json is None else self._shown(json),
        )

    def _record(self, item: pytest.Item, *, body_failed: bool) -> RecordedTest:
        """Keep the test's record and its JUnit properties."""
        guards: list[StreamGuard] = item.stash.get(GUARD_KEY, [])
        fail_on: tuple[str, ...] = item.stash.get(FAIL_ON_KEY, ())
        recorded = record_test(
            item.nodeid,
            guards,
            deadline=item.stash.get(DEADLINE_KEY, None),
            fail_on=fail_on,
            strict_faults=self.settings.strict_faults,
            body_failed=body_failed,
            unchecked_fail=self.settings.unchecked == "fail",
        )
        if recorded.record is not None:
            counted_record(item, recorded.record, self.records)
            item.user_properties.extend(junit_properties(recorded.record))
        return recorded

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
                out.write_line(quiet_line(self.records))
                out.write_lines(unfired_lines(self.records, strict=self.settings.strict_faults))
                out.write_lines(
                    unchecked_lines(self.records, fail=self.settings.unchecked == "fail")
                )
            self._write_gate_problems(out)
            self._write_report_paths(out)
            return
        out.section("streamguard")
        # Under pytest-xdist the controller knows what each worker sent (or that it sent none).
        if self.merger.parts or self.merger.missing:
            out.write_lines(self.merger.worker_lines())
        else:
            started = self.meta.get("target_command")
            out.write_line(
                f"target: {self.meta.get('target_url', self.meta['target'])}"
                f"{f' (started as {started})' if started else ''}; "
                f"toxiproxy: {self.meta['toxiproxy']} "
                f"{self.meta.get('toxiproxy_version', '')}".rstrip()
            )
            services = self.meta.get("services")
            if services:
                # A stack: every service's command as it ran, in start order.
                out.write_line(
                    "stack: " + ", ".join(f"{name} ({cmd})" for name, cmd in services.items())
                )
        if not self.records:
            out.write_line("no test read a stream")
        else:
            out.write_lines(
                [
                    *summary_lines(self.records, out.width),
                    *matrix_lines(self.records),
                    *findings_lines(self.records),
                    *unchecked_lines(self.records, fail=self.settings.unchecked == "fail"),
                    *headroom_lines(self.records),
                    *unfired_lines(self.records, strict=self.settings.strict_faults),
                    *attempt_lines(self.records),
                    *timing.client_delay_lines(self.records),
                    *timing.stamp_source_lines(self.records),
                    *disagreement_lines(self.records),
                ]
            )
        if self.gate is not None:
            out.write_lines(self.gate.table_lines())
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
        out.write_lines(self.gate.problem_lines(), red=red, yellow=not red)

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
        texts = self.settings.json_text
        if self.settings.json_path is not None:
            write_json(self.settings.json_path, self.records, self._report_meta(), texts=texts)
        if self.settings.save_path is not None:
            write_json(self.settings.save_path, self.records, self._report_meta(), texts=texts)
        if self.settings.html_path is not None:
            write_html(self.settings.html_path, json_document(self.records, self._report_meta()))
