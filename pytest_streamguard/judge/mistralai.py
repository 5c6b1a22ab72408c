"""The mistralai client as judge: ``chat.stream`` on OpenAI-format chat streams.

Mistral's client has types of its own: a delta's ``content`` is a string or a list of content
chunks (``text`` chunks are text, a ``thinking`` chunk's inner text is reasoning), a tool
call's arguments a string or an object (compact JSON, as the reader counts them); each
choice's ``finish_reason`` is the end reason. It sends through httpx2.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
from mistralai.client import Mistral
from mistralai.client.models import UserMessage

from pytest_streamguard.judge.base import REPLAY_TIMEOUT_S, Assembly, ClientJudge, Conclusion
from pytest_streamguard.judge.replay import REPLAY_URL, Replay
from pytest_streamguard.stream.recorded import Recorded


class MistralAIJudge(ClientJudge):
    """``mistralai``: ``Mistral().chat.stream`` on OpenAI-format streams."""

    name = "mistralai"
    formats = frozenset({"openai"})
    module = "mistralai.client"

    def judge(self, recorded: Recorded) -> Conclusion:
        """Replay ``recorded`` into ``mistralai``'s ``Mistral`` and assemble what it yields."""
        replay = Replay(recorded)
        got = Assembly(self.name, replay.stamp)
        with replay.client(httpx2) as http:
            client = Mistral(
                api_key="replay",
                server_url=REPLAY_URL,
                client=http,
                timeout_ms=int(REPLAY_TIMEOUT_S * 1000),
            )
            return got.run(lambda: _read(client, got))


def _read(client: Mistral, got: Assembly) -> None:
    with client.chat.stream(model="m", messages=[UserMessage(content="hi")]) as events:
        for event in events:
            for choice in event.data.choices:
                delta = choice.delta
                _content(delta.content, got)
                for call in delta.tool_calls or []:
                    got.call()
                    got.add("tool", _arguments(call.function.arguments))
                got.ended(choice.finish_reason)


def _content(content: Any, got: Assembly, kind: str = "text") -> None:
    """A delta's content: a string, or content chunks (a thinking chunk's are reasoning)."""
    if isinstance(content, str):
        got.add(kind, content)
        return
    for chunk in content or []:
        if getattr(chunk, "type", None) == "thinking":
            _content(chunk.thinking, got, "reasoning")
        else:
            got.add(kind, getattr(chunk, "text", None))


def _arguments(arguments: Any) -> str | None:
    """A tool call's arguments as the reader counts them: the string as sent, an object as
    compact JSON."""
    if arguments is None or isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, separators=(",", ":"))
