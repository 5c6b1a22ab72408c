"""What each transcript must read as: one :class:`Case` per transcript, grouped by format.

The expectations are written from the vendors' API references, not from the plugin's output:
which deltas are tokens (and of which kind), what ends the stream, what fails it. Every stream
transcript pauses 0.2 s (``PAUSE_S``) just before its first token, after any role-only,
metadata or heartbeat frames sent at 0 s, so TTFT must land on the first token of any kind.
"""

from __future__ import annotations

from dataclasses import dataclass

PAUSE_S = 0.2
"""The replay app's pause before each stream's first token (see the manifests)."""

JSON_PAGE = "application/json"
HTML_PAGE = "text/html"


@dataclass(frozen=True)
class Case:
    """One transcript and what reading it must give."""

    name: str
    """The transcript's file stem under ``transcripts/{directory}/``."""
    suffix: str
    """The path a vendor SDK appends to its base URL; the replay app ignores it."""
    kinds: tuple[str, ...] = ()
    """Each chunk's kind, in order: the token count is its length."""
    text: str = ""
    reasoning: str = ""
    tool: str = ""
    refusal: str = ""
    heartbeats: int = 0
    error_kind: str | None = None
    """None: the stream must be ``completed``."""
    error_has: str = ""
    """A fragment the error message must contain."""
    data_type: str | None = None
    """When set, the type name every chunk's ``data`` must have."""
    auto: bool = True
    """Whether reading it without ``format=`` (``auto``) must give the same, with the
    format recognised as this one (a chat stream filed under openai-responses is not)."""


def _pages(suffix: str, json_hint: str = JSON_PAGE) -> list[Case]:
    """The two non-stream 200s every format must refuse: a JSON body and an HTML page."""
    return [
        Case("nonstream", suffix, error_kind="protocol", error_has=json_hint),
        Case("page", suffix, error_kind="protocol", error_has=HTML_PAGE),
    ]


T, R, TOOL, REF = "text", "reasoning", "tool", "refusal"
CHAT = "/chat/completions"
GEMINI = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"

