"""pytest entry point for pytest-streamguard (``pytest11: streamguard``), kept import-light.

It runs on every ``pytest`` start where the package is installed, on or off, so it imports only
pytest, the option definitions (:mod:`~pytest_streamguard.plugin.settings`) and the marker text
(:mod:`~pytest_streamguard.common.names`). Once the settings are resolved it registers
:mod:`~pytest_streamguard.plugin.runtime` (fixtures, session, report header; the heavy imports) when
``--streamguard`` is on, or :mod:`~pytest_streamguard.plugin.off` (the same fixture names, skipping)
when it is off.
"""

from __future__ import annotations

import pytest

from pytest_streamguard.common.names import (
    HEADROOM_MARKER_LINE,
    MARKER_LINE,
    MATRIX_MARKER_LINE,
    OFF_MODULE,
    RUNTIME_MODULE,
)
from pytest_streamguard.plugin.settings import SETTINGS_KEY, add_options, resolve_settings

__all__ = ["pytest_addoption", "pytest_configure"]


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register ``--streamguard`` and the ``--streamguard-*`` options with their ini keys."""
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers, resolve the settings once, and load the runtime only if asked."""
    config.addinivalue_line("markers", MARKER_LINE)
    config.addinivalue_line("markers", MATRIX_MARKER_LINE)
    config.addinivalue_line("markers", HEADROOM_MARKER_LINE)
    settings = resolve_settings(config)
    config.stash[SETTINGS_KEY] = settings
    config.pluginmanager.import_plugin(RUNTIME_MODULE if settings.enabled else OFF_MODULE)
