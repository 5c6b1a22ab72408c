"""Driving a Toxiproxy server's API through toxiproxy-python 0.1.1, safely.

toxiproxy-python keeps the API host and port in class attributes of ``APIConsumer`` (process
global), has no request timeout, and turns an HTTP 500 into a ``KeyError``. :class:`ToxiproxyAPI`
works around all three without patching the library: every call runs with the host and port of
*its* server set under a process-wide lock and restored afterwards, runs in a worker thread with
a deadline (a hung server fails the call with a clear error instead of hanging the test), and
library errors are re-raised as :class:`ToxiproxyError` naming the server and the operation.

Also here: :class:`ToxiproxyServer`, the session's server (the embedded one started as a child
process, or a real ``toxiproxy-server`` given by URL), and the names of the session's proxies,
by which a server shared by several sessions tells a live session's from a dead one's
(:func:`proxy_name`, :func:`remove_stale_proxies`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import json
import os
import re
import secrets
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import requests
from toxiproxy.api import APIConsumer, validate_response
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists
from toxiproxy.proxy import Proxy
from toxiproxy.server import Toxiproxy

from pytest_streamguard.common.tls import tls_context
from pytest_streamguard.errors import StartupError, ToxiproxyError
from pytest_streamguard.services.processes import ManagedProcess, toxiproxy_listening

T = TypeVar("T")

API_TIMEOUT = 10.0

_PROXY_NAME = re.compile(r"streamguard_(\d+)_(?:(\d+)_)?[0-9a-f]+")


def _process_start(pid: int) -> str | None:
    """``pid``'s start time (clock ticks since boot) and None when it is not a live process;
    ``"0"`` for a live process whose start time cannot be read (not Linux)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return "0"
    # A zombie runs no session any more.
    return None if fields[0] == "Z" else fields[19]


def proxy_name() -> str:
    """A fresh name for this process's proxy: ``streamguard_<pid>_<start>_<random>``."""
    pid = os.getpid()
    return f"streamguard_{pid}_{_process_start(pid) or '0'}_{secrets.token_hex(3)}"


def is_stale_proxy(name: str) -> bool:
    """Whether ``name`` is a streamguard proxy whose session's process is gone: its pid is not
    alive, or is alive with another start time than the name records (the pid was reused)."""
    found = _PROXY_NAME.fullmatch(name)
    if found is None:
        return False
    start = _process_start(int(found.group(1)))
    if start is None:
        return True
    recorded = found.group(2)
    return recorded not in (None, "0") and start != "0" and start != recorded


