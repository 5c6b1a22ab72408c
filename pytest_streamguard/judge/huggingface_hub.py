"""The huggingface_hub client as judge: ``InferenceClient.text_generation`` (TGI).

``text_generation(stream=True, details=True)``: special tokens are not output; the final
event (a non-null ``generated_text``) carries the end reason. The client does not compare
``generated_text`` with the tokens it yielded, and neither does the judge (a server may send
the prompt in it too: ``return_full_text``). The client sends through huggingface_hub's one
shared HTTP client, made by the factory that ``set_client_factory`` sets: the judge sets one
over the replay for the read and puts the previous factory back after it (huggingface_hub
offers no getter, so it is read from the module that keeps it).
"""

from __future__ import annotations

import threading

import httpx2
import huggingface_hub
from huggingface_hub.utils import _http

from pytest_streamguard.judge.base import REPLAY_TIMEOUT_S, Assembly, ClientJudge, Conclusion
from pytest_streamguard.judge.replay import REPLAY_URL, Replay
from pytest_streamguard.stream.recorded import Recorded

# The factory is global: concurrent judgings (astream's, in threads) take turns.
_FACTORY_LOCK = threading.Lock()


class HuggingFaceHubJudge(ClientJudge):
    """``huggingface_hub``: ``InferenceClient(model=url).text_generation``."""

    name = "huggingface_hub"
    formats = frozenset({"tgi"})
    module = "huggingface_hub"

    def judge(self, recorded: Recorded) -> Conclusion:
        """Replay ``recorded`` into ``InferenceClient`` and assemble what it yields."""
        replay = Replay(recorded)
        got = Assembly(self.name, replay.stamp)
        with _FACTORY_LOCK:
            previous = _http._GLOBAL_CLIENT_FACTORY
            huggingface_hub.set_client_factory(lambda: replay.client(httpx2))
            try:
                client = huggingface_hub.InferenceClient(model=REPLAY_URL, timeout=REPLAY_TIMEOUT_S)
                with client:
                    return got.run(lambda: _read(client, got))
            finally:
                huggingface_hub.set_client_factory(previous)


def _read(client: huggingface_hub.InferenceClient, got: Assembly) -> None:
    for output in client.text_generation("hi", stream=True, details=True):
        token = output.token
        if token is not None and not token.special:
            got.add("text", token.text)
        if output.generated_text is not None:
            got.ended(getattr(output.details, "finish_reason", None))
