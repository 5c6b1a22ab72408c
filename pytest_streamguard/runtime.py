"""The plugin while on (``--streamguard``): its fixtures, the session object and the header.

:mod:`pytest_streamguard.plugin` registers this module from ``pytest_configure`` only when the
plugin is on, so toxiproxy-python, requests, httpx, prometheus_client, plotly and the rest load
only then. pytest calls this module's ``pytest_configure`` as soon as it is registered.
"""

from __future__ import annotations

import pytest

from pytest_streamguard.display import shown_text
from pytest_streamguard.fixtures import (
    make_streamguard,
    make_streamguard_target,
    streamguard,
    streamguard_target,
    streamguard_toxiproxy_server,
    toxiproxy,
)
from pytest_streamguard.names import PLUGIN_NAME, SESSION_KEY, SETTINGS_KEY
from pytest_streamguard.session import StreamGuardSession
from pytest_streamguard.toxiproxy_client import ToxiproxyServer

__all__ = [
    "make_streamguard",
    "make_streamguard_target",
    "pytest_configure",
    "pytest_report_header",
    "streamguard",
    "streamguard_target",
    "streamguard_toxiproxy_server",
    "toxiproxy",
]


def pytest_configure(config: pytest.Config) -> None:
    """Create and register the session object (its hooks run only while the plugin is on)."""
    session = StreamGuardSession(config, config.stash[SETTINGS_KEY])
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(session, PLUGIN_NAME)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """One line: the target, and the Toxiproxy server's kind and version."""
    settings = config.stash[SETTINGS_KEY]
    if settings.toxiproxy_url is not None:
        version = ToxiproxyServer.probe_version(settings.toxiproxy_url)
        toxiproxy = f"{settings.toxiproxy_description} (version {version})"
    else:
        toxiproxy = f"{settings.toxiproxy_description} (started on first use)"
    return [
        f"streamguard: target={shown_text(settings.target_description, config.rootpath)}, "
        f"toxiproxy={toxiproxy}, "
        f"default deadline ttft={settings.ttft:g}s chunk={settings.chunk:g}s"
    ]
