"""A seeded generator of stream transcripts for the differential harness (``differential.py``).

``generate(protocol, seed, index)`` builds one transcript from ``random.Random(f"{seed}:{protocol}:
{index}")``, so any stream is replayed from its seed, protocol and index alone. A transcript is
the exact bytes of a 200 answer's body (split into the pieces it is sent in), its content type
and encoding, and how the connection ends. What varies:

- contents: text, reasoning, tool calls (empty arguments, legacy ``function_call`` beside
  ``tool_calls``, parallel calls), audio transcripts, refusals, text only in start or done
  events, usage-only chunks, several choices or candidates, error objects (as data, as a named
  event, as raw JSON lines, as plain text), every finish and stop reason;
- framing: LF, CRLF, CR line ends; comments and pings between events; ``id:``/``retry:``
  fields; events with and without ``event:`` lines; a BOM; a last event without its blank line;
  gzip; the body split at random offsets;
- endings: the protocol's end, ``[DONE]`` with and without it, a clean close cut at a random
  byte offset, a reset.
"""

from __future__ import annotations

import gzip
import itertools
import json
import random
from dataclasses import dataclass, field
from typing import Any

PROTOCOLS = ("openai", "openai-responses", "anthropic", "gemini", "ollama", "tgi")

SUFFIXES = {
    "openai": "/chat/completions",
    "openai-responses": "/responses",
    "anthropic": "/v1/messages",
    "gemini": "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
    "ollama": "/api/chat",
    "tgi": "",
}

WORDS = ("Hel", "lo", " wor", "ld", "!", " é", "你好", " 🙂", "\\n", " a", "b", "\u2028")


