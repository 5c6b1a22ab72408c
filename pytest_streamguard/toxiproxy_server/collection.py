"""The set of proxies and the operations of the API that change it."""

from __future__ import annotations

import asyncio
import random
import socket
from typing import Any, Final

from .decode import FieldKind, decode_fields, expect_object
from .errors import BAD_REQUEST_BODY, MISSING_FIELD, PROXY_EXISTS, PROXY_NOT_FOUND
from .metrics import Metrics
from .proxy import Proxy, check_upstream, format_address, split_host_port
from .toxics import check_name

_PROXY_FIELDS: Final[dict[str, FieldKind]] = {
    "name": "string",
    "listen": "string",
    "upstream": "string",
    "enabled": "bool",
}
_POPULATE_TYPE: Final = "[]struct { toxiproxy.Proxy; Enabled *bool }"


class Collection:
    """Every proxy by name; API mutations run one at a time, as under the Go mutex."""

    def __init__(self, rng: random.Random, metrics: Metrics) -> None:
        self.rng = rng
        self.metrics = metrics
        self.proxies: dict[str, Proxy] = {}
        self.lock = asyncio.Lock()

    def get(self, name: str) -> Proxy:
        """The proxy called ``name``, or the 404."""
        proxy = self.proxies.get(name)
        if proxy is None:
            raise PROXY_NOT_FOUND
        return proxy

    def _new_proxy(self, fields: dict[str, Any]) -> Proxy:
        check_name(fields["name"], "proxy")
        check_upstream(fields["upstream"])
        return Proxy(
            fields["name"], fields.get("listen", ""), fields["upstream"], self.rng, self.metrics
        )

    async def create(self, body: object) -> Proxy:
        """``POST /proxies``: add a proxy and start it unless ``enabled`` is false."""
        fields = decode_fields(expect_object(body, "toxiproxy.Proxy"), _PROXY_FIELDS, "Proxy")
        for required in ("name", "upstream"):
            if not fields.get(required):
                raise MISSING_FIELD.joined(required)
        proxy = self._new_proxy(fields)
        async with self.lock:
            if proxy.name in self.proxies:
                raise PROXY_EXISTS
            if fields.get("enabled", True):
                await proxy.start()
            self.proxies[proxy.name] = proxy
        return proxy

    async def populate(self, body: object) -> list[Proxy]:
        """``POST /populate``: validate every entry, then add or replace them in order."""
        if not isinstance(body, list):
            kind = "object" if isinstance(body, dict) else type(body).__name__
            raise BAD_REQUEST_BODY.joined(
                f"json: cannot unmarshal {kind} into Go value of type {_POPULATE_TYPE}"
            )
        entries: list[tuple[Proxy, bool]] = []
        for index, item in enumerate(body, start=1):
            fields = decode_fields(expect_object(item, "toxiproxy.Proxy"), _PROXY_FIELDS, "Proxy")
            for required in ("name", "upstream"):
                if not fields.get(required):
                    raise MISSING_FIELD.joined(f"{required} at proxy {index}")
            entries.append((self._new_proxy(fields), fields.get("enabled", True)))
        done: list[Proxy] = []
        async with self.lock:
            for proxy, enabled in entries:
                done.append(await self._add_or_replace(proxy, enabled))
        return done

    async def _add_or_replace(self, proxy: Proxy, enabled: bool) -> Proxy:
        existing = self.proxies.get(proxy.name)
        if existing is not None:
            listen = await resolve_listen(proxy.listen)
            if existing.listen == listen and existing.upstream == proxy.upstream:
                return existing
            existing.stop()
            del self.proxies[proxy.name]
        if enabled:
            await proxy.start()
        self.proxies[proxy.name] = proxy
        return proxy

    async def update(self, name: str, body: object) -> Proxy:
        """``PATCH /proxies/{p}``: change listen, upstream or enabled (the name is ignored)."""
        proxy = self.get(name)
        fields = decode_fields(expect_object(body, "toxiproxy.Proxy"), _PROXY_FIELDS, "Proxy")
        upstream = fields.get("upstream", proxy.upstream)
        if upstream != proxy.upstream:
            check_upstream(upstream)
        async with self.lock:
            await proxy.update(
                fields.get("listen", proxy.listen), upstream, fields.get("enabled", proxy.enabled)
            )
        return proxy

    async def delete(self, name: str) -> None:
        """``DELETE /proxies/{p}``: stop it (closing its connections) and forget it."""
        async with self.lock:
            proxy = self.get(name)
            proxy.stop()
            del self.proxies[name]

    async def reset(self) -> None:
        """``POST /reset``: start every proxy again and remove every toxic."""
        async with self.lock:
            for proxy in list(self.proxies.values()):
                await proxy.start()
                proxy.reset_toxics()

    def close(self) -> None:
        """Stop every proxy (server shutdown)."""
        for proxy in self.proxies.values():
            proxy.stop()


async def resolve_listen(listen: str) -> str:
    """The address a listen string would report once bound (port 0 stays 0)."""
    try:
        host, port = split_host_port(listen)
    except ValueError:
        return listen
    if host in ("", "0.0.0.0", "::"):
        return f"[::]:{port}"
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return listen
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    return format_address(infos[0][4], infos[0][0])
