"""The openai client as judge: Chat Completions, legacy Completions and the Responses API.

Which API the recorded request used is read from its path (``.../completions`` without
``/chat`` is the legacy API) and its format (``openai-responses``); chat chunks are read as
:mod:`.chunks` reads every OpenAI-compatible client's. The
Responses API's answer is the response that ``response.completed`` carries: without it the
client's stream helper raises (``Didn't receive a `response.completed` event.``), and so does
this judge; the client yields ``error`` and ``response.failed`` events instead of raising, and
they are the stream's failure.
"""

from __future__ import annotations

import httpx2
import openai
from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseIncompleteEvent,
    ResponseOutputItemAddedEvent,
)

from pytest_streamguard.judge.base import REPLAY_TIMEOUT_S, Assembly, ClientJudge, Conclusion
from pytest_streamguard.judge.chunks import read_chunks
from pytest_streamguard.judge.replay import REPLAY_URL, Replay
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
_NOT_COMPLETED = "Didn't receive a `response.completed` event."


class OpenAIJudge(ClientJudge):
    """``openai``: ``chat.completions``, ``completions`` and ``responses`` with ``stream=True``."""

    name = "openai"
    formats = frozenset({"openai", "openai-responses"})
    module = "openai"

    def judge(self, recorded: Recorded) -> Conclusion:
        """Replay ``recorded`` into ``openai.OpenAI`` and assemble what it yields."""
        replay = Replay(recorded)
        got = Assembly(self.name, replay.stamp)
        client = openai.OpenAI(
            base_url=REPLAY_URL,
            api_key="replay",
            max_retries=0,
            timeout=REPLAY_TIMEOUT_S,
            http_client=replay.client(httpx2),
        )
        if _is_responses(recorded):
            read = _responses
        elif recorded.path.endswith("/completions") and not recorded.path.endswith(
            "/chat/completions"
        ):
            read = _completions
        else:
            read = _chat
        with client:
            return got.run(lambda: read(client, got))


def _end_reason(event: ResponseCompletedEvent | ResponseIncompleteEvent) -> str:
    """The response's status (the event's own word when the response has none), or for an
    incomplete one the reason its ``incomplete_details`` give."""
    response = event.response
    status = response.status or event.type.rsplit(".", 1)[1]
    details = response.incomplete_details
    if status == "incomplete" and details is not None and details.reason:
        return details.reason
    return status


def _is_responses(recorded: Recorded) -> bool:
    return recorded.format == "openai-responses" or recorded.path.endswith("/responses")


def _completions(client: openai.OpenAI, got: Assembly) -> None:
    for completion in client.completions.create(model="m", prompt="hi", stream=True):
        for choice in completion.choices:
            got.add("text", choice.text)
            got.ended(choice.finish_reason)


def _chat(client: openai.OpenAI, got: Assembly) -> None:
    read_chunks(
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        ),
        got,
    )


def _responses(client: openai.OpenAI, got: Assembly) -> None:
    streamed: set[tuple[str, str]] = set()
    completed = False
    for event in client.responses.create(model="m", input="hi", stream=True):
        kind = event.type
        item = str(getattr(event, "item_id", "")), kind.rsplit(".", 1)[0]
        if kind in _DELTAS:
            got.add(_DELTAS[kind], getattr(event, "delta", None))
            streamed.add(item)
        elif kind in _WHOLE and item not in streamed:
            part, name = _WHOLE[kind]
            got.add(part, getattr(event, name, None))
        elif isinstance(event, ResponseOutputItemAddedEvent):
            # Every kind of call the model makes (function_call, custom_tool_call, mcp_call,
            # web_search_call, ...), not the *_call_output items the client sends.
            got.call(event.item.type.endswith("_call"))
        elif kind in ("error", "response.failed"):
            raise openai.APIError(f"{kind} event", httpx2.Request("POST", REPLAY_URL), body=None)
        if isinstance(event, ResponseCompletedEvent | ResponseIncompleteEvent):
            got.ended(_end_reason(event))
        completed = completed or kind == "response.completed"
    if not completed:
        raise RuntimeError(_NOT_COMPLETED)
