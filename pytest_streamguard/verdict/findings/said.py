"""``server_error``: what the servers said while a test's streams were open, in their own words.

Each stream's trace carries the lines every hop wrote while it was open (``trace.said``:
:class:`Said`, folded by :func:`heard` from a process's output or a followed log file). A
traceback is folded to its exception line, as printed, and the app's deepest own frame (the
last one not in site-packages or the standard library; for Node the first ``at`` frame outside
``node_modules`` and ``node:``; for Go the first frame outside the Go root and module cache). A
line is at error level (:func:`error_level`) in the formats servers write: Python logging
(``ERROR``, ``CRITICAL``), uvicorn (``ERROR:``), gunicorn (``[ERROR]``), nginx's error log
(``[error]``, ``[crit]``, ``[alert]``, ``[emerg]``), logfmt and JSON logs (``level=error``);
a Node error with ``at`` frames and a Go ``panic:`` are errors too.

An error written while streams were open is ``server_error`` at the hop that wrote it (lines
that differ only in their numbers, such as nginx's stamps and ports, are one); where a stream
it was written beside ended early (did not complete), it is that stream's likely cause, unless
it is the hop's word on the hop behind it (nginx's ``upstream ...`` lines, an HTTP client's
error in a gateway): that hop's own evidence, but the cause is behind it. A peer that went away
(``ConnectionResetError``, ``BrokenPipeError``) is no finding beside streams that completed, nor
on an inner hop whose connection the service in front closed first.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from pytest_streamguard.common.display import counted
from pytest_streamguard.verdict.findings.base import Finding

__all__ = ["LATE_S", "SAID_PER_HOP", "Said", "bounded", "error_level", "fold", "server_error"]

#: A line stamped up to this long after a stream's end still counts as written while it was
#: open: a server logs the exception as it closes the stream, and the plugin's reader stamps
#: the line when it reads it, which can be just after the client saw the end.
LATE_S = 0.25
#: At most this many folded lines per hop are kept on a stream (its errors first).
SAID_PER_HOP = 4

_ERROR_LINE = re.compile(
    r"(?:^|[\s\[(|:-])(?:ERROR|CRITICAL|FATAL)(?=[\]):\s|-]|$)"  # logging, uvicorn, gunicorn
    r"|\[(?:error|crit|alert|emerg)\]"  # nginx's error log
    r"|(?i:\blevel=\"?(?:error|fatal|panic)\b)"  # logfmt: Go's slog and logrus
    r"|(?i:\"level\":\s*\"(?:error|fatal|panic)\")"  # JSON logs: zap, zerolog
)
_PY_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')
# An exception's line (``KeyError: 6``, ``_queue.Empty``); not a log line's level word.
_PY_EXCEPTION = re.compile(
    r"^(?!(?:INFO|DEBUG|WARNING|WARN|ERROR|CRITICAL|FATAL|TRACE)\b)[A-Za-z_][\w.]*(?::(?:\s|$)|$)"
)
_PY_LIBRARY = re.compile(r"site-packages|dist-packages|<frozen|[/\\]lib[/\\]python\d")
_NODE_ERROR = re.compile(r"^(?:Uncaught )?[A-Z]\w*(?:Error|Exception)\b(?:\s*\[\w+\])?(?::|$)")
_NODE_LIBRARY = re.compile(r"node_modules|node:|\(internal/")
_GO_LIBRARY = re.compile(r"/go/pkg/mod/|/usr/local/go/src/|/usr/lib/go[\w.-]*/src/")
_CHAIN = ("During", "The ", "Traceback")  # the lines between a chain's tracebacks
_GUTTER = re.compile(r"^\s*(?:\|\s?)+|^\s*\+[-+]+.*$")  # an exception group's gutter


@dataclasses.dataclass(frozen=True)
class Said:
    """One thing a hop wrote: a line, or a traceback folded to its exception line (``text``)
    and its deepest own frame (``frame``); ``stamp_ns`` when its first line arrived."""

    hop: str
    stamp_ns: int
    text: str
    frame: str | None = None
    error: bool = False

    def describe(self) -> str:
        """``text`` with its frame, as a verdict shows it."""
        return self.text if self.frame is None else f"{self.text} (at {self.frame})"

    def timeline_text(self) -> str:
        """The line a stream's timeline shows, an error marked."""
        return f"{self.hop} said: {self.describe()}" + (f"  <-- {self.hop}'s error" * self.error)

    def to_dict(self) -> dict[str, Any]:
        """Builtin-typed form."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Said:
        """Inverse of :meth:`to_dict`."""
        return cls(**{f.name: raw[f.name] for f in dataclasses.fields(cls) if f.name in raw})


def error_level(line: str) -> bool:
    """Whether ``line`` is written at error level (see the module docstring)."""
    return _ERROR_LINE.search(line) is not None


def bounded(folded: Sequence[Said], keep: int = SAID_PER_HOP) -> list[Said]:
    """At most ``keep`` of one hop's ``folded`` lines: the first errors and the plugin's own
    notes (``streamguard: ...``: lines dropped, a log file rotated or vanished), then the last
    other lines, in time order."""
    first = [s for s in folded if s.error or s.text.startswith("streamguard:")][:keep]
    others = [s for s in folded if s not in first][::-1][: keep - len(first)]
    return sorted([*first, *others], key=lambda s: s.stamp_ns)


def fold(hop: str, lines: Sequence[tuple[int, str]]) -> list[Said]:
    """``lines`` (``(stamp_ns, text)``) that ``hop`` wrote, each traceback folded to one
    :class:`Said`, errors marked."""
    texts = [_GUTTER.sub("", text) for _, text in lines]
    out: list[Said] = []
    i = 0
    while i < len(lines):
        text = texts[i]
        if text.startswith("Traceback (most recent call last)"):
            end, said, frame = _python(texts, i)
        elif (
            _NODE_ERROR.match(text) and texts[i + 1 : i + 2] and texts[i + 1].startswith("    at ")
        ):
            end, said, frame = _node(texts, i)
        elif text.startswith("panic: ") or "http: panic serving" in text:
            end, said, frame = _go(texts, i)
        else:
            if text.strip():
                out.append(Said(hop, lines[i][0], text.strip(), None, error_level(text)))
            i += 1
            continue
        last = out[-1] if i and out else None
        if last and last.error and last.frame is None and last.stamp_ns == lines[i - 1][0]:
            out.pop()  # "ERROR: Exception in ASGI application": its traceback says more
        out.append(Said(hop, lines[i][0], said, frame, True))
        i = end
    return out


def _python(texts: list[str], start: int) -> tuple[int, str, str | None]:
    """A Python traceback from ``start``: where it ends, its first exception line (the root
    of a chain) and that exception's deepest own frame. Up to 3 lines that are no part of it
    (another thread's, such as a threaded server's access log at the same moment) are passed
    over."""
    frames: list[str] = []
    said: str | None = None
    first = 0  # how many frames the first exception's traceback has
    foreign = 0
    i = start + 1
    while i < len(texts):
        text = texts[i]
        if found := _PY_FRAME.match(text):
            frames.append(f"{_short(found['path'])}:{found['line']} in {found['func'].strip()}")
            path_ok = not _PY_LIBRARY.search(found["path"])
            frames[-1] = frames[-1] if path_ok else "\0" + frames[-1]
        elif text.startswith(("Traceback", "During handling", "The above exception")):
            pass
        elif text.startswith((" ", "\t")) or not text.strip():
            # A blank line ends the traceback unless a chained one follows.
            chained = texts[i + 1 : i + 2] and texts[i + 1].startswith(_CHAIN)
            if said is not None and not text.strip() and not chained:
                return i + 1, said, _own_frame(frames, first)
        elif said is None and _PY_EXCEPTION.match(text.strip()):
            said, first = text.strip(), len(frames)
        elif said is None:
            foreign += 1
            if foreign > 3:
                break
        elif not texts[i - 1].strip() or texts[i - 1].startswith((" ", "\t")):
            pass  # a chained exception's own line
        else:
            return i, said, _own_frame(frames, first)
        i += 1
    return i, said or texts[start].strip(), _own_frame(frames, first or len(frames))


def _own_frame(frames: list[str], first: int) -> str | None:
    """The deepest frame outside libraries (marked ``\0``) of the first exception's
    ``first`` frames, else of the whole chain's (the app's code that caught it), else the
    first exception's deepest frame."""
    for part in (frames[:first], frames):
        if own := [f for f in part if not f.startswith("\0")]:
            return own[-1]
    return frames[first - 1].lstrip("\0") if first else None


