"""The set of proxies and the operations of the API that change it."""

from __future__ import annotations

import asyncio
import random
from typing import Any, Final

from .decode import FieldKind, decode_fields, expect_object, json_kind
from .errors import BAD_REQUEST_BODY, MISSING_FIELD, PROXY_EXISTS, PROXY_NOT_FOUND, ApiError
from .metrics import Metrics
from .proxy import DEFAULT_LISTEN, Proxy, check_upstream
from .toxics import check_name

_PROXY_FIELDS: Final[dict[str, FieldKind]] = {
    "name": "string",
    "listen": "string",
    "upstream": "string",
    "enabled": "bool",
}
_POPULATE_ENTRY: Final = 'struct { toxiproxy.Proxy; Enabled *bool "json:\\"enabled\\"" }'


class PopulateError(Exception):
    """A ``/populate`` that failed part-way: the error, and the proxies applied before it."""

    def __init__(self, error: ApiError, applied: list[Proxy]) -> None:
        super().__init__(error.message)
        self.error = error
        self.applied = applied


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

    def _new_proxy(self, fields: dict[str, Any], at: str = "") -> Proxy:
        for required in ("name", "upstream"):
            if not fields.get(required):
                raise MISSING_FIELD.joined(required + at)
        check_name(fields["name"], "proxy")
        check_upstream(fields["upstream"])
        # Without a listen address Toxiproxy binds a random port on every interface; this
        # server binds it on loopback only (a deliberate divergence, see the README).
        listen = fields.get("listen") or DEFAULT_LISTEN
        return Proxy(fields["name"], listen, fields["upstream"], self.rng, self.metrics)

    async def create(self, body: object) -> Proxy:
        """``POST /proxies``: add a proxy and start it unless ``enabled`` is false."""
        fields = decode_fields(expect_object(body, "toxiproxy.Proxy"), _PROXY_FIELDS, "Proxy")
        proxy = self._new_proxy(fields)
        async with self.lock:
            if proxy.name in self.proxies:
                raise PROXY_EXISTS
            if fields.get("enabled", True):
                await proxy.start()
            self.proxies[proxy.name] = proxy
        return proxy

    async def populate(self, body: object) -> list[Proxy]:
        """``POST /populate``: validate every entry, then add or replace them in order.

        A failure part-way raises :class:`PopulateError` carrying the proxies already
        applied, which the API lists next to the error, as Toxiproxy 2.12 does."""
        if body is None:
            # Go decodes null into the slice as "leave it empty".
            body = []
        if not isinstance(body, list):
            raise BAD_REQUEST_BODY.joined(
                f"json: cannot unmarshal {json_kind(body)} into Go value of type "
                f"[]{_POPULATE_ENTRY}"
            )
        # Go decodes the whole array (first type error wins) before checking any entry.
        decoded: list[dict[str, Any]] = []
        first: ApiError | None = None
        for item in body:
            try:
                entry = expect_object(item, _POPULATE_ENTRY)
                decoded.append(decode_fields(entry, _PROXY_FIELDS, ""))
            except ApiError as error:
                first = first or error
        if first is not None:
            raise first
        entries: list[tuple[Proxy, bool]] = []
        for index, fields in enumerate(decoded, start=1):
            entries.append(
                (self._new_proxy(fields, f" at proxy {index}"), fields.get("enabled", True))
            )
        done: list[Proxy] = []
        async with self.lock:
            for proxy, enabled in entries:
                try:
                    done.append(await self._add_or_replace(proxy, enabled))
                except ApiError as error:
                    raise PopulateError(error, done) from None
        return done

    async def _add_or_replace(self, proxy: Proxy, enabled: bool) -> Proxy:
        """Go's ``AddOrReplace``: an unchanged proxy stays; a changed one is stopped and the
        new one started. If the new one cannot start, the old one stays, stopped."""
        existing = self.proxies.get(proxy.name)
        if existing is not None:
            if not await existing.differs(proxy.listen, proxy.upstream):
                return existing
            existing.stop()
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
