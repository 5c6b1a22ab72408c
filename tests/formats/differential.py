"""The differential harness: generated streams read by the plugin and by the official clients.

Each transcript from ``streamgen`` (hand-written shapes) and ``typedgen`` (events built from
the SDKs' own typed models; ``--generator`` picks one, both by default) is read by the plugin
(``aread_stream``, with the protocol's format and with ``format="auto"``, then judged as the
product judges a stream: ``client=auto``, the installed official client's conclusion ruled on
by ``pytest_streamguard.judge``; with ``--client none``, the reader alone) and by the
protocol's official Python client (``oracles.py``), both over httpx from one transport that
serves the transcript's exact bytes (gzip-encoded when drawn so; the connection reset or cut in
its chunked body when drawn so): the readers run the same code as against a server, without
the sockets. A sample is also served over loopback by a real socket server, and through the
embedded Toxiproxy.

The two agree when the plugin's ``completed`` equals "the client read to its end without
raising and produced output", and the text of every kind the plugin counts equals the
client's. Where they differ on purpose, :data:`DIVERGENCES` names the reason (the table in
docs/protocols.md: the rules where the plugin is stricter than the client); the reader alone
also differs by :data:`READER_DIVERGENCES` (where the judge defers to the client); anything
else is an undocumented disagreement.

    python tests/formats/differential.py --n 1000 --seed 1 [--client none] [--generator typed]

prints one line per undocumented disagreement (with its seed and transcript, to replay it),
and as its last line ``streams=<n> disagreements=<k> undocumented=<u>``; exit status 1 when
``undocumented`` is not 0, 2 when a client is not installed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import importlib.util
import socket
import ssl
import struct
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from streamgen import PROTOCOLS, Transcript, generate

from pytest_streamguard.common.tls import tls_context

GENERATORS = ("streamgen", "typed")
"""``streamgen``: the hand-written shapes of ``streamgen.py``; ``typed``: events built from the
SDKs' own typed models (``typedgen.py``)."""

KINDS = ("text", "reasoning", "tool", "refusal")
CRASHED = "the reader crashed"

CLIENT_PACKAGES = {
    "openai": ("openai", "openai"),
    "openai-responses": ("openai", "openai"),
    "anthropic": ("anthropic", "anthropic"),
    "gemini": ("google.genai", "google-genai"),
    "ollama": ("ollama", "ollama"),
    "tgi": ("huggingface_hub", "huggingface_hub"),
}
"""The official client of each protocol: (module, the PyPI package to install)."""


def missing_clients(protocols: tuple[str, ...]) -> dict[str, str]:
    """``{protocol: package to install}`` for each protocol whose client is not installed."""
    missing = {}
    for protocol in protocols:
        module, package = CLIENT_PACKAGES[protocol]
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            missing[protocol] = package
    return missing


# --- serving the transcript's bytes --------------------------------------------------------


def _end(transcript: Transcript, mod: ModuleType) -> None:
    """Raise the transcript's ending, as ``mod`` (httpx or httpx2) raises it."""
    if transcript.ending == "reset":
        reset = ConnectionResetError(104, "Connection reset by peer")
        raise mod.ReadError("connection reset") from reset
    if transcript.ending == "chunked-cut":
        raise mod.RemoteProtocolError(
            "peer closed connection without sending complete message body"
        )


def _headers(transcript: Transcript) -> dict[str, str]:
    headers = {"content-type": transcript.content_type}
    if transcript.gzip:
        headers["content-encoding"] = "gzip"
    return headers


