"""The google-genai client as judge: ``models.generate_content_stream``.

Each response's candidates' parts are the outputs: ``thought`` parts are reasoning, a
``function_call`` part is a tool call (its arguments as compact JSON, as the reader counts
them), code execution, inline data (audio, an image) and files are outputs without text; a
candidate's ``finish_reason`` (or, with no candidate finished, the prompt feedback's
``block_reason``) is the end reason. The judge replays one response, so the client reads it
as one request: without automatic continuation (a newer client's resuming of an answer whose
candidate carries a ``continuationToken``, by follow-up requests).
"""

from __future__ import annotations

import json

import httpx
from google import genai
from google.genai import types

from pytest_streamguard.common.tls import tls_context
from pytest_streamguard.judge.base import REPLAY_TIMEOUT_S, Assembly, ClientJudge, Conclusion
from pytest_streamguard.judge.replay import REPLAY_URL, Replay, kept_client
from pytest_streamguard.stream.recorded import Recorded

_OTHERS = ("executable_code", "code_execution_result", "inline_data", "file_data")


class GoogleGenAIJudge(ClientJudge):
    """``google-genai``: ``generate_content_stream`` on a ``genai.Client``."""

    name = "google-genai"
    formats = frozenset({"gemini"})
    module = "google.genai"

    def judge(self, recorded: Recorded) -> Conclusion:
        """Replay ``recorded`` into this thread's ``genai.Client`` and assemble what it yields."""
        replay, client = kept_client(genai.Client, httpx, recorded, _client)
        got = Assembly(self.name, replay.stamp)
        return got.run(lambda: _read(client, got))


def _client(replay: Replay) -> genai.Client:
    """A ``genai.Client`` over ``replay`` (kept per thread: building one takes about 30 ms). It
    is given the process's SSL context, which a replay never uses: it builds two otherwise,
    loading the CA bundle for each (tens of milliseconds)."""
    context = tls_context()
    return genai.Client(
        api_key="replay",
        http_options=types.HttpOptions(
            base_url=REPLAY_URL + "/",
            api_version="v1beta",
            timeout=int(REPLAY_TIMEOUT_S * 1000),
            httpx_client=replay.client(httpx),
            client_args={"verify": context},
            async_client_args={"verify": context, "ssl": context},
        ),
    )


def _one_request() -> types.GenerateContentConfig | None:
    """google-genai's config for one request: without it, a candidate's ``continuationToken``
    makes the client resume the answer with follow-up requests (automatic continuation, newer
    google-genai), which a replay of one recorded response would answer with the same bytes
    again. None where the installed client has no such feature."""
    if "automatic_continuation" not in types.GenerateContentConfig.model_fields:
        return None
    return types.GenerateContentConfig(automatic_continuation=False)


def _read(client: genai.Client, got: Assembly) -> None:
    for response in client.models.generate_content_stream(
        model="gemini", contents="hi", config=_one_request()
    ):
        finished = False
        for candidate in response.candidates or []:
            for part in (candidate.content.parts if candidate.content else None) or []:
                # A part may carry text and a call at once: the SDK's response.text and
                # response.function_calls each take theirs.
                got.add("reasoning" if part.thought else "text", part.text)
                if part.function_call is not None:
                    got.call()
                    args = part.function_call.args or {}
                    got.add("tool", json.dumps(args, separators=(",", ":")))
                # Output without text: code the model ran and its result, inline audio or an
                # image, a file.
                if any(getattr(part, name, None) is not None for name in _OTHERS):
                    got.other()
            reason = getattr(candidate.finish_reason, "value", candidate.finish_reason)
            if reason not in (None, "FINISH_REASON_UNSPECIFIED"):
                got.ended(reason)
                finished = True
        # A blocked prompt's reason, where no candidate of the response gave one (an
        # unspecified finish_reason is none).
        feedback = response.prompt_feedback
        if feedback is not None and feedback.block_reason is not None and not finished:
            got.ended(feedback.block_reason)
