"""The openai client as judge: Chat Completions, legacy Completions and the Responses API.

Which API answered is read from the stream itself (a Responses event's ``type``, a chunk's
``object`` or its choices' ``delta`` or ``text``), else from the request's body (``messages``,
``prompt``, ``input``), else from its path: a gateway's own route (``/generate``) says nothing.
``openai`` iterates ``create(stream=True)``, as the client's README shows first;
``openai.stream`` calls the helpers (``chat.completions.stream`` then
``get_final_completion()``, ``responses.stream`` then ``get_final_response()``, which raises
without ``response.completed``). Chat chunks are read as :mod:`.chunks` reads every
OpenAI-compatible client's. The client yields ``error`` and ``response.failed`` events instead of
raising; they are the stream's failure.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import httpx2
import openai
from openai.types.chat import ChatCompletionMessageParam

from pytest_streamguard.judge.base import Assembly, ClientJudge, Conclusion
from pytest_streamguard.judge.chunks import read_chunks
from pytest_streamguard.judge.replay import kept_client
from pytest_streamguard.stream.recorded import Recorded

_DELTAS = {
    "response.output_text.delta": "text",
    "response.reasoning_summary_text.delta": "reasoning",
    "response.reasoning_text.delta": "reasoning",
    "response.function_call_arguments.delta": "tool",
    "response.custom_tool_call_input.delta": "tool",
    "response.refusal.delta": "refusal",
}
# A part sent whole in its .done event, without deltas: (kind, the event's field).
_WHOLE = {
    "response.output_text.done": ("text", "text"),
    "response.reasoning_text.done": ("reasoning", "text"),
    "response.refusal.done": ("refusal", "refusal"),
    "response.function_call_arguments.done": ("tool", "arguments"),
}
# Output items without text that ask the caller to act (not a model's call: no ``_call``).
_OTHER_ITEMS = frozenset({"mcp_approval_request"})
_MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


class OpenAIJudge(ClientJudge):
    """``openai``: ``chat.completions``, ``completions`` and ``responses`` with ``stream=True``."""

    name = "openai"
    formats = frozenset({"openai", "openai-responses"})
    module = "openai"
    helper = False

    def judge(self, recorded: Recorded) -> Conclusion:
        """Replay ``recorded`` into ``openai.OpenAI`` and assemble what it yields."""
        replay, client = kept_client(openai.OpenAI, httpx2, recorded)
        got = Assembly(self.name, replay.stamp)
        read = {"chat": _chat, "completions": _completions, "responses": _responses}[
            api_of(recorded)
        ]
        return got.run(lambda: read(client, got, self.helper))


class OpenAIStreamJudge(OpenAIJudge):
    """``openai.stream``: the client's stream helpers, and the final answer they assemble."""

    name = "openai.stream"
    helper = True


def api_of(recorded: Recorded) -> str:
    """Which OpenAI API answered ``recorded``: ``chat``, ``completions`` or ``responses``."""
    if recorded.format == "openai-responses":
        return "responses"
    for event in recorded.objects():
        kind, what = event.get("type"), event.get("object")
        if isinstance(kind, str) and kind.startswith("response."):
            return "responses"
        if what in ("chat.completion.chunk", "text_completion"):
            return "chat" if what == "chat.completion.chunk" else "completions"
        choices = event.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            if isinstance(choice, dict) and ("delta" in choice or "text" in choice):
                return "chat" if "delta" in choice else "completions"
    for key, api in (("messages", "chat"), ("prompt", "completions"), ("input", "responses")):
        if recorded.asked(key):
            return api
    path = recorded.path
    if path.endswith("/responses"):
        return "responses"
    return "completions" if path.endswith("/completions") and "/chat/" not in path else "chat"


def _completions(client: openai.OpenAI, got: Assembly, helper: bool) -> None:
    # No helper for the legacy API: both names iterate it.
    for completion in client.completions.create(model="m", prompt="hi", stream=True):
        for choice in completion.choices or []:
            got.add("text", choice.text)
            got.ended(choice.finish_reason)


def _chat(client: openai.OpenAI, got: Assembly, helper: bool) -> None:
    if not helper:
        read_chunks(client.chat.completions.create(model="m", messages=_MESSAGES, stream=True), got)
        return
    with client.chat.completions.stream(model="m", messages=_MESSAGES) as stream:
        read_chunks((event.chunk for event in stream if event.type == "chunk"), got)
        stream.get_final_completion()


def _responses(client: openai.OpenAI, got: Assembly, helper: bool) -> None:
    if not helper:
        _events(client.responses.create(model="m", input="hi", stream=True), got)
        return
    with client.responses.stream(model="m", input="hi") as stream:
        _events(stream, got)
        stream.get_final_response()


def _events(events: Iterable[Any], got: Assembly) -> None:
    """What the Responses API's events yield: deltas, parts sent whole, calls, the end."""
    streamed: set[tuple[str, str]] = set()
    for event in events:
        kind = event.type
        item = str(getattr(event, "item_id", "")), kind.rsplit(".", 1)[0]
        if kind in _DELTAS:
            got.add(_DELTAS[kind], getattr(event, "delta", None))
            streamed.add(item)
        elif kind in _WHOLE and item not in streamed:
            part, name = _WHOLE[kind]
            got.add(part, getattr(event, name, None))
        elif kind == "response.output_item.added":
            # Every kind of call the model makes (function_call, custom_tool_call, mcp_call,
            # web_search_call, ...), not the *_call_output items the client sends.
            kind_of = str(getattr(event.item, "type", ""))
            got.call(kind_of.endswith("_call"))
            if kind_of in _OTHER_ITEMS:
                got.other()
        elif kind in ("error", "response.failed"):
            got.fail(f"APIError: {kind} event")
        elif kind in ("response.completed", "response.incomplete"):
            _ended(event, got)


def _ended(event: Any, got: Assembly) -> None:
    """The response's status (the event's own word without one), or for an incomplete one the
    reason its ``incomplete_details`` give; its text where no event streamed any."""
    response = event.response
    status = getattr(response, "status", None) or event.type.rsplit(".", 1)[1]
    reason = getattr(getattr(response, "incomplete_details", None), "reason", None)
    got.ended(reason if status == "incomplete" and reason else status)
    if got.text_of("text"):
        return
    for output in getattr(response, "output", None) or []:
        for part in getattr(output, "content", None) or []:
            got.add("text", part.text if getattr(part, "type", None) == "output_text" else None)