def host_port(host: str, port: int | str) -> str:
    """``host:port``, with an IPv6 address in brackets (``[::1]:8474``), as Go writes it."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def with_host(address: str, host: str | None) -> str:
    """``address`` (``host:port``) with its host replaced by ``host`` (unchanged for None)."""
    if host is None:
        return address
    return host_port(host, address.rsplit(":", 1)[1])


def proxy_url(listen: str, proxy_host: str, api_host: str) -> str:
    """The base URL a client dials for a proxy that reports ``listen``: ``proxy_host`` with the
    proxy's port, or, when ``proxy_host`` is a wildcard (listen everywhere), the host of the
    Toxiproxy API."""
    wildcard = proxy_host.strip("[]") in ("0.0.0.0", "::")
    host = api_host if wildcard else proxy_host
    return "http://" + with_host(listen, host)


class _Binding:
    """toxiproxy-python reads ``APIConsumer.host``/``port`` (process-wide) at call time, so one
    lock serialises every call; ``holder`` names the call holding it, for error messages."""

    lock = threading.Lock()
    holder = ""


def _version_at(url: str) -> str:
    api = ToxiproxyAPI(url)
    try:
        return api.version()
    finally:
        api.close()


class ToxiproxyAPI:
    """toxiproxy-python calls bound to one server, with a deadline and clear errors."""

    def __init__(self, url: str, timeout: float = API_TIMEOUT) -> None:
        parts = urlsplit(url)
        if parts.hostname is None or parts.port is None:
            raise ValueError(f"toxiproxy URL {url!r} needs a host and a port")
        self.url = url.rstrip("/")
        self.host = parts.hostname
        self.port = parts.port
        self.timeout = timeout
        self.client = Toxiproxy()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="streamguard-toxiproxy"
        )

    def _bound(self, what: str, fn: Callable[[], T]) -> T:
        # Half the call's deadline, so this specific error reaches the caller first.
        if not _Binding.lock.acquire(timeout=self.timeout / 2):
            raise ToxiproxyError(
                f"toxiproxy API at {self.url}: could not {what}: toxiproxy-python's process-wide "
                f"server address is still held by {_Binding.holder}, which has not returned"
            )
        try:
            _Binding.holder = f"{what} at {self.url}"
            saved = (APIConsumer.host, APIConsumer.port)
            APIConsumer.host, APIConsumer.port = self.host, self.port
            try:
                return fn()
            finally:
                APIConsumer.host, APIConsumer.port = saved
        finally:
            _Binding.lock.release()

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """Run ``fn`` (a toxiproxy-python call) against this server; ``what`` names it in errors."""
        future = self._executor.submit(self._bound, what, fn)
        try:
            return future.result(self.timeout)
        except concurrent.futures.TimeoutError:
            raise ToxiproxyError(
                f"toxiproxy API at {self.url} did not answer {what} within {self.timeout:g} s "
                "(is the server hung?)"
            ) from None
        except (ProxyExists, NotFound, InvalidToxic) as exc:
            detail = exc.args[0] if exc.args else ""
            if isinstance(detail, bytes):
                detail = detail.decode("utf-8", "replace").strip()
            raise ToxiproxyError(
                f"toxiproxy API at {self.url}: {what} failed: {type(exc).__name__}: {detail}"
            ) from exc
        except KeyError as exc:
            # toxiproxy-python builds a Proxy from any body; an error body lacks its fields.
            raise ToxiproxyError(
                f"toxiproxy API at {self.url}: {what} failed: the server answered an error "
                f"(HTTP 5xx, e.g. listen address in use) that toxiproxy-python reads as "
                f"KeyError {exc}"
            ) from exc
        except (OSError, ValueError) as exc:
            raise ToxiproxyError(f"toxiproxy API at {self.url}: {what} failed: {exc}") from exc

    def version(self) -> str:
        """The server's version string (from ``GET /version``, read as
        :func:`parse_version` reads it; the raw text if it is not a Toxiproxy answer)."""
        raw: bytes = self.call("GET /version", lambda: APIConsumer.get("/version").content)
        text = raw.decode("utf-8", "replace")
        return parse_version(text) or text.strip()

    def create_proxy(
        self, name: str, upstream: str, host: str = "127.0.0.1", ports: range | None = None
    ) -> Proxy:
        """Create a proxy listening on a free port of ``host`` (loopback by default): the one
        the server picks, or the first of ``ports`` it can listen on."""

        def create(listen: str, what: str) -> Proxy:
            return self.call(
                what,
                functools.partial(self.client.create, upstream=upstream, name=name, listen=listen),
            )

        if ports is None:
            return create(host_port(host, 0), f"create proxy {name!r}")
        last = "none (an empty range)"
        for port in ports:
            listen = host_port(host, port)
            try:
                return create(listen, f"create proxy {name!r} on {listen}")
            except ToxiproxyError as exc:
                # The server answered an error (e.g. the port is in use): the next port may
                # do. A timeout or a refused connection would be the same on every port.
                if not isinstance(exc.__cause__, KeyError):
                    raise
                last = str(exc)
        raise ToxiproxyError(
            f"toxiproxy API at {self.url}: create proxy {name!r}: no port of "
            f"{ports.start}-{ports.stop - 1} (--streamguard-proxy-ports) could be listened on "
            f"at {host}; the last error: {last}"
        )

    def get_proxy(self, name: str) -> Proxy:
        """The proxy called ``name``; ToxiproxyError if it does not exist."""
        proxy = self.call(f"get proxy {name!r}", lambda: self.client.get_proxy(name))
        if proxy is None:
            raise ToxiproxyError(f"toxiproxy API at {self.url}: no proxy named {name!r}")
        return proxy

    def proxy_names(self) -> list[str]:
        """The names of every proxy on the server."""
        return self.call("list proxies", lambda: list(self.client.proxies()))

    def destroy_proxy(self, proxy: Proxy) -> None:
        """Delete ``proxy``."""
        self.call(f"delete proxy {proxy.name!r}", proxy.destroy)

    def add_toxic(
        self, proxy: Proxy, name: str, type_: str, stream: str, attributes: dict[str, Any]
    ) -> None:
        """Add one toxic to ``proxy``."""
        self.call(
            f"add toxic {name!r} ({type_}, {stream}) to proxy {proxy.name!r}",
            lambda: proxy.add_toxic(name=name, type=type_, stream=stream, attributes=attributes),
        )

    def remove_toxic(self, proxy: Proxy, name: str) -> None:
        """Remove the toxic called ``name`` from ``proxy``."""
        self.call(
            f"remove toxic {name!r} from proxy {proxy.name!r}", lambda: proxy.destroy_toxic(name)
        )

    def set_enabled(self, proxy: Proxy, enabled: bool) -> None:
        """Enable or disable ``proxy`` (disabled: listener closed, connections dropped)."""
        action = proxy.enable if enabled else proxy.disable
        self.call(f"{'enable' if enabled else 'disable'} proxy {proxy.name!r}", action)

    def set_upstream(self, proxy: Proxy, upstream: str) -> None:
        """Point ``proxy`` at ``upstream`` (``host:port``); the server restarts its listener on
        the same address, closing open connections. toxiproxy-python has no call for it."""

        def patch() -> None:
            url = f"http://{APIConsumer.host}:{APIConsumer.port}/proxies/{proxy.name}"
            response = requests.patch(url, json={"upstream": upstream}, timeout=self.timeout)
            validate_response(response).raise_for_status()

        self.call(f"set upstream of proxy {proxy.name!r} to {upstream}", patch)
        proxy.upstream = upstream

    def upstream(self, proxy: Proxy) -> str:
        """The upstream the server reports for ``proxy``."""
        return str(self.get_proxy(proxy.name).upstream)

    def close(self) -> None:
        """Release the worker thread (a call hung on a dead server is abandoned)."""
        self._executor.shutdown(wait=False, cancel_futures=True)


_VERSION_TEXT = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+\-_]{0,63}")
# Without JSON around it, only what a release (the tag without v), a build from source (git)
# or an old Makefile build (git-<hash>) sends, so that a health endpoint's "OK" is not a version.
_BARE_VERSION = re.compile(r"v?[0-9][0-9A-Za-z.+\-_]{0,63}|git(-[0-9a-f]{4,40})?|dev")
# Toxiproxy 2.6.0 formats its answer with a Go raw string, so the newline is sent as the two
# characters backslash and n: {"version": "2.6.0"}\n (fixed in 2.7.0, Shopify/toxiproxy#538).
_LITERAL_NEWLINE = "\\n"


def parse_version(body: str) -> str | None:
    """The version in the body of a Toxiproxy ``GET /version`` answer, or None when the body is
    not one (an HTML page, other JSON, an error text).

    Accepted, byte for byte as the releases send them (``Version`` is ``git`` in a build from
    source, the tag without ``v`` in a release):

    - ``2.5.0``: bare text (2.0 to 2.5; old Makefile builds send ``git-<hash>``);
    - ``{"version": "2.6.0"}\\n``: 2.6.0, with a literal backslash and ``n``;
    - ``{"version": "2.12.0"}`` and a newline: 2.7.0 and later."""
    text = body.strip()
    if not text.startswith("{"):
        return text if _BARE_VERSION.fullmatch(text) else None
    try:
        parsed, end = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return None
    if text[end:].strip() not in ("", _LITERAL_NEWLINE) or not isinstance(parsed, dict):
        return None
    version = parsed.get("version")
    if isinstance(version, str) and _VERSION_TEXT.fullmatch(version):
        return version
    return None


def _toxiproxy_version(response: httpx.Response) -> str | None:
    """The version in a successful ``GET /version`` answer (:func:`parse_version`)."""
    return parse_version(response.text) if response.is_success else None


def _describe(response: httpx.Response) -> str:
    """``HTTP 200 text/html`` and the first characters of the body, on one line."""
    kind = response.headers.get("content-type", "no content-type").split(";")[0]
    start = " ".join(response.text.split())[:40].rstrip()
    return f"HTTP {response.status_code} {kind}" + (f" ({start!r}...)" if start else "")


def remove_stale_proxies(api: ToxiproxyAPI) -> list[str]:
    """Delete the proxies of dead sessions (see :func:`is_stale_proxy`); return their names."""
    removed = []
    for name in api.proxy_names():
        if is_stale_proxy(name):
            # Another session starting at the same time may delete it first.
            with contextlib.suppress(ToxiproxyError):
                api.destroy_proxy(api.get_proxy(name))
                removed.append(name)
    return removed


@dataclass
class ToxiproxyServer:
    """The session's Toxiproxy server: where its API is, what kind it is, and its version."""

    url: str
    kind: str
    version: str
    process: ManagedProcess | None = None

    @property
    def pid(self) -> int | None:
        """The process id of the embedded server; None for an external one."""
        return self.process.pid if self.process is not None else None

    def api(self) -> ToxiproxyAPI:
        """A bound API client for this server."""
        return ToxiproxyAPI(self.url)

    def stop(self) -> None:
        """Stop the embedded server (an external one is left running)."""
        if self.process is not None:
            self.process.stop()

    @staticmethod
    def probe_version(url: str) -> str:
        """The version a running server reports, or why it could not be read (for the header)."""
        try:
            response = httpx.get(f"{url}/version", timeout=2.0, verify=tls_context())
        except httpx.HTTPError as exc:
            return f"unreachable ({type(exc).__name__})"
        version = _toxiproxy_version(response)
        if version is None:
            return f"NOT a Toxiproxy API: {_describe(response)}"
        return version

    @classmethod
    def external(cls, url: str) -> ToxiproxyServer:
        """Use a running toxiproxy-server; fail clearly if its API does not answer."""
        try:
            response = httpx.get(f"{url}/version", timeout=5.0, verify=tls_context())
        except httpx.HTTPError as exc:
            raise StartupError(
                f"toxiproxy-server at {url} (--streamguard-toxiproxy) did not answer "
                f"GET /version: {exc}"
            ) from None
        if _toxiproxy_version(response) is None:
            raise StartupError(
                f"the server at {url} (--streamguard-toxiproxy) is not a Toxiproxy API: "
                f"GET /version answered {_describe(response)}; expected Toxiproxy's version, "
                'such as {"version": "2.12.0"}\n'
                "hint: pass the URL of toxiproxy-server's API (its -host/-port, default "
                "http://127.0.0.1:8474), or leave --streamguard-toxiproxy out for the embedded one"
            )
        return cls(url=url, kind="external", version=_version_at(url))

    @classmethod
    def embedded(cls, startup_timeout: float, seed: int | None = None) -> ToxiproxyServer:
        """Start ``python -m pytest_streamguard.toxiproxy_server`` on a free loopback port
        (with ``-seed``, as the real server takes it, when ``seed`` is given)."""
        argv = ["-m", "pytest_streamguard.toxiproxy_server", "-host", "127.0.0.1", "-port", "0"]
        seeded = [] if seed is None else ["-seed", str(seed)]
        process = ManagedProcess("embedded toxiproxy server", [sys.executable, *argv, *seeded])
        try:
            url = process.wait_for_line(toxiproxy_listening, startup_timeout)
            process.wait_ready(f"{url}/version", startup_timeout)
            version = _version_at(url)
        except BaseException:
            process.stop()
            raise
        return cls(url=url, kind="embedded", version=version, process=process)