def _node(texts: list[str], start: int) -> tuple[int, str, str | None]:
    """A Node error: its line, and its first ``at`` frame outside libraries."""
    i = start + 1
    frames = []
    while i < len(texts) and texts[i].startswith("    at "):
        frames.append(texts[i].strip()[3:])
        i += 1
    own = [f for f in frames if not _NODE_LIBRARY.search(f)]
    return i, texts[start].strip(), (own or frames)[0]


def _go(texts: list[str], start: int) -> tuple[int, str, str | None]:
    """A Go panic: its line, and its first frame's file outside the Go root and modules."""
    i = start + 1
    files = []
    while i < len(texts) and not _ERROR_LINE.search(texts[i]):
        text = texts[i]
        if text.startswith("\t"):
            files.append(text.strip().split(" +0x")[0])
        elif text.strip() and not re.match(
            r"^(goroutine |created by |[\w./*()\[\]-]+\(.*\)$)", text
        ):
            break
        i += 1
    own = [f for f in files if not _GO_LIBRARY.search(f)]
    return i, texts[start].strip(), _short(own[0]) if own else None


def _short(path: str) -> str:
    """The last two parts of a path (``app/server.py``): enough to find it, short to show."""
    return "/".join(re.split(r"[/\\]", path)[-2:])