FORMATS: dict[str, tuple[str, list[Case]]] = {
    # format name: (transcript directory, cases)
    "sse": (
        "sse",
        [
            Case("normal", "/generate", (T, T, T), text="tok0 tok1 tok2 "),
            Case("heartbeat", "/generate", (T, T, T), text="tok0 tok1 tok2 ", heartbeats=3),
            Case("truncated", "/generate", (T, T), text="tok0 tok1 ", error_kind="truncated"),
            Case(
                "error",
                "/generate",
                (T,),
                text="tok0 ",
                error_kind="server",
                error_has="CUDA out of memory",
            ),
            *_pages("/generate"),
        ],
    ),
    "openai": (
        "openai",
        [
            Case("chat", CHAT, (T, T, T, T), text="Hello! How can I help?", data_type="dict"),
            Case(
                "chat_reasoning",
                CHAT,
                (R, R, T, T),
                text="Hi there.",
                reasoning="The user greets me.",
            ),
            Case("chat_reasoning_field", CHAT, (R, R, T), text="Done.", reasoning="Thinking."),
            Case("chat_tools", CHAT, (TOOL, TOOL), tool='{"location":"Paris"}'),
            # Either end alone is a clean end: a finish_reason without [DONE], and [DONE]
            # without a finish_reason.
            Case("chat_finish_no_done", CHAT, (T,), text="Hi"),
            Case("chat_done_no_finish", CHAT, (T,), text="Hi"),
            Case("chat_refusal", CHAT, (REF, REF), refusal="I can't help with that."),
            Case("legacy", "/completions", (T, T, T, T), text="\n\nThis is a test"),
            Case("heartbeat", CHAT, (T, T), text="Hi!", heartbeats=3),
            Case("truncated", CHAT, (T, T), text="Hello wor", error_kind="truncated"),
            Case(
                "error",
                CHAT,
                (T,),
                text="Hel",
                error_kind="server",
                error_has="The server had an error",
            ),
            Case("http_error", CHAT, error_kind="http", error_has="429"),
            *_pages(CHAT, 'answered application/json, not a stream: did you send "stream": true?'),
            # WHATWG: a lone CR ends a line; the openai client reads all 7 tokens.
            Case("chat_cr", CHAT, (T,) * 7, text="One two three four five six seven."),
            # n=2: choice 0 finished, choice 1 never did: not the end, cut or clean close.
            Case(
                "chat_n2_unfinished",
                CHAT,
                (T, T, T),
                text="RedBlue sky",
                error_kind="truncated",
                error_has="a finish_reason on every choice",
            ),
            Case("chat_n2_cut", CHAT, (T, T, T), text="RedBlue sky", error_kind="cut"),
            # Chat chunks under `event: completion`: the openai client reads their data.
            Case("chat_named_event", CHAT, (T,) * 5, text="A named event stream."),
            # llama.cpp's server interrupting a request: a role chunk, then a bare [DONE].
            Case(
                "llama_empty", CHAT, error_kind="empty", error_has="it sent only role chunk, [DONE]"
            ),
            Case("bare_done", CHAT, error_kind="empty", error_has="it sent a bare [DONE]"),
        ],
    ),
    "openai-responses": (
        "openai-responses",
        [
            Case("normal", "/responses", (T, T, T), text="Hi there!"),
            Case(
                "reasoning",
                "/responses",
                (R, R, R, T),
                text="Hello",
                reasoning="**Greeting** the user.Say hi.",
            ),
            Case("tools", "/responses", (TOOL, TOOL), tool='{"location":"Paris, France"}'),
            Case("refusal", "/responses", (REF, REF), refusal="I can't help with that."),
            Case("heartbeat", "/responses", (T,), text="Hi", heartbeats=2),
            # response.incomplete is a clean end (the model hit max_output_tokens).
            Case("incomplete", "/responses", (T, T), text="Hi the"),
            Case("truncated", "/responses", (T, T), text="Hi the", error_kind="truncated"),
            Case(
                "error",
                "/responses",
                (T,),
                text="Hi",
                error_kind="server",
                error_has="The server had an error",
            ),
            Case(
                "failed",
                "/responses",
                (T,),
                text="Hi",
                error_kind="server",
                error_has="The model failed to generate a response.",
            ),
            *_pages("/responses"),
            # A chat stream read as the Responses API: no event of its own, so no token.
            Case(
                "chat_stream",
                "/responses",
                # [DONE] is not the Responses API's end (its client raises without
                # response.completed): the stream ends without it.
                error_kind="truncated",
                error_has='it looks like openai (format="openai")',
                auto=False,
            ),
        ],
    ),
    "anthropic": (
        "anthropic",
        [
            Case("normal", "/v1/messages", (T, T, T), text="Hello! How can I help?", heartbeats=2),
            Case(
                "thinking",
                "/v1/messages",
                (R, R, T),
                text="27 * 453 = 12,231",
                reasoning="Let me solve this step by step:\n\n1. First break down 27 * 453"
                "\n2. 453 = 400 + 50 + 3",
            ),
            Case(
                "tools",
                "/v1/messages",
                (T, TOOL, TOOL),
                text="Okay, let me check.",
                tool='{"location": "San Francisco, CA"}',
            ),
            Case("truncated", "/v1/messages", (T, T), text="Hello wor", error_kind="truncated"),
            Case(
                "error",
                "/v1/messages",
                (T,),
                text="Hello",
                error_kind="server",
                error_has="Overloaded",
            ),
            Case("http_error", "/v1/messages", error_kind="http", error_has="529"),
            *_pages("/v1/messages"),
        ],
    ),
    "gemini": (
        "gemini",
        [
            Case("normal", GEMINI, (T, T, T), text="The quick brown fox jumps."),
            Case(
                "thinking",
                GEMINI,
                (R, R, T, T),
                text="The fox jumps.",
                reasoning="**Considering the fox**\nIt jumps.",
            ),
            Case("tools", GEMINI, (TOOL,), tool='{"location":"Paris"}'),
            # One response whose parts are a thought and the answer: one chunk of both kinds.
            Case("mixed", GEMINI, (f"{R}+{T}",), text="Yes.", reasoning="Hmm."),
            Case("truncated", GEMINI, (T, T), text="The quick", error_kind="truncated"),
            Case(
                "error",
                GEMINI,
                (T,),
                text="The",
                error_kind="server",
                error_has="The model is overloaded",
            ),
            # streamGenerateContent without alt=sse answers a JSON array.
            *_pages(GEMINI),
            # candidateCount=2: candidate 0 finished, candidate 1 was mid-answer.
            Case(
                "two_candidates_cut",
                GEMINI,
                (T, T, T),
                text="The foxA fox jumps. runs and",
                error_kind="cut",
            ),
            Case(
                "two_candidates_unfinished",
                GEMINI,
                (T, T, T),
                text="The foxA fox jumps. runs and",
                error_kind="truncated",
                error_has="a finishReason on every candidate",
            ),
        ],
    ),
    "ollama": (
        "ollama",
        [
            Case("generate", "/api/generate", (T, T, T, T), text="The sky is blue."),
            Case(
                "generate_thinking",
                "/api/generate",
                (R, R, T),
                text="Blue.",
                reasoning="Hmm, blue.",
            ),
            Case("chat", "/api/chat", (T, T, T), text="Hello! Hi."),
            Case(
                "chat_thinking",
                "/api/chat",
                (R, R, T),
                text="Hello!",
                reasoning="The user says hi.",
            ),
            Case("chat_tools", "/api/chat", (TOOL,), tool='{"city":"Tokyo"}'),
            Case("truncated", "/api/chat", (T, T), text="Hello!", error_kind="truncated"),
            Case(
                "error",
                "/api/chat",
                (T,),
                text="Hello",
                error_kind="server",
                error_has="unexpected EOF",
            ),
            *_pages("/api/chat"),
        ],
    ),
    "tgi": (
        "tgi",
        [
            # The last token is </s> with "special": true: not a token.
            Case("normal", "/generate_stream", (T, T, T), text="Deep learning is"),
            Case("heartbeat", "/generate_stream", (T,), text="Deep", heartbeats=2),
            Case(
                "truncated",
                "/generate_stream",
                (T, T),
                text="Deep learning",
                error_kind="truncated",
            ),
            Case(
                "error",
                "/generate_stream",
                (T,),
                text="Deep",
                error_kind="server",
                error_has="CUDA out of memory",
            ),
            *_pages("/generate_stream"),
        ],
    ),
    "ndjson": (
        "ndjson",
        [
            Case("normal", "/stream", (T, T, T, T), text="abcd"),
            Case("page", "/stream", error_kind="protocol", error_has=HTML_PAGE),
        ],
    ),
    "raw": ("raw", [Case("normal", "/stream", (T, T, T), text="alpha beta gamma")]),
    # User-defined formats, built in the inner test module (see CUSTOM_FORMATS there).
    "custom-sse": (
        "custom",
        [
            Case("sse", "/events", (T, T), text="xy"),
            Case("sse_truncated", "/events", (T,), text="x", error_kind="truncated"),
            Case("sse_error", "/events", (T,), text="x", error_kind="server", error_has="boom"),
        ],
    ),
    # json=False keeps each data a str; a custom heartbeat event type is counted.
    "custom-sse-text": (
        "custom",
        [Case("sse_text", "/events", (T, T), text="hello world", heartbeats=1, data_type="str")],
    ),
    "custom-ndjson": (
        "custom",
        [
            Case("ndjson", "/lines", (T, T), text="xy"),
            Case(
                "ndjson_error",
                "/lines",
                (T,),
                text="x",
                error_kind="server",
                error_has="disk full",
            ),
        ],
    ),
}


def path_of(fmt: str, case: Case) -> str:
    """The request path that makes the replay app answer ``case``'s transcript."""
    directory, _ = FORMATS[fmt]
    return f"/{directory}/{case.name}{case.suffix}"
