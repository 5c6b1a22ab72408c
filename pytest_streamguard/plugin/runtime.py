"""The plugin while on (``--streamguard``): its fixtures, the session object, the header and
the streamguard column of pytest-html's table (:mod:`pytest_streamguard.plugin.html_column`).

:mod:`pytest_streamguard.plugin` registers this module from ``pytest_configure`` only when the
plugin is on, so toxiproxy-python, requests, httpx, prometheus_client and the rest load
only then. pytest calls this module's ``pytest_configure`` as soon as it is registered.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from pytest_streamguard.common.display import shown_text
from pytest_streamguard.faults.toxiproxy_client import ToxiproxyServer
from pytest_streamguard.plugin.fixtures import (
    make_streamguard,
    make_streamguard_target,
    streamguard,
    streamguard_stack,
    streamguard_target,
    streamguard_toxiproxy_server,
    toxiproxy,
)
from pytest_streamguard.plugin.html_column import (
    pytest_html_results_table_header,
    pytest_html_results_table_row,
)

# Not ``from pytest_streamguard import matrix``: that form takes the package's attribute, which
# in a second in-process pytest run (pytester) is the first run's module, whose profiles are of
# another Profile class than the one the session checks items against.
from pytest_streamguard.plugin.matrix import configure as configure_matrix
from pytest_streamguard.plugin.session import (
    PLUGIN_NAME,
    SESSION_KEY,
    SETTINGS_KEY,
    StreamGuardSession,
)
from pytest_streamguard.stream.transport import kernel_stamps

__all__ = [
    "make_streamguard",
    "make_streamguard_target",
    "pytest_configure",
    "pytest_html_results_table_header",
    "pytest_html_results_table_row",
    "pytest_report_header",
    "pytest_runtest_makereport",
    "streamguard",
    "streamguard_stack",
    "streamguard_target",
    "streamguard_toxiproxy_server",
    "toxiproxy",
]


def pytest_configure(config: pytest.Config) -> None:
    """Load the fault profiles (a bad file is a usage error), and create and register the
    session object (its hooks run only while the plugin is on)."""
    configure_matrix(config)
    session = StreamGuardSession(config, config.stash[SETTINGS_KEY])
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(session, PLUGIN_NAME)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """The target, the Toxiproxy server's kind and version, and where stamps come from."""
    settings = config.stash[SETTINGS_KEY]
    seed = f"seed={settings.seed}"
    if settings.toxiproxy_url is not None:
        version = ToxiproxyServer.probe_version(settings.toxiproxy_url)
        toxiproxy = f"{settings.toxiproxy_description} (version {version})"
        # The plugin cannot seed a server it did not start (its -seed is its own).
        seed += " (not that server's own draws)"
    else:
        toxiproxy = f"{settings.toxiproxy_description} (started on first use)"
    return [
        f"streamguard: target={shown_text(settings.target_description, config.rootpath)}, "
        f"toxiproxy={toxiproxy}, "
        f"default deadline ttft={settings.ttft:g}s chunk={settings.chunk:g}s, {seed}",
        STAMPS_KERNEL if kernel_stamps() else STAMPS_LOOP,
    ]


STAMPS_KERNEL = (
    "streamguard stamps: kernel (requests at their last byte's send, arrivals at the kernel's "
    "receive stamp; https streams at the client's read)"
)
STAMPS_LOOP = (
    "streamguard stamps: client (this platform's kernel gives no receive stamp: arrivals are "
    "stamped when the client reads them, so figures include the client's own delay)"
)


# Setup errors already shown in full: message -> the test that showed it.
_SHOWN_ERRORS = pytest.StashKey[dict[str, str]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Show each startup error in full once: a session fixture that failed (the target, the
    Toxiproxy server) fails every later test that needs it with the same message, so those
    tests get a one-line reference to the first instead of the whole message and output tail."""
    report = yield
    excinfo = call.excinfo
    if (
        report.when != "setup"
        or excinfo is None
        or not excinfo.errisinstance(pytest.fail.Exception)
    ):
        return report
    message = str(excinfo.value)
    if not message.startswith("streamguard "):
        return report
    first = item.config.stash.setdefault(_SHOWN_ERRORS, {}).setdefault(message, item.nodeid)
    if first != item.nodeid:
        report.longrepr = f"{message.splitlines()[0]} (shown in full for {first})"
    return report
