"""The anthropic client as judge: ``messages.stream`` and its final message.

Text, thinking and input-JSON deltas are the outputs (a content block that starts with text or
thinking carries some too); the stream helper's ``get_final_message()`` must succeed, as a
user's code calls it after the events. The client is built on httpx2, anthropic's fork of
httpx, so the replay is lent as an httpx2 transport.
"""

from __future__ import annotations

import anthropic
import httpx2

from pytest_streamguard.judge.base import REPLAY_TIMEOUT_S, Assembly, ClientJudge, Conclusion
from pytest_streamguard.judge.replay import REPLAY_URL, Replay
from pytest_streamguard.stream.recorded import Recorded

# A delta's type: (the kind of output, the delta's field that carries it).
_DELTAS = {
    "text_delta": ("text", "text"),
    "thinking_delta": ("reasoning", "thinking"),
    "input_json_delta": ("tool", "partial_json"),
}


class AnthropicJudge(ClientJudge):
    """``anthropic``: ``messages.stream`` then ``get_final_message()``."""

    name = "anthropic"
    formats = frozenset({"anthropic"})
    module = "anthropic"

    def judge(self, recorded: Recorded) -> Conclusion:
        """Replay ``recorded`` into ``anthropic.Anthropic`` and assemble what it yields."""
        replay = Replay(recorded)
        got = Assembly(self.name, replay.stamp)
        client = anthropic.Anthropic(
            base_url=REPLAY_URL,
            api_key="replay",
            max_retries=0,
            timeout=REPLAY_TIMEOUT_S,
            http_client=replay.client(httpx2),
        )
        with client:
            return got.run(lambda: _read(client, got))


def _read(client: anthropic.Anthropic, got: Assembly) -> None:
    with client.messages.stream(
        model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        for event in stream:
            if event.type == "content_block_start":
                block = event.content_block
                # A call of the client's tool or of a server tool (web search, code execution).
                got.call(block.type in ("tool_use", "server_tool_use"))
                got.add("text", block.text if block.type == "text" else None)
                got.add("reasoning", block.thinking if block.type == "thinking" else None)
            elif event.type == "content_block_delta" and event.delta.type in _DELTAS:
                kind, name = _DELTAS[event.delta.type]
                got.add(kind, getattr(event.delta, name))
            elif event.type == "message_delta":
                got.ended(event.delta.stop_reason)
        stream.get_final_message()
