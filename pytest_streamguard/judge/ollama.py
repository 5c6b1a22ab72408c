"""The ollama client as judge: ``generate`` and ``chat`` with ``stream=True``.

Which one answered is read from the stream (a line's ``response`` or ``message``), else the
request's body (``prompt`` or ``messages``), else its path (``/api/generate``, else chat), so a
gateway's own route (``/generate``) is judged by what it served;
thinking is reasoning, a tool call's arguments are compact JSON (as the reader counts them),
and ``done_reason`` on the final line is the end reason.
"""

from __future__ import annotations

import json

import httpx
import ollama

from pytest_streamguard.judge.base import REPLAY_TIMEOUT_S, Assembly, ClientJudge, Conclusion
from pytest_streamguard.judge.replay import REPLAY_URL, Replay
from pytest_streamguard.stream.recorded import Recorded


class OllamaJudge(ClientJudge):
    """``ollama``: ``Client.generate`` or ``Client.chat``."""

    name = "ollama"
    formats = frozenset({"ollama"})
    module = "ollama"

    def judge(self, recorded: Recorded) -> Conclusion:
        """Replay ``recorded`` into ``ollama.Client`` and assemble what it yields."""
        replay = Replay(recorded)
        got = Assembly(self.name, replay.stamp)
        # The client builds its own httpx client; it passes the transport on.
        client = ollama.Client(
            host=REPLAY_URL, timeout=REPLAY_TIMEOUT_S, transport=replay.transport(httpx)
        )
        generate = generates(recorded)
        with client:
            return got.run(lambda: (_generate if generate else _chat)(client, got))


def _generate(client: ollama.Client, got: Assembly) -> None:
    for part in client.generate(model="m", prompt="hi", stream=True):
        got.add("reasoning", part.thinking)
        got.add("text", part.response)
        got.ended(part.done_reason if part.done else None)


def _chat(client: ollama.Client, got: Assembly) -> None:
    for chunk in client.chat(model="m", messages=[{"role": "user", "content": "hi"}], stream=True):
        message = chunk.message
        got.add("reasoning", message.thinking)
        got.add("text", message.content)
        got.ended(chunk.done_reason if chunk.done else None)
        for call in message.tool_calls or []:
            got.call()
            got.add("tool", json.dumps(dict(call.function.arguments), separators=(",", ":")))


def generates(recorded: Recorded) -> bool:
    """Whether ``recorded`` is a ``generate`` stream (else ``chat``)."""
    for line in recorded.objects():
        if "response" in line or "message" in line:
            return "response" in line
    if recorded.asked("prompt", "messages"):
        return recorded.asked("prompt")
    return recorded.path.endswith("/api/generate")
