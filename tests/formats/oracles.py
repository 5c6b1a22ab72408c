"""The vendors' official Python clients read the same transcript bytes from the replay app.

Each oracle points its client's base URL at the replay app on loopback (the transcript's
prefix; the client appends its own path, which the app ignores), reads the stream the way the
client exposes it, and assembles text, reasoning, tool-call arguments and refusals. ``check``
then asserts that the plugin's reading (as dumped by the inner pytester run) has the same text
of every kind, and that the client notices a failure where the plugin says ``server``.

What the clients do not notice (the reason the plugin checks it): but for the Responses API
(whose answer is the response that ``response.completed`` carries), none of them reports a
stream that was cut cleanly before its end (``truncated``); the OpenAI client yields the
Responses API's ``error`` and ``response.failed`` events instead of raising (we look at them).
The differential harness (``differential.py``) reads generated streams with the same readers.
"""

from __future__ import annotations

import functools
import json
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import anthropic
import httpx
import httpx2
import ollama
import openai
from format_cases import Case
from google import genai
from google.genai import types as genai_types
from huggingface_hub import InferenceClient

# google-genai resumes an answer whose candidate carries a continuationToken with follow-up
# requests (automatic continuation); the transcripts are one response each, as the plugin's
# judge replays one.
_ONE_REQUEST = (
    genai_types.GenerateContentConfig(automatic_continuation=False)
    if "automatic_continuation" in genai_types.GenerateContentConfig.model_fields
    else None
)

# No retries and a short timeout: a transcript is answered at once, and a client that retried
# a failure would read it twice.
TIMEOUT_S = 10.0


@dataclass
class Assembled:
    """What a client assembled from one stream, and whether it reported a failure."""

    parts: dict[str, list[str]] = field(
        default_factory=lambda: {"text": [], "reasoning": [], "tool": [], "refusal": []}
    )
    failed: str | None = None
    """The client's exception (or failure event), as ``Type: message``."""
    calls: int = 0
    """Tool calls the client assembled (a call with empty arguments is output too)."""
    others: int = 0
    """Outputs without text the client yielded (an image part, a vendor's ``images``)."""
    unfinished: str | None = None
    """What the client's final-answer call would raise where the plugin deliberately says
    completed (a Responses stream that ends with response.incomplete)."""
    reason: str | None = None
    """Why generation ended, as the client exposes it (the last one the stream sent)."""

    def ended(self, reason: Any) -> None:
        """Keep a reason the client reported (an enum's value, as sent; None and empty are
        not reasons)."""
        value = getattr(reason, "value", reason)
        if isinstance(value, str) and value:
            self.reason = value

    def add(self, kind: str, piece: object) -> None:
        """Keep a non-empty piece of ``kind`` (a value that is not a string is no text)."""
        if isinstance(piece, str) and piece:
            self.parts[kind].append(piece)

    @property
    def produced(self) -> bool:
        """Whether the client produced any output: text of any kind, or a tool call."""
        return self.calls > 0 or self.others > 0 or any(self.parts.values())

    def of(self, kind: str) -> str:
        """Everything of ``kind``, joined."""
        return "".join(self.parts[kind])


def _guard(read: Callable[[Assembled], None]) -> Assembled:
    """Run ``read``; an exception the client raises mid-stream is its failure report."""
    got = Assembled()
    try:
        read(got)
    except Exception as exc:  # the client's own error types differ; we record which one
        got.failed = f"{type(exc).__name__}: {exc}"
    return got


HttpFactory = Callable[[ModuleType], Any]
"""Makes an HTTP client of the given httpx module (``httpx``, or ``httpx2`` for anthropic):
the differential harness serves transcripts in-process through its transport."""