class ReplayTransport:
    """Answers ``/t/<key>/...`` with transcript ``key``'s bytes (a 404 for an unknown key),
    as a transport of httpx or of httpx2 (the anthropic client's fork of it)."""

    def __init__(self) -> None:
        self.transcripts: dict[str, Transcript] = {}
        self._made: dict[str, Any] = {}

    def find(self, path: str) -> Transcript | None:
        parts = path.split("/")
        return self.transcripts.get(parts[2]) if len(parts) > 2 else None

    def client(self, mod: ModuleType) -> Any:
        """A new ``mod.Client`` over this transport."""
        return mod.Client(transport=self.of(mod), timeout=10.0)

    def of(self, mod: ModuleType) -> Any:
        """This transport as one of ``mod`` (made once per module)."""
        if mod.__name__ in self._made:
            return self._made[mod.__name__]
        replay = self

        class Body(mod.SyncByteStream, mod.AsyncByteStream):  # type: ignore[misc,name-defined]
            def __init__(self, transcript: Transcript) -> None:
                self.transcript = transcript

            def __iter__(self) -> Iterator[bytes]:
                yield from self.transcript.wire_pieces()
                _end(self.transcript, mod)

            async def __aiter__(self) -> AsyncIterator[bytes]:
                for piece in self.transcript.wire_pieces():
                    yield piece
                _end(self.transcript, mod)

        class Transport(mod.BaseTransport, mod.AsyncBaseTransport):  # type: ignore[misc,name-defined]
            def _answer(self, request: Any) -> Any:
                transcript = replay.find(request.url.path)
                if transcript is None:
                    return mod.Response(404, text=f"no transcript at {request.url.path}")
                return mod.Response(200, headers=_headers(transcript), stream=Body(transcript))

            def handle_request(self, request: Any) -> Any:
                request.read()
                return self._answer(request)

            async def handle_async_request(self, request: Any) -> Any:
                await request.aread()
                return self._answer(request)

        self._made[mod.__name__] = Transport()
        return self._made[mod.__name__]


