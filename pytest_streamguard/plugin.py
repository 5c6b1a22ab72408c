"""pytest entry point for pytest-streamguard (``pytest11: streamguard``).

Kept thin: it wires pytest hooks to the modules that own each concept. Runtime behaviour lives
in :class:`~pytest_streamguard.session.StreamGuardSession`, registered only with ``--streamguard``.
"""

from __future__ import annotations

import pytest

from pytest_streamguard import matrix
from pytest_streamguard.fixtures import (
    FIXTURE_NAMES,
    SKIP_REASON,
    make_streamguard,
    make_streamguard_target,
    streamguard,
    streamguard_target,
    streamguard_toxiproxy_server,
    toxiproxy,
)
from pytest_streamguard.markers import MARKER_LINE, MARKER_NAME
from pytest_streamguard.session import PLUGIN_NAME, SESSION_KEY, SETTINGS_KEY, StreamGuardSession
from pytest_streamguard.settings import add_options, resolve_settings
from pytest_streamguard.toxiproxy_client import ToxiproxyServer

__all__ = [
    "make_streamguard",
    "make_streamguard_target",
    "pytest_addoption",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_report_header",
    "streamguard",
    "streamguard_target",
    "streamguard_toxiproxy_server",
    "toxiproxy",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register ``--streamguard`` and the ``--streamguard-*`` options with their ini keys."""
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker, resolve the settings once, and turn the runtime on if asked."""
    config.addinivalue_line("markers", MARKER_LINE)
    config.addinivalue_line("markers", matrix.MARKER_LINE)
    matrix.configure(config)
    settings = resolve_settings(config)
    config.stash[SETTINGS_KEY] = settings
    if settings.enabled:
        session = StreamGuardSession(config, settings)
        config.stash[SESSION_KEY] = session
        config.pluginmanager.register(session, PLUGIN_NAME)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """One line when enabled: the target, and the Toxiproxy server's kind and version."""
    settings = config.stash[SETTINGS_KEY]
    if not settings.enabled:
        return []
    if settings.toxiproxy_url is not None:
        version = ToxiproxyServer.probe_version(settings.toxiproxy_url)
        toxiproxy = f"{settings.toxiproxy_description} (version {version})"
    else:
        toxiproxy = f"{settings.toxiproxy_description} (started on first use)"
    return [
        f"streamguard: target={settings.target_description}, toxiproxy={toxiproxy}, "
        f"default deadline ttft={settings.ttft:g}s chunk={settings.chunk:g}s"
    ]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without ``--streamguard``, skip tests that need the plugin, saying how to turn it on."""
    if config.stash[SETTINGS_KEY].enabled:
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if item.get_closest_marker(MARKER_NAME) is not None or fixtures & FIXTURE_NAMES:
            item.add_marker(skip)