@dataclass
class Transcript:
    """One generated stream: the body's pieces, how it is served, and how it was made."""

    protocol: str
    seed: int
    index: int
    pieces: list[bytes]
    content_type: str
    ending: str = "close"
    """``close``: a clean end of the body; ``reset``: the connection is reset after the
    pieces; ``chunked-cut``: the server closes in the middle of its chunked body."""
    gzip: bool = False
    notes: list[str] = field(default_factory=list)
    """What the generator chose (for a reader of a disagreement)."""
    generator: str = "streamgen"
    """Which generator made it: ``streamgen`` (this module) or ``typed`` (``typedgen.py``)."""

    @property
    def suffix(self) -> str:
        """The path the official client appends to its base URL."""
        return SUFFIXES[self.protocol]

    @property
    def body(self) -> bytes:
        """The decoded body, as the readers see it."""
        return b"".join(self.pieces)

    def wire_pieces(self) -> list[bytes]:
        """The pieces as sent: gzip-compressed (as one stream, cut at the same proportions)
        when ``gzip``."""
        if not self.gzip:
            return self.pieces
        packed = gzip.compress(self.body)
        total = max(len(self.body), 1)
        cuts, seen = [], 0
        for piece in self.pieces[:-1]:
            seen += len(piece)
            cuts.append(len(packed) * seen // total)
        bounds = [0, *cuts, len(packed)]
        return [packed[a:b] for a, b in itertools.pairwise(bounds) if b > a]

    def replay(self) -> str:
        """How to replay it, and its body."""
        head = "" if self.generator == "streamgen" else f"generator={self.generator} "
        head += f"protocol={self.protocol} seed={self.seed} index={self.index} "
        head += f"ending={self.ending} gzip={self.gzip} content_type={self.content_type}"
        return f"{head}\nchoices: {', '.join(self.notes)}\nbody: {self.body!r}"


def _j(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


class _Gen:
    """Shared draws of one transcript."""

    def __init__(self, protocol: str, seed: int, index: int) -> None:
        self.rng = random.Random(f"{seed}:{protocol}:{index}")
        self.notes: list[str] = []

    def chance(self, p: float, note: str) -> bool:
        if self.rng.random() < p:
            self.notes.append(note)
            return True
        return False

    def pick(self, options: Any, note: str) -> Any:
        value = self.rng.choice(list(options))
        self.notes.append(
            f"{note}={value!r}"
            if (isinstance(value, str) and "\r" in value) or "\n" in str(value)
            else f"{note}={value}"
        )
        return value

    def words(self, low: int = 1, high: int = 4) -> list[str]:
        return [self.rng.choice(WORDS) for _ in range(self.rng.randint(low, high))]


# Events of the logical stream: (event name or None, data string), or a raw line (plain text,
# a raw JSON object) for the error cases.
Event = tuple[str | None, str]


def _chat(g: _Gen) -> tuple[list[Event], bool]:
    """OpenAI chat chunks; returns (events, whether the stream may end with [DONE])."""
    n = 2 if g.chance(0.1, "n=2") else 1
    base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> Event:
        choice = {"index": index, "delta": delta, "finish_reason": finish}
        return (None, _j({**base, "choices": [choice]}))

    events: list[Event] = []
    for i in range(n):
        events.append(chunk(i, {"role": "assistant", "content": ""}))
    for i in range(n):
        kind = g.pick(
            ("text", "text", "reasoning", "tools", "tool-empty", "legacy", "audio", "refusal"),
            f"content{i}",
        )
        if kind == "reasoning":
            field = g.pick(("reasoning_content", "reasoning"), "field")
            events += [chunk(i, {field: w}) for w in g.words()]
            events += [chunk(i, {"content": w}) for w in g.words()]
        elif kind in ("tools", "tool-empty", "legacy"):
            calls = 2 if g.chance(0.3, "parallel") else 1
            for c in range(calls):
                start = {"index": c, "id": f"call_{c}", "type": "function"}
                start["function"] = {"name": f"f{c}", "arguments": ""}
                events.append(chunk(i, {"content": None, "tool_calls": [start]}))
                if kind == "tool-empty":
                    continue
                for piece in ['{"a"', ':"', *g.words(), '"}']:
                    call = {"index": c, "function": {"arguments": piece}}
                    delta: dict[str, Any] = {"tool_calls": [call]}
                    if kind == "legacy":
                        delta["function_call"] = {"arguments": piece}
                    events.append(chunk(i, delta))
        elif kind == "audio":
            events += [
                chunk(i, {"audio": {"id": "a1", "transcript": w, "data": "AAAA"}})
                for w in g.words()
            ]
        elif kind == "refusal":
            events += [chunk(i, {"refusal": w}) for w in g.words()]
        else:
            events += [chunk(i, {"content": w}) for w in g.words(1, 6)]
        if g.chance(0.15, "empty-content-chunk"):
            events.append(chunk(i, {"content": ""}))
    finish = g.chance(0.8, "finish")
    if finish:
        for i in range(n):
            reason = g.pick(
                ("stop", "length", "tool_calls", "content_filter", "function_call"), "reason"
            )
            events.append(chunk(i, {}, reason))
    if g.chance(0.2, "usage-chunk"):
        usage = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
        events.append((None, _j({**base, "choices": [], "usage": usage})))
    return events, True


def _responses(g: _Gen) -> tuple[list[Event], bool]:
    events: list[Event] = []

    def ev(kind: str, **more: Any) -> None:
        named = kind if g.rng.random() < 0.85 else None
        events.append((named, _j({"type": kind, "sequence_number": len(events), **more})))

    response = {"id": "r1", "object": "response", "status": "in_progress", "output": []}
    ev("response.created", response=response)
    kind = g.pick(("text", "text", "tools", "tool-empty", "refusal", "done-only"), "c")
    words = g.words()
    text = "".join(words)
    item = {"id": "i1", "type": "message", "role": "assistant", "status": "in_progress"}
    if kind in ("tools", "tool-empty"):
        call = {"id": "fc1", "type": "function_call", "call_id": "call1", "name": "f"}
        ev("response.output_item.added", output_index=0, item={**call, "arguments": ""})
        args = "" if kind == "tool-empty" else '{"a":"' + text.replace('"', "") + '"}'
        if args:
            ev("response.function_call_arguments.delta", item_id="fc1", output_index=0, delta=args)
        ev("response.function_call_arguments.done", item_id="fc1", output_index=0, arguments=args)
        done_item = {**call, "arguments": args, "status": "completed"}
    else:
        ev("response.output_item.added", output_index=0, item={**item, "content": []})
        delta_kind, done_kind, key, part_type = {
            "refusal": ("response.refusal.delta", "response.refusal.done", "refusal", "refusal"),
        }.get(
            kind, ("response.output_text.delta", "response.output_text.done", "text", "output_text")
        )
        ids = {"item_id": "i1", "output_index": 0, "content_index": 0}
        part: dict[str, Any] = {"type": part_type, key: ""}
        if part_type == "output_text":
            part["annotations"] = []
        ev("response.content_part.added", **ids, part=part)
        if kind != "done-only":
            for w in words:
                ev(delta_kind, **ids, delta=w)
        ev(done_kind, **ids, **{key: text})
        ev("response.content_part.done", **ids, part={**part, key: text})
        done_item = {**item, "status": "completed", "content": [{**part, key: text}]}
    ev("response.output_item.done", output_index=0, item=done_item)
    end = g.pick(("completed", "completed", "incomplete", "failed", "error", "none"), "end")
    final = {**response, "status": end, "output": [done_item]}
    if end in ("completed", "incomplete"):
        ev(f"response.{end}", response=final)
    elif end == "failed":
        ev("response.failed", response={**final, "error": {"code": "x", "message": "boom"}})
    elif end == "error":
        ev("error", code="x", message="boom", param=None)
    return events, True


def _anthropic(g: _Gen) -> tuple[list[Event], bool]:
    events: list[Event] = []
    named = not g.chance(0.05, "no-event-lines")

    def ev(kind: str, **more: Any) -> None:
        events.append((kind if named else None, _j({"type": kind, **more})))

    message = {"id": "m1", "type": "message", "role": "assistant", "model": "m", "content": []}
    message |= {"stop_reason": None, "stop_sequence": None}
    ev("message_start", message={**message, "usage": {"input_tokens": 1, "output_tokens": 1}})
    if g.chance(0.3, "ping"):
        ev("ping")
    blocks = g.rng.randint(1, 3)
    for b in range(blocks):
        kind = g.pick(("text", "text", "thinking", "tool", "tool-empty", "start-text"), f"b{b}")
        if kind in ("tool", "tool-empty"):
            block = {"type": "tool_use", "id": f"t{b}", "name": "f", "input": {}}
            ev("content_block_start", index=b, content_block=block)
            if kind == "tool":
                for piece in ['{"a"', ':"', *g.words(), '"}']:
                    delta = {"type": "input_json_delta", "partial_json": piece}
                    ev("content_block_delta", index=b, delta=delta)
        elif kind == "thinking":
            ev("content_block_start", index=b, content_block={"type": "thinking", "thinking": ""})
            for w in g.words():
                delta = {"type": "thinking_delta", "thinking": w}
                ev("content_block_delta", index=b, delta=delta)
            delta = {"type": "signature_delta", "signature": "sig"}
            ev("content_block_delta", index=b, delta=delta)
        else:
            start = "".join(g.words()) if kind == "start-text" else ""
            ev("content_block_start", index=b, content_block={"type": "text", "text": start})
            for w in g.words(0 if kind == "start-text" else 1, 4):
                ev("content_block_delta", index=b, delta={"type": "text_delta", "text": w})
        ev("content_block_stop", index=b)
        if g.chance(0.1, "ping"):
            ev("ping")
    reason = g.pick(
        ("end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal"), "stop"
    )
    ev("message_delta", delta={"stop_reason": reason}, usage={"output_tokens": 3})
    if g.chance(0.08, "error-event"):
        ev("error", error={"type": "overloaded_error", "message": "Overloaded"})
    if g.chance(0.85, "message_stop"):
        ev("message_stop")
    return events, False


def _gemini(g: _Gen) -> tuple[list[Event], bool]:
    events: list[Event] = []
    n = 2 if g.chance(0.1, "candidates=2") else 1

    def ev(obj: dict[str, Any]) -> None:
        events.append((None, _j(obj)))

    for i in range(n):
        kind = g.pick(("text", "text", "thought", "call", "call-empty"), f"c{i}")
        parts: list[dict[str, Any]] = []
        for w in g.words():
            if kind == "thought":
                parts.append({"text": w, "thought": True})
            parts.append({"text": w})
        if kind.startswith("call"):
            args = {} if kind == "call-empty" else {"a": "".join(g.words())}
            parts = [{"functionCall": {"name": "f", "args": args}}]
        for part in parts:
            cand = {"index": i, "content": {"role": "model", "parts": [part]}}
            ev({"candidates": [cand], "modelVersion": "g"})
    if g.chance(0.85, "finish"):
        for i in range(n):
            reason = g.pick(
                ("STOP", "MAX_TOKENS", "SAFETY", "RECITATION", "OTHER", "MALFORMED_FUNCTION_CALL"),
                "reason",
            )
            usage = {"promptTokenCount": 1, "candidatesTokenCount": 2, "totalTokenCount": 3}
            cand = {"index": i, "content": {"role": "model", "parts": []}, "finishReason": reason}
            ev({"candidates": [cand], "usageMetadata": usage})
    return events, False


def _ollama(g: _Gen) -> list[str]:
    lines: list[str] = []
    base = {"model": "m", "created_at": "2025-01-01T00:00:00Z"}
    kind = g.pick(("text", "text", "thinking", "tools", "tools-empty"), "c")
    if kind == "thinking":
        for w in g.words():
            lines.append(
                _j(
                    {
                        **base,
                        "message": {"role": "assistant", "content": "", "thinking": w},
                        "done": False,
                    }
                )
            )
    if kind.startswith("tools"):
        args = {} if kind == "tools-empty" else {"city": "".join(g.words())}
        call = {"function": {"name": "f", "arguments": args}}
        message = {"role": "assistant", "content": "", "tool_calls": [call]}
        lines.append(_j({**base, "message": message, "done": False}))
    else:
        for w in g.words():
            message = {"role": "assistant", "content": w}
            lines.append(_j({**base, "message": message, "done": False}))
    if g.chance(0.08, "error-line"):
        lines.append(_j({"error": "model crashed"}))
    if g.chance(0.85, "done"):
        reason = g.pick(("stop", "length", "load"), "done_reason")
        message = {"role": "assistant", "content": ""}
        lines.append(_j({**base, "message": message, "done": True, "done_reason": reason}))
    return lines


def _tgi(g: _Gen) -> tuple[list[Event], bool]:
    events: list[Event] = []
    words = g.words()
    for i, w in enumerate(words):
        token = {"id": i, "text": w, "logprob": -0.1, "special": False}
        events.append(
            (None, _j({"index": i + 1, "token": token, "generated_text": None, "details": None}))
        )
    if g.chance(0.85, "final"):
        reason = g.pick(("eos_token", "length", "stop_sequence"), "finish")
        token = {"id": 2, "text": "</s>", "logprob": 0.0, "special": True}
        details = {"finish_reason": reason, "generated_tokens": len(words) + 1, "seed": None}
        final = {"index": len(words) + 1, "token": token, "generated_text": "".join(words)}
        events.append((None, _j({**final, "details": details})))
    if g.chance(0.08, "error"):
        events.append(
            (
                g.pick((None, "error"), "error-event"),
                _j({"error": "boom", "error_type": "generation"}),
            )
        )
    return events, False


def _sse(g: _Gen, events: list[Event], done_ok: bool) -> str:
    """The events as server-sent events, with the framing draws."""
    nl = g.pick(("\n", "\n", "\n", "\r\n", "\r"), "newline")
    out: list[str] = []
    if g.chance(0.05, "bom"):
        out.append("\ufeff")
    if g.chance(0.1, "retry"):
        out.append(f"retry: 3000{nl}{nl}")
    for n, (name, data) in enumerate(events):
        if g.rng.random() < 0.05:
            g.notes.append("comment")
            out.append(f": keep-alive{nl}{nl}" if g.rng.random() < 0.5 else f": ping{nl}")
        lines = []
        if g.rng.random() < 0.05:
            g.notes.append("id")
            lines.append(f"id: {n}")
        if name is not None:
            lines.append(f"event: {name}")
        lines += [f"data: {line}" for line in data.split("\n")]
        out.append(nl.join(lines) + nl + nl)
    if done_ok and g.chance(0.7, "[DONE]"):
        out.append(f"data: [DONE]{nl}{nl}")
    if g.chance(0.05, "error-as-data"):
        out.append(f"data: {_j({'error': {'message': 'overloaded', 'code': 503}})}{nl}{nl}")
    if g.chance(0.03, "plain-text-error"):
        out.append(f"Internal Server Error{nl}")
    if g.chance(0.03, "raw-json-error"):
        error = {
            "error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}
        }
        out.append(json.dumps(error, indent=2).replace("\n", nl) + nl)
    text = "".join(out)
    if g.chance(0.05, "no-final-blank-line"):
        text = text.removesuffix(nl)
    return text


def generate(protocol: str, seed: int, index: int) -> Transcript:
    """Transcript ``index`` of ``protocol`` for ``seed`` (the same arguments give the same
    bytes)."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol={protocol!r}: expected one of {', '.join(PROTOCOLS)}")
    g = _Gen(protocol, seed, index)
    if protocol == "ollama":
        lines = _ollama(g)
        nl = g.pick(("\n", "\n", "\r\n"), "newline")
        text = "".join(line + nl for line in lines)
        if g.chance(0.05, "no-final-newline"):
            text = text.removesuffix(nl)
        content_type = "application/x-ndjson"
    else:
        make = {
            "openai": _chat,
            "openai-responses": _responses,
            "anthropic": _anthropic,
            "gemini": _gemini,
            "tgi": _tgi,
        }[protocol]
        events, done_ok = make(g)
        text = _sse(g, events, done_ok)
        content_type = "text/event-stream"
        if g.chance(0.1, "charset"):
            content_type += "; charset=utf-8"
    body = text.encode()
    ending = "close"
    if g.chance(0.15, "cut"):
        body = body[: g.rng.randrange(len(body) + 1)]
        ending = g.pick(("close", "close", "reset", "chunked-cut"), "ending")
    elif g.chance(0.03, "reset-at-end"):
        ending = "reset"
    cuts = (
        sorted({g.rng.randrange(1, len(body)) for _ in range(g.rng.randint(0, 4))})
        if len(body) > 1
        else []
    )
    bounds = [0, *cuts, len(body)]
    pieces = [body[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    zipped = g.chance(0.05, "gzip")
    return Transcript(protocol, seed, index, pieces, content_type, ending, zipped, g.notes)