def _http(http: HttpFactory | None, module: ModuleType = httpx) -> Any:
    """A client from ``http`` for ``module``, or None for the client's default (the network)."""
    return None if http is None else http(module)


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    return ssl.create_default_context()


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def read_openai(base: str, case: Case, http: HttpFactory | None = None) -> Assembled:
    """openai: chat chunks' deltas (``reasoning_content``/``reasoning`` are extra fields the
    client keeps in ``model_extra``) or legacy completion choices' ``text``."""
    client = openai.OpenAI(
        base_url=base, api_key="x", max_retries=0, timeout=TIMEOUT_S, http_client=_http(http)
    )

    def read(got: Assembled) -> None:
        if case.suffix == "/completions":
            for completion in client.completions.create(model="m", prompt="hi", stream=True):
                for choice in completion.choices:
                    got.add("text", choice.text)
                    got.ended(choice.finish_reason)
            return
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        for chunk in stream:
            for c in chunk.choices:
                extra = c.delta.model_extra or {}
                got.add("reasoning", extra.get("reasoning_content") or extra.get("reasoning"))
                _content(c.delta.content, got)
                got.others += bool(extra.get("images"))
                got.add("refusal", c.delta.refusal)
                audio = extra.get("audio") or getattr(c.delta, "audio", None)
                audio = audio if isinstance(audio, dict) else getattr(audio, "__dict__", None)
                got.add("text", audio.get("transcript") if isinstance(audio, dict) else None)
                for call in c.delta.tool_calls or []:
                    got.calls += bool(call.function and call.function.name)
                    got.add("tool", call.function.arguments if call.function else None)
                legacy = c.delta.function_call  # the legacy functions API's field
                if legacy is not None and not c.delta.tool_calls:
                    got.calls += bool(legacy.name)
                    got.add("tool", legacy.arguments)
                got.ended(c.finish_reason)

    # Closed after the read, so no connection outlives the check (filterwarnings = error).
    with client:
        return _guard(read)


def _content(content: Any, got: Assembled, kind: str = "text") -> None:
    """A chat delta's content as the client yields it: a string, or (a vendor's content chunks,
    which the openai client keeps as sent) a list of parts: a part's ``text`` is of ``kind``, a
    ``thinking`` part's own parts are reasoning, any other part is output without text."""
    if not isinstance(content, list):
        got.add(kind, content if isinstance(content, str) else None)
        return
    for part in content:
        if isinstance(part, dict) and part.get("type") == "thinking":
            _content(part.get("thinking"), got, "reasoning")
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            got.add(kind, part["text"])
        elif part is not None:
            got.others += 1


def read_openai_responses(base: str, case: Case, http: HttpFactory | None = None) -> Assembled:
    """openai: Responses API events by ``type``; ``error``/``response.failed`` are failures."""
    client = openai.OpenAI(
        base_url=base, api_key="x", max_retries=0, timeout=TIMEOUT_S, http_client=_http(http)
    )
    kinds = {
        "response.output_text.delta": "text",
        "response.reasoning_summary_text.delta": "reasoning",
        "response.reasoning_text.delta": "reasoning",
        "response.function_call_arguments.delta": "tool",
        "response.custom_tool_call_input.delta": "tool",
        "response.refusal.delta": "refusal",
    }

    done_kinds = {
        "response.output_text.done": ("text", "text"),
        "response.reasoning_text.done": ("reasoning", "text"),
        "response.refusal.done": ("refusal", "refusal"),
        "response.function_call_arguments.done": ("tool", "arguments"),
    }

    def read(got: Assembled) -> None:
        # Every event, as create(stream=True) yields it; the answer is the response that
        # response.completed carries: without it the client's stream helper
        # (get_final_response) raises, and so does this read.
        streamed: set[tuple[str, str]] = set()
        completed = incomplete = False
        for event in client.responses.create(model="m", input="hi", stream=True):
            kind = event.type
            item = str(getattr(event, "item_id", "")), kind.rsplit(".", 1)[0]
            if kind in kinds:
                got.add(kinds[kind], getattr(event, "delta", None))
                streamed.add(item)
            elif kind in done_kinds and item not in streamed:
                # A part sent whole in its .done event, without deltas.
                got.add(done_kinds[kind][0], getattr(event, done_kinds[kind][1], None))
            elif kind == "response.output_item.added":
                got.calls += str(getattr(event.item, "type", "")).endswith("_call")
            elif kind in ("error", "response.failed"):
                got.failed = f"{kind} event"
            if kind in ("response.completed", "response.incomplete"):
                # The status (the event's own word without one); an incomplete one's reason.
                status = event.response.status or kind.rsplit(".", 1)[1]
                details = event.response.incomplete_details
                got.ended(status)
                if status == "incomplete" and details is not None:
                    got.ended(details.reason)
            completed = completed or kind == "response.completed"
            incomplete = incomplete or kind == "response.incomplete"
        if got.failed is None and not completed:
            message = "RuntimeError: Didn't receive a `response.completed` event."
            if not incomplete:
                raise RuntimeError(message.removeprefix("RuntimeError: "))
            # The plugin completes it on purpose (docs/protocols.md): kept apart.
            got.unfinished = message + " (response.incomplete)"

    # Closed after the read, so no connection outlives the check (filterwarnings = error).
    with client:
        return _guard(read)


