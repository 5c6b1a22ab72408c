"""The confusion set, named causes (issue 37): each incident app, run under its user's test
through the plugin with the probe on, gets the finding that names its cause, and no other blame.

A cause today's rules cannot name is expected to be missed (``xfail(strict=True)``, its reason
naming the rule it needs): when that rule lands, the case passes, and the strict xfail says it
is time to drop the mark. Look-alikes and healthy controls are in
tests/confusion/test_confusion_blame.py; the cases and what each app does are in
tests/confusion/confusion_cases.py and tests/confusion/apps/.
"""

from __future__ import annotations

import pytest
from confusion import Case, run_case, users_test
from confusion_cases import CAUSES, as_params


@pytest.mark.parametrize("case", as_params(CAUSES))
def test_every_named_cause_is_named(case: Case, toxiproxy_url: str) -> None:
    outcome = run_case(case, toxiproxy_url)
    assert outcome.passed == case.user_test_passes, users_test(outcome.output, outcome.timeline)
    outcome.check()