#: Exceptions that report the other side of a connection going away, not the server failing.
_PEER_GONE = ("ConnectionResetError", "BrokenPipeError", "ConnectionAbortedError")
#: A hop's words on the hop behind it failing: nginx's upstream lines, the errors of the HTTP
#: clients gateways use (httpx, aiohttp, requests, Node's http and undici, Go's ReverseProxy).
_ABOUT_UPSTREAM = re.compile(
    r"\bupstream\b|RemoteProtocolError|ServerDisconnected|ClientPayloadError|ClientConnectorError"
    r"|ChunkedEncodingError|IncompleteRead|\bProtocolError|ECONNRESET|ECONNREFUSED|socket hang up"
    r"|UND_ERR_SOCKET|proxy error|ReverseProxy"
)


def _gone(said: Said, traces: Sequence[object]) -> bool:
    """Whether ``said`` is a peer that went away beside ``traces``: on every one of them that
    ended early (none: all completed), the tap paired on ``said``'s hop says the service in
    front closed that hop first. The streams that completed say nothing of who left."""
    if not said.text.startswith(_PEER_GONE):
        return False
    early = [getattr(t, "stack", None) for t in traces if not getattr(t, "completed", True)]
    return all(s is not None and s.ended.get(said.hop) == "front" for s in early)


def server_error(traces: Sequence[object]) -> list[Finding]:
    """One ``server_error`` per hop and exception line said beside ``traces``; see the module
    docstring."""
    seen: dict[tuple[str, str], list[Said]] = {}
    beside: dict[tuple[str, str], dict[str, object]] = {}
    for trace in traces:
        for said in getattr(trace, "said", ()):
            if not said.error:
                continue
            key = (said.hop, re.sub(r"\d+", "#", said.text))
            if said not in seen.setdefault(key, []):
                seen[key].append(said)
            beside.setdefault(key, {})[str(getattr(trace, "name", ""))] = trace
    found = []
    for key, said in seen.items():
        hop, text = said[0].hop, said[0].text
        open_beside = {n: bool(getattr(t, "completed", True)) for n, t in beside[key].items()}
        early = [name for name, completed in open_beside.items() if not completed]
        if _gone(said[0], list(beside[key].values())):
            continue
        times = f"{len(said)} times" if len(said) > 1 else "once"
        evidence = (
            f"{said[0].describe()}, said {times} beside {counted(len(open_beside), 'stream')}"
        )
        evidence += f", {len(early)} of them ended early" if early else ""
        cause = f"{hop} raised {text}" + (f" at {said[0].frame}" if said[0].frame else "")
        found.append(
            Finding(
                "server_error",
                evidence,
                tuple(open_beside),
                {
                    "exception": text,
                    "frame": said[0].frame,
                    "stamps_ns": [s.stamp_ns for s in said],
                    "ended_early": len(early),
                },
                cause=cause if early and not _ABOUT_UPSTREAM.search(text) else "",
                hop=hop,
            )
        )
    # The earliest first: what a hop further in raised comes before the break it made in front.
    return sorted(found, key=lambda f: min(f.data["stamps_ns"]))
