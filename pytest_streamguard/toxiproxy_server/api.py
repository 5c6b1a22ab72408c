"""The HTTP API, route for route and status for status as Toxiproxy 2.12 answers.

Routing copies gorilla/mux as the real server uses it: an unknown path is Go's plain
``404 page not found``, a known path with another method is an empty 405, and only matched
routes pass the middleware (request id header, the ``Mozilla/`` user-agent block).
"""

from __future__ import annotations

import base64
import os
import re
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from .collection import Collection, PopulateError
from .decode import go_json, parse_body
from .errors import TOXIC_NOT_FOUND, ApiError, invalid_input
from .logs import log
from .metrics import CONTENT_TYPE, Metrics
from .toxics import new_toxic

VERSION: Final = "2.12.0"
MAX_BODY: Final = 1024 * 1024

Handler = Callable[["Api", Request, dict[str, str]], Awaitable[Response]]

_TEXT: Final = {"content-type": "text/plain; charset=utf-8", "x-content-type-options": "nosniff"}


def _json(data: object, status: int = 200) -> Response:
    return Response(go_json(data), status, {"content-type": "application/json"})


def error_response(error: ApiError) -> Response:
    """Go's ``http.Error`` with the JSON error: text/plain, nosniff, trailing newline."""
    body = go_json({"error": error.message, "status": error.status})
    return Response(body + "\n", error.status, _TEXT)


def clean_path(path: str) -> str:
    """gorilla/mux's ``cleanPath``: Go's ``path.Clean`` of ``/`` + path (repeated slashes,
    ``.`` and ``..`` resolved), keeping a trailing slash."""
    parts: list[str] = []
    for part in path.split("/"):
        if part == "..":
            if parts:
                parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    clean = "/" + "/".join(parts)
    if path.endswith("/") and clean != "/":
        clean += "/"
    return clean


def _request_id() -> str:
    # The shape of zerolog's xid ids: 12 random bytes in lowercase base32hex.
    return base64.b32hexencode(os.urandom(12)).decode("ascii").rstrip("=").lower()


async def _body(request: Request) -> Any:
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise invalid_input(f"request body is over {MAX_BODY} bytes; send at most 1 MiB")
        chunks.append(chunk)
    return parse_body(b"".join(chunks))


