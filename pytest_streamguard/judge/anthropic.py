"""The anthropic client as judge: ``messages.create(stream=True)``, or the ``messages.stream``
helper and its final message.

Text, thinking and input-JSON deltas are the outputs (a content block that starts with text or
thinking carries some too). ``anthropic`` iterates ``create(stream=True)``, as the client's
README shows first: it yields every event as sent (a ``message_delta`` without ``usage``, a
delta before its block's start). ``anthropic.stream`` calls the helper, which assembles the
message as it reads (and raises on those shapes), then ``get_final_message()``, as a user's
code calls it after the events. The client is built on httpx2, anthropic's fork of
httpx, so the replay is lent as an httpx2 transport.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import anthropic
import httpx2

from pytest_streamguard.judge.base import Assembly, ClientJudge, Conclusion
from pytest_streamguard.judge.replay import kept_client
from pytest_streamguard.stream.recorded import Recorded

# A delta's type: (the kind of output, the delta's field that carries it).
_DELTAS = {
    "text_delta": ("text", "text"),
    "thinking_delta": ("reasoning", "thinking"),
    "input_json_delta": ("tool", "partial_json"),
}


class AnthropicJudge(ClientJudge):
    """``anthropic``: ``messages.create(stream=True)``, iterated."""

    name = "anthropic"
    formats = frozenset({"anthropic"})
    module = "anthropic"
    helper = False

    def judge(self, recorded: Recorded) -> Conclusion:
        """Replay ``recorded`` into ``anthropic.Anthropic`` and assemble what it yields."""
        replay, client = kept_client(anthropic.Anthropic, httpx2, recorded)
        got = Assembly(self.name, replay.stamp)
        return got.run(lambda: _read(client, got, self.helper))


class AnthropicStreamJudge(AnthropicJudge):
    """``anthropic.stream``: ``messages.stream`` then ``get_final_message()``."""

    name = "anthropic.stream"
    helper = True


def _read(client: anthropic.Anthropic, got: Assembly, helper: bool) -> None:
    asked = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    if not helper:
        _events(client.messages.create(**asked, stream=True), got)  # type: ignore[call-overload]
        return
    with client.messages.stream(**asked) as stream:  # type: ignore[arg-type]
        _events(stream, got)
        stream.get_final_message()


def _events(events: Iterable[Any], got: Assembly) -> None:
    for event in events:
        kind = getattr(event, "type", None)
        if kind == "content_block_start":
            block = event.content_block
            what = getattr(block, "type", None)
            # A call of the client's tool or of a server tool (web search, code execution).
            got.call(what in ("tool_use", "server_tool_use"))
            got.add("text", getattr(block, "text", None) if what == "text" else None)
            got.add("reasoning", getattr(block, "thinking", None) if what == "thinking" else None)
        elif kind == "content_block_delta":
            part, name = _DELTAS.get(getattr(event.delta, "type", None) or "", ("", ""))
            got.add(part, getattr(event.delta, name, None) if name else None)
        elif kind == "message_delta":
            got.ended(getattr(event.delta, "stop_reason", None))
