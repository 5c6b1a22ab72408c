"""The resilience suite's targets, and a loud failure when it runs without ``--streamguard``.

Every incident in ``DESIGN.md`` runs against a variant of the bundled target started once per
session by ``make_streamguard_target``: most tests need the per-request fault knobs; a module
or class that needs another variant (``--naive``, a short heartbeat) overrides
``streamguard_target`` itself.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpcore  # noqa: F401 -- one copy of httpcore for pytester runs (tests/conftest.py)
import pytest
from resilience_helpers import FAULT_KNOBS

from pytest_streamguard import Target

HERE = Path(__file__).resolve().parent


NEEDS_STREAMGUARD = (
    "the resilience suite needs the plugin on: run `make demo` or "
    "`pytest --streamguard tests/resilience` (a plain `pytest` would otherwise skip it)"
)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fail, not skip, every resilience test when ``--streamguard`` is off: CI must run them."""
    enabled = item.config.getoption("streamguard") or item.config.getini("streamguard")
    if not enabled and HERE in item.path.parents:
        pytest.fail(NEEDS_STREAMGUARD, pytrace=False)


@pytest.fixture(scope="session")
def streamguard_target(make_streamguard_target: Callable[..., Target]) -> Target:
    """The bundled target with its per-request fault knobs (``FAULT_KNOBS``)."""
    return make_streamguard_target(args=list(FAULT_KNOBS))
