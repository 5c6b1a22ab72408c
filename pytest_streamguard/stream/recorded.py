"""The response as it arrived, kept for a replay into a client after the stream (:class:`Recorded`).

The recorder keeps every body read it took, as the ``bytes`` object the transport returned (no
copy) with its arrival stamp, the status and headers, and how the body ended. A client judge
(:mod:`pytest_streamguard.judge`) replays exactly that into an official client. The body is kept
as the reader took it: decoded (``content-encoding`` undone by httpx), so a replay serves it
without that header.

:meth:`Recorded.save` writes one as a transcript (the body's bytes as they arrived in
``<name>.body``, the rest in ``<name>.json``: request, status, headers, each read's stamp and
size, ending) and :meth:`Recorded.load` reads it back, so a stream the reader and its client
disagreed on can be judged again from the file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

#: How a recorded body ended: ``close`` (it ended, or the reader stopped taking it), or the
#: connection's failure the reader met (as the trace's ``error_kind`` names them).
ENDINGS = ("close", "cut", "reset", "timeout", "network")


@dataclass
class Recorded:
    """One response as it arrived: ``status`` and ``headers`` (None and empty when no answer
    came), every body read as ``(stamp_ns, bytes)`` in order, and ``ending`` (one of
    :data:`ENDINGS`, with the reader's ``message`` for a failure). ``method``, ``url`` and
    ``json_body`` are the request's, ``format`` the stream's format (as the reader named or
    recognised it): a client judge calls the same API; ``allow_empty`` the request's (an
    answer without output is then a whole one, for the client too)."""

    method: str
    url: str
    json_body: Any = None
    format: str = "auto"
    status: int | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    reads: list[tuple[int, bytes]] = field(default_factory=list)
    ending: str = "close"
    message: str = ""
    allow_empty: bool = False

    def answered(self, status: int, headers: list[tuple[str, str]]) -> None:
        """Keep the response's status and headers."""
        self.status = status
        self.headers = headers

    def keep(self, data: bytes, stamp_ns: int) -> None:
        """Keep one body read (the object itself: the reader does not change it)."""
        self.reads.append((stamp_ns, data))

    def broke(self, kind: str, message: str) -> None:
        """The connection failed as ``kind`` (only the connection's failures are replayed; the
        first one wins)."""
        if kind in ENDINGS and self.ending == "close":
            self.ending = kind
            self.message = message

    @property
    def body(self) -> bytes:
        """Every byte of the body that arrived, joined."""
        return b"".join(data for _, data in self.reads)

    def save(self, path: Path) -> Path:
        """Write this response as a transcript: ``path`` (JSON) and its body beside it
        (``path`` with the suffix ``.body``); returns ``path``."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.with_suffix(".body").write_bytes(self.body)
        described = {f.name: getattr(self, f.name) for f in fields(self)}
        described["headers"] = [list(header) for header in self.headers]
        described["reads"] = [[stamp_ns, len(data)] for stamp_ns, data in self.reads]
        path.write_text(json.dumps(described, indent=1), encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: Path) -> Recorded:
        """A transcript :meth:`save` wrote, read back: the body split into its reads again."""
        raw = json.loads(path.read_text(encoding="utf-8"))
        body = path.with_suffix(".body").read_bytes()
        recorded = cls(
            raw["method"],
            raw["url"],
            raw["json_body"],
            raw["format"],
            raw["status"],
            [(name, value) for name, value in raw["headers"]],
            ending=raw["ending"],
            message=raw["message"],
            allow_empty=raw["allow_empty"],
        )
        at = 0
        for stamp_ns, size in raw["reads"]:
            recorded.keep(body[at : at + size], stamp_ns)
            at += size
        return recorded

    def objects(self, limit: int = 16) -> Iterator[dict[str, Any]]:
        """The first ``limit`` JSON objects the body carries (a server-sent event's data, or a
        JSON line), parsed as they are asked for: what a client judge tells the API that
        answered by, whatever the path."""
        found = 0
        for line in self.body.splitlines():
            line = line.removeprefix(b"data:").strip()
            if not line.startswith(b"{"):
                continue
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                yield value
                found += 1
                if found == limit:
                    return

    def asked(self, *keys: str) -> bool:
        """Whether the request's JSON body has any of ``keys``."""
        return isinstance(self.json_body, dict) and any(key in self.json_body for key in keys)

    @property
    def path(self) -> str:
        """The request URL's path (how a client judge tells one API of a vendor from
        another: ``/completions`` from ``/chat/completions``)."""
        rest = self.url.split("://", 1)[-1]
        path = "/" + rest.split("/", 1)[1] if "/" in rest else "/"
        return path.split("?", 1)[0]
