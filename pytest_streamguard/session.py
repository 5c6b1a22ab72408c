"""The runtime side of the plugin, registered only when ``--streamguard`` is on.

:class:`StreamGuardSession` validates each test's marker at setup, checks the test's streams
after its body (a violation fails the test as an assertion failure), keeps one
:class:`~pytest_streamguard.reports.TestRecord` per test, adds JUnit properties, and writes the
terminal summary and the JSON and HTML reports.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from pytest_streamguard import xdist
from pytest_streamguard.deadlines import DeadlineViolation, Violation, check_traces
from pytest_streamguard.display import shown_path, shown_text
from pytest_streamguard.html_report import write_html
from pytest_streamguard.markers import resolve_deadline
from pytest_streamguard.names import DEADLINE_KEY, GUARD_KEY, PLUGIN_NAME, SESSION_KEY, SETTINGS_KEY
from pytest_streamguard.reports import TestRecord, json_document, summary_lines, write_json
from pytest_streamguard.settings import Settings

# The stash keys live in the import-light names module; re-exported here for existing imports.
__all__ = [
    "DEADLINE_KEY",
    "GUARD_KEY",
    "PLUGIN_NAME",
    "SESSION_KEY",
    "SETTINGS_KEY",
    "StreamGuardSession",
]


class StreamGuardSession:
    """Per-session state and the hooks that only run when the plugin is on."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.records: list[TestRecord] = []
        # Filled by the session fixtures once they start things; reported at the end.
        self.meta: dict[str, Any] = {
            "target": shown_text(settings.target_description, config.rootpath),
            "toxiproxy": settings.toxiproxy_description,
        }
        # Under pytest-xdist (controller only): what each worker sent, and who sent nothing.
        self.workers: dict[str, dict[str, Any]] = {}
        self.missing_workers: list[dict[str, str]] = []

    def pytest_configure(self, config: pytest.Config) -> None:
        """Merge pytest-xdist workers' results on the controller (when xdist is loaded)."""
        xdist.register(config, self)

    def merge_worker(self, sent: dict[str, Any]) -> None:
        """Add the records a pytest-xdist worker sent (see :mod:`pytest_streamguard.xdist`)."""
        name = str(sent.get("worker"))
        records = [TestRecord.from_dict(raw) for raw in sent.get("tests", [])]
        for record in records:
            record.worker = name
        self.records.extend(records)
        self.workers[name] = {**sent.get("meta", {}), "tests": len(records)}

    def worker_missing(self, name: str, reason: str) -> None:
        """A pytest-xdist worker sent nothing (it crashed): say so in the reports."""
        self.missing_workers.append({"worker": name, "reason": reason})

    def _report_meta(self) -> dict[str, Any]:
        if not self.workers and not self.missing_workers:
            return self.meta
        return {**self.meta, "workers": self.workers, "missing_workers": self.missing_workers}

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """Validate the marker before any fixture starts a process."""
        error = None
        try:
            item.stash[DEADLINE_KEY] = resolve_deadline(item, self.settings)
        except ValueError as exc:
            error = str(exc)
        if error is not None:
            # The message says what is wrong and what is accepted; the plugin's frames do not
            # help, and failing outside the except block shows no exception chain.
            pytest.fail(error, pytrace=False)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, object, object]:
        """After the test body, check every stream it read against its deadline."""
        try:
            result = yield
        except BaseException:
            self._record(item, body_failed=True)
            raise
        violations = self._record(item, body_failed=False)
        if violations:
            __tracebackhide__ = True
            raise DeadlineViolation(violations)
        return result

    def _record(self, item: pytest.Item, *, body_failed: bool) -> list[Violation]:
        """Keep the test's record and JUnit properties; return its deadline violations."""
        guard = item.stash.get(GUARD_KEY, None)
        if guard is None or not guard.traces:
            return []
        deadline = item.stash.get(DEADLINE_KEY, None)
        record = TestRecord(nodeid=item.nodeid, deadline=deadline, traces=list(guard.traces))
        violations: list[Violation] = []
        caught = [headline for trace in guard.traces for headline in trace.caught]
        if deadline is not None:
            violations = check_traces(guard.traces, deadline)
            record.violations = [v.headline() for v in violations]
            record.verdict = "FAIL" if violations else "pass"
        elif caught:
            # No marker, but the test checked explicitly and the plugin found a violation:
            # the test expected it (it went on) or failed on it (body_failed below).
            record.violations = caught
            record.verdict = "caught"
        if body_failed:
            record.verdict = "FAIL" if caught or violations else "error"
        self.records.append(record)
        ttft, max_gap = record.worst_ttft(), record.max_gap()
        if ttft is not None:
            item.user_properties.append(("streamguard_ttft_s", f"{ttft:.6f}"))
        if max_gap is not None:
            item.user_properties.append(("streamguard_max_gap_s", f"{max_gap:.6f}"))
        item.user_properties.append(("streamguard_verdict", record.verdict))
        return violations

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """The streamguard section: one row per test that read streams; quiet with -q."""
        if xdist.is_worker(self.config):
            return
        verbosity = self.config.get_verbosity()
        if verbosity < 0:
            if verbosity == -1 and self.records:
                failed = sum(r.verdict == "FAIL" for r in self.records)
                caught = sum(r.verdict == "caught" for r in self.records)
                expected = f", {caught} caught as expected" if caught else ""
                terminalreporter.write_line(
                    f"streamguard: {len(self.records)} test(s) read streams, "
                    f"{failed} violated a deadline{expected}"
                )
            return
        terminalreporter.section("streamguard")
        if self.workers or self.missing_workers:
            for line in self._worker_lines():
                terminalreporter.write_line(line)
        else:
            terminalreporter.write_line(
                f"target: {self.meta.get('target_url', self.meta['target'])}; "
                f"toxiproxy: {self.meta['toxiproxy']} "
                f"{self.meta.get('toxiproxy_version', '')}".rstrip()
            )
        if not self.records:
            terminalreporter.write_line("no test read a stream")
            return
        for line in summary_lines(self.records):
            terminalreporter.write_line(line)
        if self.settings.json_path is not None:
            terminalreporter.write_line(f"JSON report: {self._shown(self.settings.json_path)}")
        if self.settings.html_path is not None:
            terminalreporter.write_line(f"HTML report: {self._shown(self.settings.html_path)}")

    def _shown(self, path: Path) -> str:
        return shown_path(path, self.config.rootpath)

    def _worker_lines(self) -> list[str]:
        lines = [f"merged {len(self.records)} test record(s) from {len(self.workers)} worker(s)"]
        for name, meta in sorted(self.workers.items()):
            lines.append(
                f"  {name}: {meta['tests']} test(s); target: "
                f"{meta.get('target_url', meta.get('target'))}; toxiproxy: {meta.get('toxiproxy')}"
            )
        for missing in self.missing_workers:
            lines.append(
                f"  MISSING {missing['worker']}: {missing['reason']}; "
                "its tests' streams are not in this report"
            )
        return lines

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Write the JSON report; on a pytest-xdist worker, send the records instead."""
        if xdist.is_worker(self.config):
            xdist.send(self.config, self.records, self.meta)
            return
        if self.settings.json_path is not None:
            write_json(self.settings.json_path, self.records, self._report_meta())
        if self.settings.html_path is not None:
            write_html(self.settings.html_path, json_document(self.records, self._report_meta()))
