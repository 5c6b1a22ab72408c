"""The plugin while off (no ``--streamguard``): its fixtures exist but skip, and nothing heavy
is imported.

Every test that uses a plugin fixture or the ``token_deadline`` marker is skipped with
:data:`~pytest_streamguard.common.names.SKIP_REASON` at collection; the fixtures only exist so
that such a test (and ``pytest --fixtures``) finds them. So that a run which forgot the flag
does not pass for a checked one, the terminal summary counts those skips and names
``--streamguard``; with ``--streamguard-require`` collecting such a test is a usage error.
"""

from __future__ import annotations

from typing import Any, Literal

import pytest

from pytest_streamguard.common.display import counted
from pytest_streamguard.common.names import FIXTURE_NAMES, MARKER_NAME, SKIP_REASON
from pytest_streamguard.plugin.settings import SETTINGS_KEY


def _needs_plugin(item: pytest.Item) -> bool:
    fixtures = set(getattr(item, "fixturenames", ()))
    return item.get_closest_marker(MARKER_NAME) is not None or bool(fixtures & FIXTURE_NAMES)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests that need the plugin, saying how to turn it on (under
    ``--streamguard-require`` they are refused instead)."""
    if config.stash[SETTINGS_KEY].require:
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if _needs_plugin(item):
            item.add_marker(skip)


def _refusal(what: str) -> str:
    return (
        f"{what} pytest-streamguard (its fixtures or the {MARKER_NAME} marker), but it is off: "
        "run pytest with --streamguard (--streamguard-require, or the ini key "
        "streamguard_require, makes a run without it an error)"
    )


def pytest_collection_finish(session: pytest.Session) -> None:
    """Under ``--streamguard-require``, refuse to run the tests that need the plugin (once
    ``-k``, ``-m`` and the like have deselected what they do): a usage error."""
    if not session.config.stash[SETTINGS_KEY].require or hasattr(session.config, "workerinput"):
        return
    needed = [item for item in session.items if _needs_plugin(item)]
    if needed:
        many = len(needed) > 1
        raise pytest.UsageError(
            _refusal(
                f"{counted(len(needed), 'collected test')} (such as {needed[0].nodeid}) "
                f"{'need' if many else 'needs'}"
            )
        )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """On a pytest-xdist worker, where a usage error at collection would only crash the
    worker, ``--streamguard-require`` fails each such test at setup instead."""
    if item.config.stash[SETTINGS_KEY].require and _needs_plugin(item):
        pytest.fail(_refusal("this test needs"), pytrace=False)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say that tests were skipped for want of ``--streamguard``, at every verbosity: a run
    whose every deadline test was skipped otherwise exits 0 like a checked one. Counted from
    the skip reports, so a pytest-xdist controller counts its workers' tests too."""
    skipped = sum(
        isinstance(report.longrepr, tuple) and str(report.longrepr[2]).endswith(SKIP_REASON)
        for report in terminalreporter.stats.get("skipped", [])
    )
    if skipped:
        terminalreporter.write_line(
            f"streamguard: {counted(skipped, 'test')} skipped: pytest-streamguard is off; run "
            "pytest with --streamguard to check them (--streamguard-require makes this an "
            "error)",
            yellow=True,
        )


def _skipping(name: str, what: str, scope: Literal["session", "function"] = "session") -> Any:
    """The fixture ``name`` while the plugin is off: it skips; ``what`` is its help line."""

    def fixture() -> None:
        pytest.skip(SKIP_REASON)

    fixture.__doc__ = f"{what} (needs ``--streamguard``; skips while off)."
    return pytest.fixture(fixture, scope=scope, name=name)


make_streamguard_target = _skipping("make_streamguard_target", "Factory for variants of the target")
streamguard_target = _skipping("streamguard_target", "The app under test")
streamguard_stack = _skipping("streamguard_stack", "The stack of ``--streamguard-service``")
streamguard_toxiproxy_server = _skipping(
    "streamguard_toxiproxy_server", "The session's Toxiproxy server"
)
make_streamguard = _skipping("make_streamguard", "Factory of per-test handles")
streamguard = _skipping("streamguard", "Per-test handle", scope="function")
toxiproxy = _skipping("toxiproxy", "A toxiproxy-python client")
