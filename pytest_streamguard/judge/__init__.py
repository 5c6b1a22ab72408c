"""Client judges: the user's own client library concludes on the bytes each stream recorded.

After a stream ends, its recorded response (:class:`~pytest_streamguard.stream.recorded.Recorded`:
status, headers, every body read with its arrival stamp, and how the body ended) is replayed into
the official client the test names (``client=``, ``--streamguard-client``), through that
client's public streaming API and a replay transport (:mod:`.replay`). What the client
concludes is the stream's verdict (:mod:`.ruling`); the plugin's reader keeps running beside it
and the trace says whether the two agree.

Built-in judges (:data:`JUDGES`): ``openai`` (Chat Completions, Completions, Responses),
``anthropic``, ``google-genai``, ``ollama`` and ``huggingface_hub``, each iterating the call
its README shows first; the stream helpers ``openai.stream`` and ``anthropic.stream`` (by
name); the OpenAI-compatible vendors' own ``mistralai`` and ``groq`` (by name; ``auto`` picks
``openai``);
:func:`register_judge` adds any other client through the small :class:`ClientJudge` interface
(docs/protocols.md shows one).
"""

from __future__ import annotations

from pytest_streamguard.judge.base import Assembly, ClientJudge, Conclusion, Output
from pytest_streamguard.judge.registry import (
    AUTO,
    JUDGES,
    NONE,
    check_client,
    judge_for,
    register_judge,
)
from pytest_streamguard.judge.replay import REPLAY_URL, Replay
from pytest_streamguard.judge.ruling import STRICTER, judge_trace, rule, save_disagreement

__all__ = [
    "AUTO",
    "JUDGES",
    "NONE",
    "REPLAY_URL",
    "STRICTER",
    "Assembly",
    "ClientJudge",
    "Conclusion",
    "Output",
    "Replay",
    "check_client",
    "judge_for",
    "judge_trace",
    "register_judge",
    "rule",
    "save_disagreement",
]
