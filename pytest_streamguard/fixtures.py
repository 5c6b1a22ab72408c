"""The plugin's fixtures.

Expensive things are session-scoped and can be overridden in a conftest: the target
(``streamguard_target``), the Toxiproxy server (``streamguard_toxiproxy_server``) and the factory
that puts a proxy between them (``make_streamguard``). ``streamguard`` is the per-test handle;
``toxiproxy`` is a toxiproxy-python client bound to the session's server.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable, Iterator

import pytest
from toxiproxy.api import APIConsumer
from toxiproxy.server import Toxiproxy

from pytest_streamguard.guard import StreamGuard
from pytest_streamguard.processes import StartupError
from pytest_streamguard.session import DEADLINE_KEY, GUARD_KEY, SESSION_KEY, SETTINGS_KEY
from pytest_streamguard.settings import Settings
from pytest_streamguard.target import Target, start_target
from pytest_streamguard.toxiproxy_client import ToxiproxyError, ToxiproxyServer, _Binding

SKIP_REASON = (
    "pytest-streamguard is off: run pytest with --streamguard to read streams and check deadlines"
)
FIXTURE_NAMES = frozenset(
    {
        "streamguard",
        "toxiproxy",
        "streamguard_target",
        "streamguard_toxiproxy_server",
        "make_streamguard",
    }
)


def _settings(config: pytest.Config) -> Settings:
    settings = config.stash[SETTINGS_KEY]
    if not settings.enabled:
        pytest.skip(SKIP_REASON)
    return settings


@pytest.fixture(scope="session")
def streamguard_target(pytestconfig: pytest.Config) -> Iterator[Target]:
    """The app under test (session scope), started or located from the ``--streamguard-target-*``
    options, or the bundled ``target_app``; stopped at session end. Override it in a conftest to
    provide your own :class:`~pytest_streamguard.target.Target`."""
    settings = _settings(pytestconfig)
    try:
        target = start_target(settings)
    except StartupError as exc:
        pytest.fail(f"streamguard target failed to start: {exc}", pytrace=False)
    session = pytestconfig.stash[SESSION_KEY]
    session.meta["target_url"] = target.url
    try:
        yield target
    finally:
        target.stop()


@pytest.fixture(scope="session")
def streamguard_toxiproxy_server(pytestconfig: pytest.Config) -> Iterator[ToxiproxyServer]:
    """The session's Toxiproxy server (session scope): the embedded one, started as a child
    process, or the real ``toxiproxy-server`` at ``--streamguard-toxiproxy``."""
    settings = _settings(pytestconfig)
    try:
        if settings.toxiproxy_url is not None:
            server = ToxiproxyServer.external(settings.toxiproxy_url)
        else:
            server = ToxiproxyServer.embedded(settings.startup_timeout)
    except (StartupError, ToxiproxyError) as exc:
        pytest.fail(f"streamguard toxiproxy server unavailable: {exc}", pytrace=False)
    session = pytestconfig.stash[SESSION_KEY]
    session.meta["toxiproxy"] = f"{server.kind} {server.url}"
    session.meta["toxiproxy_version"] = server.version
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def toxiproxy(streamguard_toxiproxy_server: ToxiproxyServer) -> Iterator[Toxiproxy]:
    """A toxiproxy-python ``Toxiproxy`` client bound to the session's server (session scope).

    toxiproxy-python keeps its server address process-wide; it points at the session's server
    for the whole session and is restored afterwards.
    """
    api = streamguard_toxiproxy_server.api()
    api.close()
    with _Binding.lock:
        saved = (APIConsumer.host, APIConsumer.port)
        APIConsumer.host, APIConsumer.port = api.host, api.port
    try:
        yield Toxiproxy()
    finally:
        with _Binding.lock:
            APIConsumer.host, APIConsumer.port = saved


@pytest.fixture(scope="session")
def make_streamguard(
    streamguard_target: Target, streamguard_toxiproxy_server: ToxiproxyServer
) -> Iterator[Callable[[pytest.Item], StreamGuard]]:
    """Factory (session scope): one Toxiproxy proxy in front of the target for the session,
    and a fresh :class:`~pytest_streamguard.guard.StreamGuard` on it per test."""
    api = streamguard_toxiproxy_server.api()
    name = f"streamguard_{os.getpid()}_{secrets.token_hex(3)}"
    try:
        proxy = api.create_proxy(name, streamguard_target.address)
    except ToxiproxyError as exc:
        api.close()
        pytest.fail(f"streamguard could not create its proxy: {exc}", pytrace=False)

    def make(item: pytest.Item) -> StreamGuard:
        guard = StreamGuard(
            api=api,
            proxy=proxy,
            target=streamguard_target,
            deadline=item.stash.get(DEADLINE_KEY, None),
        )
        guard.faults.reset_proxy()
        item.stash[GUARD_KEY] = guard
        return guard

    try:
        yield make
    finally:
        # A server that died with the session leaves no proxy to delete.
        with contextlib.suppress(ToxiproxyError):
            api.destroy_proxy(proxy)
        api.close()


@pytest.fixture
def streamguard(
    make_streamguard: Callable[[pytest.Item], StreamGuard], request: pytest.FixtureRequest
) -> Iterator[StreamGuard]:
    """Per-test handle (function scope): ``stream()``/``astream()`` through the proxy,
    ``faults``, ``url``, ``proxy``, ``target``, ``traces``. Faults are undone after the test;
    with ``@pytest.mark.token_deadline`` every trace is checked after the test body."""
    guard = make_streamguard(request.node)
    try:
        yield guard
    finally:
        guard.close()