def read_anthropic(base: str, case: Case, http: HttpFactory | None = None) -> Assembled:
    """anthropic: ``messages.stream`` events (text, thinking and input-JSON deltas), then the
    stream helper's ``get_final_message()``, which must not raise."""
    client = anthropic.Anthropic(
        base_url=base,
        api_key="x",
        max_retries=0,
        timeout=TIMEOUT_S,
        http_client=_http(http, httpx2),
    )
    kinds = {"text_delta": "text", "thinking_delta": "reasoning", "input_json_delta": "tool"}
    fields = {
        "text_delta": "text",
        "thinking_delta": "thinking",
        "input_json_delta": "partial_json",
    }

    def read(got: Assembled) -> None:
        with client.messages.stream(
            model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            for event in stream:
                if event.type == "content_block_start":
                    block = event.content_block
                    got.calls += block.type in ("tool_use", "server_tool_use")
                    got.add("text", block.text if block.type == "text" else None)
                    got.add("reasoning", block.thinking if block.type == "thinking" else None)
                if event.type == "content_block_delta" and event.delta.type in kinds:
                    got.add(kinds[event.delta.type], getattr(event.delta, fields[event.delta.type]))
                if event.type == "message_delta":
                    got.ended(event.delta.stop_reason)
            # What a user's code calls after the events; the events are the output (a text
            # delta into a block that is not text is yielded, and not in the final message).
            stream.get_final_message()

    # Closed after the read, so no connection outlives the check (filterwarnings = error).
    with client:
        return _guard(read)


def read_gemini(base: str, case: Case, http: HttpFactory | None = None) -> Assembled:
    """google-genai: ``generate_content_stream`` responses' parts (``thought`` parts are
    reasoning, ``function_call`` parts tool calls, their args as compact JSON)."""
    client = genai.Client(
        api_key="x",
        http_options=genai_types.HttpOptions(
            base_url=base + "/",
            api_version="v1beta",
            timeout=int(TIMEOUT_S * 1000),
            httpx_client=_http(http),
            # One verifying context for every read: the client builds two per instance
            # (about 50 ms of loading the CA bundle), most of a read's time in the harness.
            client_args={"verify": _ssl_context()},
            async_client_args={"verify": _ssl_context(), "ssl": _ssl_context()},
        ),
    )

    def read(got: Assembled) -> None:
        # One request, as the plugin's judge replays one response (no automatic continuation).
        for response in client.models.generate_content_stream(
            model="gemini-2.5-flash", contents="hi", config=_ONE_REQUEST
        ):
            finished = False
            for candidate in response.candidates or []:
                for part in (candidate.content.parts if candidate.content else None) or []:
                    got.add("reasoning" if part.thought else "text", part.text)
                    if part.function_call is not None:
                        got.calls += 1
                        got.add("tool", _compact(part.function_call.args or {}))
                reason = getattr(candidate.finish_reason, "value", candidate.finish_reason)
                if reason not in (None, "FINISH_REASON_UNSPECIFIED"):
                    got.ended(reason)
                    finished = True
            feedback = response.prompt_feedback
            if feedback is not None and feedback.block_reason is not None and not finished:
                got.ended(feedback.block_reason)

    # Closed after the read, so no connection outlives the check (filterwarnings = error).
    with client:
        return _guard(read)


def read_ollama(base: str, case: Case, http: HttpFactory | None = None) -> Assembled:
    """ollama: ``generate``/``chat`` with ``stream=True``; tool calls' arguments as JSON."""
    more: dict[str, Any] = {}
    if http is not None:
        with http(httpx) as own:  # ollama builds its own httpx client: lend it the transport
            more["transport"] = own._transport
    client = ollama.Client(host=base, timeout=TIMEOUT_S, **more)

    def read(got: Assembled) -> None:
        if case.suffix == "/api/generate":
            for part in client.generate(model="m", prompt="hi", stream=True):
                got.add("reasoning", part.thinking)
                got.add("text", part.response)
                got.ended(part.done_reason if part.done else None)
            return
        for chunk in client.chat(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        ):
            got.add("reasoning", chunk.message.thinking)
            got.add("text", chunk.message.content)
            got.ended(chunk.done_reason if chunk.done else None)
            for call in chunk.message.tool_calls or []:
                got.calls += 1
                got.add("tool", _compact(dict(call.function.arguments)))

    # Closed after the read, so no connection outlives the check (filterwarnings = error).
    with client:
        return _guard(read)


def read_tgi(base: str, case: Case, http: HttpFactory | None = None) -> Assembled:
    """huggingface_hub: ``text_generation(stream=True, details=True)``; special tokens are
    dropped (the client does not compare the final event's ``generated_text`` with them)."""
    client = InferenceClient(model=base + case.suffix, timeout=TIMEOUT_S)

    def read(got: Assembled) -> None:
        for output in client.text_generation("hi", stream=True, details=True):
            if not output.token.special:
                got.add("text", output.token.text)
            if output.generated_text is not None:
                got.ended(output.details.finish_reason if output.details is not None else None)

    # Closed after the read, so no connection outlives the check (filterwarnings = error).
    with client:
        return _guard(read)


@dataclass(frozen=True)
class Oracle:
    """An official client, and which plugin outcomes it reports as a failure too."""

    read: Callable[[str, Case], Assembled]
    fails_on: frozenset[str] = frozenset({"server", "cut"})

    def check(self, replay_url: str, path: str, case: Case, ours: dict[str, Any]) -> None:
        """Assert the client's text of every kind equals ours, and that it fails on the
        outcomes in ``fails_on`` (and only on those) for this stream transcript."""
        if case.error_kind in ("protocol", "http"):
            return  # not a stream: each client fails in its own way (or parses the JSON)
        prefix = path[: path.index(case.suffix)] if case.suffix else path
        got = self.read(replay_url + prefix, case)
        for kind in ("text", "reasoning", "tool", "refusal"):
            theirs = got.of(kind)
            mine = ours["text"] if kind == "text" else ours[kind]
            assert mine == theirs, (case.name, kind, mine, theirs, got.failed)
        should_fail = case.error_kind in self.fails_on
        assert (got.failed is not None) == should_fail, (case.name, case.error_kind, got.failed)


ORACLES: dict[str, Oracle] = {
    "openai": Oracle(read_openai),
    "openai-responses": Oracle(read_openai_responses, frozenset({"server", "cut", "truncated"})),
    "anthropic": Oracle(read_anthropic),
    "gemini": Oracle(read_gemini),
    "ollama": Oracle(read_ollama),
    "tgi": Oracle(read_tgi),
}
"""Oracles by format name; the bundled ``sse``, ``ndjson``, ``raw`` have no vendor client."""
