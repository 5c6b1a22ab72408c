"""The stacks' confusion set (issue 43): on held-out stacks (tests/confusion/stacks/), every
cause is named at its hop and no finding blames a hop its cause is not on.

Each case runs its user's test in a pytest process of its own through the plugin (the stack
started from its ini, the probe on); a case the plugin misjudges today is a strict xfail whose
reason says what it gets wrong, so the gap stays visible and the mark goes once it is fixed.
The module prints the table of every case (expected, named, verdict) at its end. The cases are
in tests/confusion/stack_cases.py, the harness in tests/confusion/stack_confusion.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confusion import users_test
from stack_cases import CASES, as_params
from stack_confusion import Outcome, StackCase, run_case, table


@pytest.fixture(scope="module")
def outcomes(request: pytest.FixtureRequest) -> Iterator[list[Outcome]]:
    """The outcome of each case run in this module; its table is printed at the end."""
    seen: list[Outcome] = []
    yield seen
    plugins = request.config.pluginmanager
    reporter = plugins.get_plugin("terminalreporter")
    capture = plugins.get_plugin("capturemanager")
    if seen and reporter is not None and capture is not None:
        # Past pytest's capture, as capsys.disabled() writes (a worker of xdist shows none).
        with capture.global_and_fixture_disabled():
            reporter.write_line("")
            reporter.write_sep("-", "stack confusion set")
            reporter.write_line(table([(o.case, [o]) for o in seen]))


@pytest.mark.parametrize("case", as_params(CASES))
def test_stack_case(case: StackCase, toxiproxy_url: str, outcomes: list[Outcome]) -> None:
    outcome = run_case(case, toxiproxy_url)
    outcomes.append(outcome)
    assert outcome.as_meant, users_test(outcome.output, outcome.timeline)
    outcome.check()