class SocketServer:
    """A loopback server that writes a transcript's exact bytes (chunked, gzip when drawn) and
    then closes the connection, resets it, or stops in the middle of its chunked body."""

    def __init__(self, transport: ReplayTransport) -> None:
        self.transport = transport
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        # OSError: the reader stopped at the stream's end and closed its side.
        with conn, contextlib.suppress(OSError):
            self._answer(conn)

    def _answer(self, conn: socket.socket) -> None:
        # Each piece goes out as its own write at once (no Nagle wait for the reader's ACK).
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        head = b""
        while b"\r\n\r\n" not in head:
            data = conn.recv(65536)
            if not data:
                return
            head += data
        head, _, body = head.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(body) < length:  # read the whole request: unread bytes would make close a reset
            data = conn.recv(65536)
            if not data:
                return
            body += data
        path = head.split(b"\r\n", 1)[0].decode().split(" ")[1]
        transcript = self.transport.find(path)
        if transcript is None:
            conn.sendall(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            return
        headers = "".join(f"{k}: {v}\r\n" for k, v in _headers(transcript).items())
        conn.sendall(
            b"HTTP/1.1 200 OK\r\n"
            + headers.encode()
            + b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        )
        for piece in transcript.wire_pieces():
            conn.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        if transcript.ending == "reset":
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif transcript.ending == "close":
            conn.sendall(b"0\r\n\r\n")
        # chunked-cut: close without the last chunk

    def close(self) -> None:
        self._stop = True
        # A shutdown wakes the accept() that a close from this thread would leave blocked.
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(5)


# --- reading -------------------------------------------------------------------------------


@dataclass
class Verdict:
    """What one reader concluded about one stream."""

    completed: bool
    parts: dict[str, str]
    why: str = ""
    reason: str | None = None
    """Why generation ended, as this reader saw it (``trace.end_reason``; the client's own)."""


@dataclass
class Outcome:
    """One stream, one way of reading it by the plugin, and the client's reading."""

    transcript: Transcript
    how: str
    ours: Verdict
    theirs: Verdict
    divergence: str | None = None

    @property
    def agree(self) -> bool:
        """Same ``completed``; the same text of every kind and the same end reason unless the
        client raised (what it had assembled before its exception is not its answer). A reader
        that crashed (the plugin's or the oracle's) never agrees."""
        if CRASHED in self.ours.why or CRASHED in self.theirs.why:
            return False
        if self.ours.completed != self.theirs.completed:
            return False
        return self.theirs.why != "no failure" or (
            self.ours.parts == self.theirs.parts and self.ours.reason == self.theirs.reason
        )

    def describe(self) -> str:
        t = self.transcript
        return (
            f"[{t.protocol} #{t.index} read {self.how}] plugin completed={self.ours.completed} "
            f"({self.ours.why}) parts={self.ours.parts} reason={self.ours.reason}; client "
            f"completed={self.theirs.completed} ({self.theirs.why}) parts={self.theirs.parts} "
            f"reason={self.theirs.reason}\n"
            f"  replay: {t.replay()}"
        )


def client_verdict(transcript: Transcript, base: str, transport: ReplayTransport | None) -> Verdict:
    """The official client's reading of ``transcript`` served at ``base``."""
    import oracles
    from format_cases import Case

    case = Case(transcript.protocol, transcript.suffix)
    url = base + transcript.suffix if transcript.protocol == "tgi" else base
    if transcript.protocol == "tgi":
        got = _read_tgi(url, transport)
    else:
        http = _network_client if transport is None else transport.client
        got = oracles.ORACLES[transcript.protocol].read(base, case, http)
    parts = {kind: got.of(kind) for kind in KINDS}
    failed = got.failed or got.unfinished
    return Verdict(failed is None and got.produced, parts, failed or "no failure", got.reason)


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    return ssl.create_default_context()


def _network_client(mod: ModuleType) -> Any:
    """A client of ``mod`` for a read over the network, sharing one SSL context (each client
    of its own would load the CA bundle again: most of a loopback read's time)."""
    return mod.Client(verify=_ssl_context(), timeout=10.0)


def _read_tgi(url: str, transport: ReplayTransport | None) -> Any:
    import huggingface_hub
    import oracles
    from format_cases import Case

    if transport is not None:
        huggingface_hub.set_client_factory(lambda: transport.client(httpx))
    else:
        huggingface_hub.set_client_factory(lambda: _network_client(httpx))
    try:
        return oracles.read_tgi(url, Case("tgi", ""))
    finally:
        huggingface_hub.close_session()
        huggingface_hub.set_client_factory(httpx.Client)


async def plugin_verdict(
    url: str, fmt: str, client: httpx.AsyncClient | None, judge: str = "auto"
) -> Verdict:
    """The plugin's verdict on the stream at ``url`` with ``format=fmt``: read, then judged by
    the client ``judge`` names, as ``stream(client=judge)`` does (``none``: the reader alone)."""
    from pytest_streamguard.judge import judge_trace
    from pytest_streamguard.stream.client import StreamRecorder, aread_stream
    from pytest_streamguard.stream.request import StreamRequest

    request = StreamRequest("POST", url, json_body={"stream": True}, format=fmt)
    trace = await aread_stream(StreamRecorder(request, "fuzz"), client)
    judge_trace(trace, judge)
    parts = {kind: trace.text_of(kind) for kind in KINDS}
    why = f"{trace.error_kind}: {trace.error}" if trace.error else "completed"
    return Verdict(trace.completed, parts, why, trace.end_reason)


# --- what differs on purpose ---------------------------------------------------------------

Rule = Callable[[Outcome], bool]


def _notes(o: Outcome) -> set[str]:
    return {note.split("=")[0] for note in o.transcript.notes} | set(o.transcript.notes)


_SPLITLINES_ONLY = ("\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e")


def _client_failed(o: Outcome) -> bool:
    return o.theirs.why != "no failure"


DIVERGENCES: dict[str, Rule] = {
    # A clean close before the protocol's end: no client raises, the plugin says truncated.
    "clean-cut": lambda o: (
        o.ours.why.startswith("truncated")
        and not _client_failed(o)
        and o.ours.parts == o.theirs.parts
    ),
    # format="auto" on a Gemini or TGI body whose only event ends without its blank line:
    # google-genai and huggingface_hub read it (and so do format="gemini" and "tgi"), but no
    # whole event arrived to recognise the format by, so no client judges it.
    "last-event-unterminated": lambda o: (
        o.transcript.protocol in ("gemini", "tgi")
        and not o.transcript.body.endswith((b"\n\n", b"\r\r", b"\r\n\r\n"))
        and o.how.endswith("format=auto")
        and o.ours.why.startswith("truncated")
        and not _client_failed(o)
    ),
    # response.incomplete (max_output_tokens, content filter), or [DONE] without
    # response.completed: plain iteration of create(stream=True) (the default judge) reads the
    # answer to its end, as a chat stream's finish_reason "length"; the openai stream helper
    # raises for want of response.completed.
    "responses-incomplete": lambda o: (
        o.transcript.protocol == "openai-responses"
        and o.ours.completed
        and "response.completed" in o.theirs.why
    ),
}
"""Each deliberate difference of the plugin's verdict (a stream judged by its client, as
``client=auto`` judges it) from the client's: the rules where the plugin is stricter
(docs/protocols.md, "Where the plugin differs from the official clients")."""

READER_DIVERGENCES: dict[str, Rule] = {
    # A raw U+2028, U+2029 (or another character str.splitlines() ends a line at) inside a
    # JSON string: the clients that split lines with str.splitlines() cut the event in two
    # and fail to parse it; the event-stream and NDJSON rules end lines only at CR and LF.
    "unicode-line-separator": lambda o: (
        _client_failed(o)
        and any(sep in o.transcript.body.decode("utf-8", "replace") for sep in _SPLITLINES_ONLY)
        and ("JSONDecodeError" in o.theirs.why or "Failed to parse" in o.theirs.why)
    ),
    # Bytes that are not UTF-8 inside an event's JSON string: the clients built on one SSE
    # decoder (openai, anthropic, groq) decode each line strictly and raise; the reader
    # replaces them, as httpx's line iterator (the other clients') does.
    "invalid-utf8": lambda o: _client_failed(o) and "UnicodeDecodeError" in o.theirs.why,
    # A byte-order mark: WHATWG strips it; the clients take it into the first field's name
    # and lose the first event (or, google-genai, raise).
    "bom": lambda o: "bom" in _notes(o),
    # Comments, retry:, id: and event: lines, a line of plain text: the google-genai client
    # parses every line that is not "data: " as raw JSON and raises; WHATWG ignores them.
    "gemini-non-data-lines": lambda o: (
        o.transcript.protocol == "gemini"
        and "Failed to parse response as JSON. Raw response: " in o.theirs.why
        and not o.theirs.why.split("Raw response: ", 1)[1].startswith("{")
    ),
    # An event without data (a retry: field alone; any blank line once an id: field was seen,
    # as after a comment): the openai client dispatches it with empty data and raises
    # JSONDecodeError; WHATWG dispatches no event without data.
    "openai-dataless-event": lambda o: (
        o.transcript.protocol.startswith("openai")
        and bool({"retry", "id"} & _notes(o))
        and "Expecting value: line 1 column 1 (char 0)" in o.theirs.why
    ),
    # A Gemini body cut inside an event's JSON after the answer's end: google-genai raises on
    # the cut JSON; the reader drops the unfinished event and the answer is whole.
    "cut-json-after-end": lambda o: (
        o.transcript.protocol in ("gemini", "tgi")
        and not o.transcript.body.endswith((b"\n\n", b"\r\r", b"\r\n\r\n"))
        and o.ours.completed
        and "Failed to parse response as JSON. Raw" in o.theirs.why
    ),
    # An error after the protocol's final event (TGI's generated_text, the Responses API's
    # response.completed): the reader stops at the end; huggingface_hub and the openai client
    # read on and raise.
    "error-after-end": lambda o: (
        o.ours.completed
        and _client_failed(o)
        and o.transcript.protocol in ("tgi", "openai-responses")
        and bool({"error", "error-as-data", "plain-text-error", "raw-json-error"} & _notes(o))
    ),
    # Tool input that is not JSON (an input_json_delta's partial_json): the anthropic client
    # parses each block's input as it grows and raises; the reader counts the text it streamed.
    "anthropic-tool-input-not-json": lambda o: (
        o.transcript.protocol == "anthropic"
        and o.ours.completed
        and "Unable to parse tool parameter JSON" in o.theirs.why
    ),
    # images in an answer's message: ollama's ChatResponse validates each as an Image object and
    # raises on the base64 string its own serialiser writes; the reader ignores the field.
    "ollama-answer-images": lambda o: (
        o.transcript.protocol == "ollama"
        and o.ours.completed
        and "ValidationError" in o.theirs.why
        and "instance of Image" in o.theirs.why
    ),
}
"""Where the plugin's reader alone (``client=none``, or a format whose client is not installed)
also differs from the client: each is more lenient than the client, so the judge defers to the
client there (docs/protocols.md, "The reader alone")."""


def classify(outcome: Outcome, judge: str = "auto") -> None:
    """Name the documented divergence that explains a disagreement (None: undocumented): one of
    :data:`DIVERGENCES`, or with the reader alone (``judge`` none) :data:`READER_DIVERGENCES`."""
    if outcome.agree or CRASHED in outcome.ours.why or CRASHED in outcome.theirs.why:
        return
    rules = DIVERGENCES if judge != "none" else {**DIVERGENCES, **READER_DIVERGENCES}
    for name, rule in rules.items():
        if rule(outcome):
            outcome.divergence = name
            return


# --- running -------------------------------------------------------------------------------


@dataclass
class Tally:
    """Counts of one run."""

    judge: str = "auto"
    streams: int = 0
    disagreements: int = 0
    undocumented: list[Outcome] = field(default_factory=list)
    by_divergence: Counter[str] = field(default_factory=Counter)

    def add(self, outcome: Outcome) -> None:
        classify(outcome, self.judge)
        if outcome.agree:
            return
        self.disagreements += 1
        if outcome.divergence is None:
            self.undocumented.append(outcome)
        else:
            self.by_divergence[outcome.divergence] += 1

    def merge(self, other: Tally) -> None:
        """Count ``other``'s streams into this tally too."""
        self.streams += other.streams
        self.disagreements += other.disagreements
        self.undocumented += other.undocumented
        self.by_divergence.update(other.by_divergence)

    def line(self) -> str:
        return (
            f"streams={self.streams} disagreements={self.disagreements} "
            f"undocumented={len(self.undocumented)}"
        )


class GeneratorFailure(RuntimeError):
    """The generator failed on one stream; the message says how to replay it."""


def _generate(protocol: str, seed: int, index: int, generator: str) -> Transcript:
    make, name = generate, "streamgen.generate"
    if generator != "streamgen":
        # Imported on first use: its SDKs and polyfactory cost every xdist worker at collection.
        from typedgen import generate_typed

        make, name = generate_typed, "typedgen.generate_typed"
    try:
        return make(protocol, seed, index)
    except Exception as exc:
        raise GeneratorFailure(
            f"the generator failed on protocol={protocol} seed={seed} index={index} "
            f"(replay: {name}({protocol!r}, {seed}, {index})): {exc!r}"
        ) from exc


HELPERS = {"anthropic": "anthropic.stream"}
"""The judges (``client=``) that call the same stream helper as the oracles of these protocols
(``oracles.py``): the default iterates ``create(stream=True)``. The Responses API's oracle
iterates it too (and requires ``response.completed``, as the helper does, without its other
checks): the default judges it, and ``responses-incomplete`` is the documented difference."""


def run(
    protocols: tuple[str, ...],
    n: int,
    seed: int,
    *,
    served: int = 0,
    proxied: int = 0,
    toxiproxy_url: str | None = None,
    judge: str = "auto",
    generator: str = "streamgen",
) -> Tally:
    """Read ``n`` streams per protocol from ``generator`` (one of :data:`GENERATORS`)
    in-process; ``served`` of them each also over a loopback socket, and ``proxied`` through
    the Toxiproxy at ``toxiproxy_url``; the plugin's verdict judged by the client ``judge``
    names (``none``: the reader alone)."""
    tally = Tally(judge)
    transport = ReplayTransport()
    server = SocketServer(transport) if served or proxied else None
    proxy_port = None
    if proxied and server is not None and toxiproxy_url is not None:
        proxy_port = _make_proxy(toxiproxy_url, server.port)
    try:
        for protocol in protocols:
            transcripts = [_generate(protocol, seed, i, generator) for i in range(n)]
            for t in transcripts:
                key = f"{protocol}-{t.index}"
                transport.transcripts[key] = t
            tally.streams += len(transcripts)
            ways: list[tuple[str, str, int]] = [("in-process", "http://replay.invalid", n)]
            if server is not None:
                ways.append(("socket", f"http://127.0.0.1:{server.port}", served))
            if proxy_port is not None:
                ways.append(("toxiproxy", f"http://127.0.0.1:{proxy_port}", proxied))
            for way, origin, count in ways:
                local = way == "in-process"
                for t in transcripts[:count]:
                    base = f"{origin}/t/{protocol}-{t.index}"
                    theirs = _safely(client_verdict, t, base, transport if local else None)
                    # The oracles of these call the stream helpers: so does the judge then.
                    named = HELPERS.get(protocol, judge) if judge == "auto" else judge
                    for fmt in (protocol, "auto"):
                        ours = _safely(_read_plugin, base + t.suffix, fmt, transport, local, named)
                        tally.add(Outcome(t, f"{way} format={fmt}", ours, theirs))
            transport.transcripts.clear()
    finally:
        if server is not None:
            server.close()
    return tally


def _safely(read: Callable[..., Verdict], *args: Any) -> Verdict:
    """``read(*args)``, or, when the reader itself crashed, a verdict that says so (an
    undocumented disagreement, printed with its transcript)."""
    try:
        return read(*args)
    except Exception as exc:
        return Verdict(False, {}, f"{CRASHED}: {exc!r}")


def _read_plugin(
    url: str, fmt: str, transport: ReplayTransport, local: bool, judge: str
) -> Verdict:
    return asyncio.run(_plugin(url, fmt, transport, local, judge))


async def _plugin(
    url: str, fmt: str, transport: ReplayTransport, local: bool, judge: str
) -> Verdict:
    if not local:
        return await plugin_verdict(url, fmt, None, judge)
    async with httpx.AsyncClient(transport=transport.of(httpx)) as client:
        return await plugin_verdict(url, fmt, client, judge)


def _make_proxy(toxiproxy_url: str, upstream_port: int) -> int:
    name = f"verdict-fuzz-{upstream_port}"
    with httpx.Client(base_url=toxiproxy_url, timeout=10, verify=tls_context()) as api:
        api.delete(f"/proxies/{name}")
        answer = api.post(
            "/proxies",
            json={"name": name, "listen": "127.0.0.1:0", "upstream": f"127.0.0.1:{upstream_port}"},
        )
        answer.raise_for_status()
        return int(answer.json()["listen"].rsplit(":", 1)[1])


def main(argv: list[str] | None = None) -> int:
    """The ``make verdict-fuzz`` command line."""
    parser = argparse.ArgumentParser(prog="verdict-fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200, help="streams per protocol")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--protocols", default=",".join(PROTOCOLS))
    parser.add_argument("--served", type=int, default=20, help="per protocol, over a socket")
    parser.add_argument("--proxied", type=int, default=10, help="per protocol, via Toxiproxy")
    parser.add_argument("--show", type=int, default=20, help="undocumented ones to print")
    parser.add_argument(
        "--generator",
        choices=(*GENERATORS, "both"),
        default="both",
        help="streamgen.py's hand-written shapes, typedgen.py's SDK typed models, or both",
    )
    parser.add_argument(
        "--client",
        choices=("auto", "none"),
        default="auto",
        help="the plugin's verdict judged by the official client (auto), or the reader alone",
    )
    args = parser.parse_args(argv)
    protocols = tuple(p for p in args.protocols.split(",") if p)
    unknown = [p for p in protocols if p not in PROTOCOLS]
    if unknown:
        parser.error(f"unknown protocol {', '.join(unknown)}: expected {', '.join(PROTOCOLS)}")
    missing = missing_clients(protocols)
    for protocol, package in missing.items():
        print(f"{protocol}: its official client is not installed: pip install {package}")
    if missing:
        print("streams=0 disagreements=0 undocumented=0 (clients missing: see above)")
        return 2
    started = time.perf_counter()
    toxiproxy = None
    if args.proxied:
        from pytest_streamguard.faults.toxiproxy_client import ToxiproxyServer

        toxiproxy = ToxiproxyServer.embedded(startup_timeout=30.0)
    generators = GENERATORS if args.generator == "both" else (args.generator,)
    tally = Tally(args.client)
    try:
        for generator in generators:
            one = run(
                protocols,
                args.n,
                args.seed,
                served=args.served,
                proxied=args.proxied,
                toxiproxy_url=toxiproxy.url if toxiproxy else None,
                judge=args.client,
                generator=generator,
            )
            print(f"generator={generator} {one.line()}")
            tally.merge(one)
    except GeneratorFailure as exc:
        print(exc)
        print("streams=0 disagreements=0 undocumented=0 (the generator failed: see above)")
        return 1
    finally:
        if toxiproxy is not None:
            toxiproxy.stop()
    for outcome in tally.undocumented[: args.show]:
        print(outcome.describe())
    for name, count in sorted(tally.by_divergence.items()):
        print(f"documented divergence {name}: {count}")
    print(
        f"seed={args.seed} n={args.n} client={args.client} generator={args.generator} "
        f"seconds={time.perf_counter() - started:.1f}"
    )
    print(tally.line())
    return 1 if tally.undocumented else 0


if __name__ == "__main__":
    sys.exit(main())
