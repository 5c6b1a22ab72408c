"""The groq client as judge: ``chat.completions.create`` with ``stream=True``.

Groq's client is built as OpenAI's (the same chunk types; ``reasoning`` is a declared field of
its deltas), so its chunks are read as :mod:`.chunks` reads them. It sends through httpx.
"""

from __future__ import annotations

import groq
import httpx

from pytest_streamguard.judge.base import Assembly, ClientJudge, Conclusion
from pytest_streamguard.judge.chunks import read_chunks
from pytest_streamguard.judge.replay import kept_client
from pytest_streamguard.stream.recorded import Recorded


class GroqJudge(ClientJudge):
    """``groq``: ``Groq().chat.completions.create(stream=True)`` on OpenAI-format streams."""

    name = "groq"
    formats = frozenset({"openai"})
    module = "groq"

    def judge(self, recorded: Recorded) -> Conclusion:
        """Replay ``recorded`` into ``groq.Groq`` and assemble what it yields."""
        replay, client = kept_client(groq.Groq, httpx, recorded)
        got = Assembly(self.name, replay.stamp)
        return got.run(lambda: _read(client, got))


def _read(client: groq.Groq, got: Assembly) -> None:
    read_chunks(
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        ),
        got,
    )
