"""The plugin's fixtures (docs/getting-started.md lists them). Expensive things are
session-scoped and can be overridden in a conftest (the target, the Toxiproxy server, the
factory that puts a proxy in front of a target); ``streamguard`` is the per-test handle.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence

import pytest
from toxiproxy.api import APIConsumer
from toxiproxy.proxy import Proxy
from toxiproxy.server import Toxiproxy

from pytest_streamguard.common.cpu import listening_pid
from pytest_streamguard.common.display import shown_command
from pytest_streamguard.common.names import SKIP_REASON
from pytest_streamguard.errors import StartupError, ToxiproxyError
from pytest_streamguard.faults.hops import InnerHop, StackHops
from pytest_streamguard.faults.inject import log_of
from pytest_streamguard.faults.toxiproxy_client import (
    ToxiproxyAPI,
    ToxiproxyServer,
    _Binding,
    proxy_name,
    proxy_url,
    remove_stale_proxies,
    with_host,
)
from pytest_streamguard.guard import StreamGuard
from pytest_streamguard.judge.ruling import file_name
from pytest_streamguard.load.cluster import RayShards
from pytest_streamguard.plugin.session import DEADLINE_KEY, GUARD_KEY, SESSION_KEY, SETTINGS_KEY
from pytest_streamguard.plugin.settings import Settings
from pytest_streamguard.services.app import Target, start_target
from pytest_streamguard.services.stack import Stack, start_stack
from pytest_streamguard.services.tap import Tap
from pytest_streamguard.stream.endings import pytest_timeout_limit
from pytest_streamguard.stream.probe import ProbeSpec

#: The session's started stack, for the guards of its entry (``streamguard.hop()``).
STACK_KEY = pytest.StashKey[StackHops]()


def _settings(config: pytest.Config) -> Settings:
    settings = config.stash[SETTINGS_KEY]
    if not settings.enabled:
        pytest.skip(SKIP_REASON)
    return settings


def _probe_spec(settings: Settings, target: Target, stack: StackHops | None) -> ProbeSpec | None:
    """The probe ``--streamguard-probe`` asks for, sent straight to ``target``; under a
    ``stack``, to each inner service too, on its own ready path (``tcp``: its port)."""
    if settings.probe == "off":
        return None

    def spec(setting: str, of: Target) -> ProbeSpec:
        pid = of.pid or listening_pid(of.url)
        return ProbeSpec.for_target(setting, of.url, of.ready_path, settings.probe_interval, pid)

    if stack is None:
        return spec(settings.probe, target)
    own = "tcp" if settings.probe == "tcp" else ""
    inner = tuple(dataclasses.replace(spec(own, h.target), hop=n) for n, h in stack.inner.items())
    return dataclasses.replace(spec(settings.probe, target), hop=stack.entry, inner=inner)


@pytest.fixture(scope="session")
def streamguard_stack(
    pytestconfig: pytest.Config, streamguard_toxiproxy_server: ToxiproxyServer
) -> Iterator[Stack]:
    """The stack of ``--streamguard-service`` (session scope): its services started in order,
    each but the entry behind a Toxiproxy proxy of its own (``{NAME}`` in a later command is
    that proxy's address); stopped at session end, the entry first, after their proxies are
    deleted. ``make_streamguard_target()`` returns its entry."""
    settings = _settings(pytestconfig)
    api = streamguard_toxiproxy_server.api()
    inner: dict[str, InnerHop] = {}

    def front(name: str, target: Target) -> str:
        upstream = with_host(target.address, settings.upstream_host)
        proxy = api.create_proxy(proxy_name(), upstream, settings.proxy_host, settings.proxy_ports)
        address = proxy_url(str(proxy.listen), settings.proxy_host, api.host).split("://")[1]
        # The service in front dials a tap that stamps the answers, then this proxy.
        inner[name] = InnerHop(proxy, target, Tap(address))
        return inner[name].address

    def close_hops() -> None:
        _destroy(api, [hop.proxy for hop in inner.values()])
        for hop in inner.values():
            hop.tap.close()
        api.close()

    error = None
    try:
        stack = start_stack(
            settings.services,
            shared_ready_path=settings.ready_path,
            startup_timeout=settings.startup_timeout,
            cwd=settings.target_cwd,
            front=front,
            host=settings.upstream_host or "127.0.0.1",
        )
    except (StartupError, ToxiproxyError, OSError) as exc:
        # OSError: a tap that could not listen on 127.0.0.1.
        error = f"streamguard stack failed to start: {exc}"
    except pytest.fail.Exception as exc:
        error = _timed_out("stack", exc)
        if error is None:
            raise
    if error is not None:
        close_hops()
        pytest.fail(error, pytrace=False)
    pytestconfig.stash[STACK_KEY] = StackHops(list(stack.services)[-1], inner, stack.entry)
    meta = pytestconfig.stash[SESSION_KEY].meta
    meta["services"] = {
        name: shown_command(target.command, pytestconfig.rootpath)
        for name, target in stack.services.items()
    }
    try:
        yield stack
    finally:
        del pytestconfig.stash[STACK_KEY]
        close_hops()
        stack.stop()


def _timed_out(what: str, exc: BaseException) -> str | None:
    """The error for a start that pytest-timeout's per-test limit broke off (its signal method
    fails whatever runs, here the session's start, charged to the first test); None for any
    other failure."""
    limit = pytest_timeout_limit(exc)
    if limit is None:
        return None
    return (
        f"streamguard {what} failed to start: pytest-timeout's limit of {limit} s for the "
        f"first test ran out while the {what} started (a session fixture is charged to the "
        "first test that uses it); set timeout_func_only = true in the ini file (pytest-timeout "
        "then times the test function only), or give that test a longer timeout"
    )


def _destroy(api: ToxiproxyAPI, proxies: Sequence[Proxy]) -> None:
    """Delete ``proxies`` (a server that died with the session leaves none to delete)."""
    for proxy in proxies:
        with contextlib.suppress(ToxiproxyError):
            api.destroy_proxy(proxy)


@pytest.fixture(scope="session")
def make_streamguard_target(
    pytestconfig: pytest.Config, request: pytest.FixtureRequest
) -> Iterator[Callable[..., Target]]:
    """Factory (session scope): ``make_streamguard_target(args=["--naive"])`` starts the
    session's target with extra command-line flags (after ``--streamguard-target-args``) and
    returns its :class:`~pytest_streamguard.Target`. Each distinct ``args`` starts one
    process, shared by every test that asks for it and stopped at session end. Use it to
    override ``streamguard_target`` for a module or class; a target given by URL takes no flags."""
    settings = _settings(pytestconfig)
    started: dict[tuple[str, ...], Target] = {}
    failed: dict[tuple[str, ...], str] = {}

    def make(args: Sequence[str] = ()) -> Target:
        if isinstance(args, str) or not all(isinstance(arg, str) for arg in args):
            raise TypeError(
                f"make_streamguard_target(args={args!r}): expected a list of strings, "
                "such as ['--heartbeat', '0.5']"
            )
        key = tuple(args)
        if settings.services:
            if key:
                raise ValueError(
                    f"make_streamguard_target(args={list(key)!r}): the session's target is a "
                    "stack (--streamguard-service), which takes no extra flags; put them in "
                    "the service's command"
                )
            # Started once, by its own fixture (it needs the Toxiproxy server for its hops).
            stack: Stack = request.getfixturevalue("streamguard_stack")
            return stack.entry
        if key in failed:
            # The full error and the app's output were shown once, for the first test.
            pytest.fail(failed[key], pytrace=False)
        if key not in started:
            error = None
            try:
                started[key] = start_target(settings, key)
                started[key].follow(settings.log_files)
            except (StartupError, ValueError) as exc:
                error = f"streamguard target failed to start: {exc}"
                failed[key] = f"{error.splitlines()[0]} (see the first error for its output)"
            except pytest.fail.Exception as exc:
                timed_out = _timed_out("target", exc)
                if timed_out is None:
                    raise
                error = failed[key] = timed_out
            if error is not None:
                # Outside the except block, so pytest shows no "During handling of ..." chain.
                pytest.fail(error, pytrace=False)
        return started[key]

    try:
        yield make
    finally:
        for target in started.values():
            target.stop()


@pytest.fixture(scope="session")
def streamguard_target(
    pytestconfig: pytest.Config, make_streamguard_target: Callable[..., Target]
) -> Target:
    """The app under test (session scope), started or located from the ``--streamguard-target-*``
    options, or the bundled ``target_app``; stopped at session end. Override it in a conftest to
    provide your own :class:`~pytest_streamguard.Target`, or in a module or class (any
    scope) with ``make_streamguard_target(args=[...])`` for a variant of the bundled target."""
    target: Target = make_streamguard_target()
    meta = pytestconfig.stash[SESSION_KEY].meta
    meta["target_url"] = target.url
    if target.command:
        # The header at the start can show only the template ({port}); this is what ran.
        meta["target_command"] = shown_command(target.command, pytestconfig.rootpath)
    return target


@pytest.fixture(scope="session")
def streamguard_toxiproxy_server(pytestconfig: pytest.Config) -> Iterator[ToxiproxyServer]:
    """The session's Toxiproxy server (session scope): the embedded one, started as a child
    process, or the real ``toxiproxy-server`` at ``--streamguard-toxiproxy``."""
    settings = _settings(pytestconfig)
    error = None
    try:
        if settings.toxiproxy_url is not None:
            server = ToxiproxyServer.external(settings.toxiproxy_url)
            # A shared server may hold proxies of sessions that were killed.
            api = server.api()
            try:
                remove_stale_proxies(api)
            finally:
                api.close()
        else:
            server = ToxiproxyServer.embedded(settings.startup_timeout, seed=settings.seed)
    except (StartupError, ToxiproxyError) as exc:
        error = f"streamguard toxiproxy server unavailable: {exc}"
    if error is not None:
        pytest.fail(error, pytrace=False)
    session = pytestconfig.stash[SESSION_KEY]
    session.meta["toxiproxy"] = f"{server.kind} {server.url}"
    session.meta["toxiproxy_version"] = server.version
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def make_streamguard(
    pytestconfig: pytest.Config,
    streamguard_toxiproxy_server: ToxiproxyServer,
    make_streamguard_target: Callable[..., Target],
) -> Iterator[Callable[[pytest.Item, Target], StreamGuard]]:
    """Factory (session scope): ``make_streamguard(item, target)`` returns a fresh
    :class:`~pytest_streamguard.StreamGuard` for one test; every guard made for a test reports
    into that test's verdict and record, and is closed at the test's end. Each target gets one
    Toxiproxy proxy, created on first use, cleared before each test and deleted at session
    end."""
    # It requests make_streamguard_target only for the teardown order: the proxies are deleted
    # (cutting any stream still open, e.g. after Ctrl-C) before the targets are stopped, so a
    # target's graceful shutdown does not wait on a stream the proxy keeps open.
    del make_streamguard_target
    settings = pytestconfig.stash[SETTINGS_KEY]
    api = streamguard_toxiproxy_server.api()
    proxies: dict[str, Proxy] = {}
    ray = RayShards(settings.ray_address) if settings.ray_address is not None else None

    def make(item: pytest.Item, target: Target) -> StreamGuard:
        proxy = proxies.get(target.address)
        upstream = with_host(target.address, settings.upstream_host)
        error: str | None = None
        try:
            if proxy is None:
                proxy = proxies[target.address] = api.create_proxy(
                    proxy_name(), upstream, settings.proxy_host, settings.proxy_ports
                )
            elif api.upstream(proxy) != upstream:
                # A test that crashed before undoing its ingress left the proxy pointing at it.
                api.set_upstream(proxy, upstream)
        except ToxiproxyError as exc:
            error = f"streamguard could not set up its proxy: {exc}"
        if error is not None:
            pytest.fail(error, pytrace=False)
        stack = _stack_of(pytestconfig, target)
        guard = StreamGuard(
            api=api,
            proxy=proxy,
            target=target,
            deadline=item.stash.get(DEADLINE_KEY, None),
            max_stream_seconds=settings.max_stream_seconds,
            proxy_host=settings.proxy_host,
            upstream=upstream,
            ray=ray,
            seed=settings.seed,
            probe_spec=_probe_spec(settings, target, stack),
            client=settings.client,
            transcripts=settings.transcripts and settings.transcripts / file_name(item.nodeid),
            stack=stack,
            proxy_pid=streamguard_toxiproxy_server.pid
            or listening_pid(streamguard_toxiproxy_server.url),
        )
        guards = item.stash.setdefault(GUARD_KEY, [])
        # A second guard of the same test on the same proxy shares it: resetting it would undo
        # the first guard's faults under it (and its teardown would miss them).
        if not any(other.proxy is proxy for other in guards):
            log_of(guard.faults).reset_proxy()
        guards.append(guard)
        # Every guard of the test is closed at its end, not only the streamguard fixture's: a
        # fault left on a proxy no later test resets (another target's, an inner hop's) would
        # act on the next tests. Closing twice is harmless; the records stay for the reports.
        item.addfinalizer(guard.close)
        return guard

    try:
        yield make
    finally:
        if ray is not None:
            ray.close()
        _destroy(api, list(proxies.values()))
        api.close()


def _stack_of(config: pytest.Config, target: Target) -> StackHops | None:
    """The session's stack when ``target`` is its entry (a guard of another target has no hops)."""
    stack = config.stash.get(STACK_KEY, None)
    return stack if stack is not None and stack.target is target else None


@pytest.fixture
def streamguard(
    make_streamguard: Callable[[pytest.Item, Target], StreamGuard],
    streamguard_target: Target,
    request: pytest.FixtureRequest,
) -> Iterator[StreamGuard]:
    """Per-test handle (function scope): ``stream()``/``astream()`` through the proxy,
    ``faults``, ``ingress()``, ``url``, ``proxy``, ``target``, ``traces``. Faults and the
    ingress are undone after the test; with ``@pytest.mark.token_deadline`` every trace is
    checked after the test body. It reads ``streamguard_target``, so a module or class that
    overrides that fixture gets its own target behind its own proxy."""
    guard = make_streamguard(request.node, streamguard_target)
    try:
        yield guard
    finally:
        guard.close()


@pytest.fixture(scope="session")
def toxiproxy(streamguard_toxiproxy_server: ToxiproxyServer) -> Iterator[Toxiproxy]:
    """A toxiproxy-python ``Toxiproxy`` client bound to the session's server (session scope).

    toxiproxy-python keeps its server address process-wide; it points at the session's server
    for the whole session and is restored afterwards."""
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
