"""The confusion set, no false blame (issue 37): look-alikes of incidents (a full server, a
batching engine, a long or slow but steady answer, a soak load, a cut the app handles well)
and healthy controls on every stack get no finding that blames the app; a full server gets
``queued`` (capacity, not blame). The named causes are in tests/confusion/test_confusion.py.
"""

from __future__ import annotations

import pytest
from confusion import Case, run_case, users_test
from confusion_cases import CONTROLS, LOOK_ALIKES, as_params


@pytest.mark.parametrize("case", as_params([*LOOK_ALIKES, *CONTROLS]))
def test_no_false_blame(case: Case, toxiproxy_url: str) -> None:
    outcome = run_case(case, toxiproxy_url)
    assert outcome.passed == case.user_test_passes, users_test(outcome.output, outcome.timeline)
    outcome.check()
