"""The groq client as judge: ``chat.completions.create`` with ``stream=True``.

Groq's client is built as OpenAI's (the same chunk types; ``reasoning`` is a declared field of
its deltas), so its chunks are read as :mod:`.chunks` reads them. It sends through httpx.
"""

from __future__ import annotations

import groq
import httpx

from pytest_streamguard.judge.base import REPLAY_TIMEOUT_S, Assembly, ClientJudge, Conclusion
from pytest_streamguard.judge.chunks import read_chunks
from pytest_streamguard.judge.replay import REPLAY_URL, Replay
from pytest_streamguard.stream.recorded import Recorded


class GroqJudge(ClientJudge):
    """``groq``: ``Groq().chat.completions.create(stream=True)`` on OpenAI-format streams."""

    name = "groq"
    formats = frozenset({"openai"})
    module = "groq"

    def judge(self, recorded: Recorded) -> Conclusion:
        """Replay ``recorded`` into ``groq.Groq`` and assemble what it yields."""
        replay = Replay(recorded)
        got = Assembly(self.name, replay.stamp)
        client = groq.Groq(
            base_url=REPLAY_URL,
            api_key="replay",
            max_retries=0,
            timeout=REPLAY_TIMEOUT_S,
            http_client=replay.client(httpx),
        )
        with client:
            return got.run(lambda: _read(client, got))


def _read(client: groq.Groq, got: Assembly) -> None:
    read_chunks(
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        ),
        got,
    )