class Api:
    """The ASGI application serving Toxiproxy's routes over a :class:`Collection`."""

    def __init__(self, collection: Collection, metrics: Metrics) -> None:
        self.collection = collection
        self.metrics = metrics
        self.routes: list[tuple[re.Pattern[str], dict[str, Handler]]] = [
            (re.compile(r"/reset"), {"POST": Api.reset}),
            (re.compile(r"/proxies"), {"GET": Api.proxy_index, "POST": Api.proxy_create}),
            (re.compile(r"/populate"), {"POST": Api.populate}),
            (
                re.compile(r"/proxies/(?P<proxy>[^/]+)"),
                {
                    "GET": Api.proxy_show,
                    "POST": Api.proxy_update,
                    "PATCH": Api.proxy_update,
                    "DELETE": Api.proxy_delete,
                },
            ),
            (
                re.compile(r"/proxies/(?P<proxy>[^/]+)/toxics"),
                {"GET": Api.toxic_index, "POST": Api.toxic_create},
            ),
            (
                re.compile(r"/proxies/(?P<proxy>[^/]+)/toxics/(?P<toxic>[^/]+)"),
                {
                    "GET": Api.toxic_show,
                    "POST": Api.toxic_update,
                    "PATCH": Api.toxic_update,
                    "DELETE": Api.toxic_delete,
                },
            ),
            (re.compile(r"/version"), {"GET": Api.version}),
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Route one request."""
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        response = await self._dispatch(request)
        await response(scope, receive, send)

    async def _dispatch(self, request: Request) -> Response:
        path = request.url.path
        method = request.method
        clean = clean_path(path)
        if clean != path:
            # gorilla/mux answers a path that is not clean with a redirect to the clean one.
            query = f"?{request.url.query}" if request.url.query else ""
            # Re-escaped as Go's url.String() does (a header value is ASCII).
            location = urllib.parse.quote(clean, safe="/!$&'()*+,;=:@~") + query
            return Response(b"", 301, {"location": location})
        if path == "/metrics":
            handler: Handler = Api.metrics_text
            params: dict[str, str] = {}
        else:
            matched = [(m, methods) for p, methods in self.routes if (m := p.fullmatch(path))]
            if not matched:
                return Response("404 page not found\n", 404, _TEXT)
            found = [(m, methods[method]) for m, methods in matched if method in methods]
            if not found:
                return Response(b"", 405)
            match, handler = found[0]
            params = match.groupdict()
        request_id = _request_id()
        if request.headers.get("user-agent", "").startswith("Mozilla/"):
            response = Response("User agent not allowed\n", 403, _TEXT)
        else:
            try:
                response = await handler(self, request, params)
            except ApiError as error:
                response = error_response(error)
        response.headers["X-Toxiproxy-Request-Id"] = request_id
        log("debug", "", method=method, url=path, status=response.status_code)
        return response

    async def reset(self, request: Request, params: dict[str, str]) -> Response:
        """``POST /reset``."""
        await self.collection.reset()
        return Response(status_code=204)

    async def proxy_index(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /proxies``: an object keyed by proxy name, sorted as Go writes a map."""
        proxies = sorted(self.collection.proxies.items())
        return _json({name: proxy.to_json() for name, proxy in proxies})

    async def proxy_create(self, request: Request, params: dict[str, str]) -> Response:
        """``POST /proxies``."""
        proxy = await self.collection.create(await _body(request))
        return _json(proxy.to_json(), 201)

    async def populate(self, request: Request, params: dict[str, str]) -> Response:
        """``POST /populate``; its errors are JSON with the proxies applied before the failure
        (null when none), no newline."""
        try:
            proxies = await self.collection.populate(await _body(request))
        except ApiError as error:
            data = {"error": error.message, "status": error.status, "proxies": None}
            return _json(data, error.status)
        except PopulateError as failed:
            cause = failed.error
            listed = [p.to_json() for p in failed.applied] or None
            data = {"error": cause.message, "status": cause.status, "proxies": listed}
            return _json(data, cause.status)
        return _json({"proxies": [p.to_json() for p in proxies] if proxies else None}, 201)

    async def proxy_show(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /proxies/{proxy}``."""
        return _json(self.collection.get(params["proxy"]).to_json())

    async def proxy_update(self, request: Request, params: dict[str, str]) -> Response:
        """``PATCH`` (or deprecated ``POST``) ``/proxies/{proxy}``."""
        proxy = self.collection.get(params["proxy"])
        if request.method == "POST":
            log("warn", "ProxyUpdate: HTTP method POST is depercated. Use HTTP PATCH instead.")
        proxy = await self.collection.update(proxy.name, await _body(request))
        return _json(proxy.to_json())

    async def proxy_delete(self, request: Request, params: dict[str, str]) -> Response:
        """``DELETE /proxies/{proxy}``."""
        await self.collection.delete(params["proxy"])
        return Response(status_code=204)

    async def toxic_index(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /proxies/{proxy}/toxics``: an array, upstream toxics first."""
        return _json(self.collection.get(params["proxy"]).toxic_array())

    async def toxic_create(self, request: Request, params: dict[str, str]) -> Response:
        """``POST /proxies/{proxy}/toxics``: answers 200, not 201, like the real server."""
        proxy = self.collection.get(params["proxy"])
        toxic = new_toxic(await _body(request), lambda name: proxy.find_toxic(name) is not None)
        proxy.add_toxic(toxic)
        return _json(toxic.to_json())

    async def toxic_show(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /proxies/{proxy}/toxics/{toxic}``."""
        toxic = self.collection.get(params["proxy"]).find_toxic(params["toxic"])
        if toxic is None:
            raise TOXIC_NOT_FOUND
        return _json(toxic.to_json())

    async def toxic_update(self, request: Request, params: dict[str, str]) -> Response:
        """``PATCH`` (or deprecated ``POST``) ``/proxies/{proxy}/toxics/{toxic}``."""
        proxy = self.collection.get(params["proxy"])
        if request.method == "POST":
            log("warn", "ToxicUpdate: HTTP method POST is depercated. Use HTTP PATCH instead.")
        if proxy.find_toxic(params["toxic"]) is None:
            raise TOXIC_NOT_FOUND
        toxic = proxy.update_toxic(params["toxic"], await _body(request))
        return _json(toxic.to_json())

    async def toxic_delete(self, request: Request, params: dict[str, str]) -> Response:
        """``DELETE /proxies/{proxy}/toxics/{toxic}``."""
        self.collection.get(params["proxy"]).remove_toxic(params["toxic"])
        return Response(status_code=204)

    async def version(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /version``: exactly ``{"version": "2.12.0"}`` and a newline."""
        body = f'{{"version": "{VERSION}"}}\n'
        return Response(body, 200, {"content-type": "application/json;charset=utf-8"})

    async def metrics_text(self, request: Request, params: dict[str, str]) -> Response:
        """``/metrics``: Prometheus text (served always here; see the README)."""
        return Response(self.metrics.render(), 200, {"content-type": CONTENT_TYPE})
