"""The plugin while off (no ``--streamguard``): its fixtures exist but skip, and nothing heavy
is imported.

Every test that uses a plugin fixture or the ``token_deadline`` marker is skipped with
:data:`~pytest_streamguard.names.SKIP_REASON` at collection; the fixtures below only exist so
that such a test (and ``pytest --fixtures``) finds them, and skip if reached another way (for
example through ``request.getfixturevalue``).
"""

from __future__ import annotations

import pytest

from pytest_streamguard.names import FIXTURE_NAMES, MARKER_NAME, SKIP_REASON


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests that need the plugin, saying how to turn it on."""
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if item.get_closest_marker(MARKER_NAME) is not None or fixtures & FIXTURE_NAMES:
            item.add_marker(skip)


def _skip() -> None:
    pytest.skip(SKIP_REASON)


@pytest.fixture(scope="session")
def make_streamguard_target() -> None:
    """Factory for variants of the target (needs ``--streamguard``; skips while off)."""
    _skip()


@pytest.fixture(scope="session")
def streamguard_target() -> None:
    """The app under test (needs ``--streamguard``; skips while off)."""
    _skip()


@pytest.fixture(scope="session")
def streamguard_toxiproxy_server() -> None:
    """The session's Toxiproxy server (needs ``--streamguard``; skips while off)."""
    _skip()


@pytest.fixture(scope="session")
def make_streamguard() -> None:
    """Factory of per-test handles (needs ``--streamguard``; skips while off)."""
    _skip()


@pytest.fixture
def streamguard() -> None:
    """Per-test handle (needs ``--streamguard``; skips while off)."""
    _skip()


@pytest.fixture(scope="session")
def toxiproxy() -> None:
    """A toxiproxy-python client (needs ``--streamguard``; skips while off)."""
    _skip()
