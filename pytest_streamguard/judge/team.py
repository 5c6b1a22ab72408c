"""A function of the team's own as judge: the code that reads the stream in production.

``client=read_answer`` names a function that takes one argument, an HTTP client over the
replay (:class:`~.replay.Replay`: it answers every request, at any URL, with the recorded
response), reads the answer as the team's code does (through the official SDK built on that
client, or by hand) and yields the text it would show. What it yields is
the output, each piece stamped by the read that let it out; what it raises is the verdict
(a loop that crashes on a shape the server sends fails the test: the bug the team needs to
see). The HTTP client is ``httpx.Client``, or ``httpx2.Client`` where the argument is annotated
so (the clients built on that fork: openai, anthropic, huggingface_hub). A function that has
not returned after :data:`~.base.REPLAY_TIMEOUT_S` is left running in its thread and concluded
on as a judge defect: the reader's verdict stands.
"""

from __future__ import annotations

import importlib
import inspect
import threading
from collections.abc import Callable, Iterable
from typing import Any

from pytest_streamguard.judge.base import REPLAY_TIMEOUT_S, Assembly, ClientJudge, Conclusion
from pytest_streamguard.judge.replay import Replay
from pytest_streamguard.stream.recorded import Recorded

TeamCall = Callable[[Any], Iterable[str]]
"""A function of the team's own: ``(http client) -> the text it would show``."""


class TeamJudge(ClientJudge):
    """``call`` (a :data:`TeamCall`) as the judge of every stream of a test that names it."""

    formats: frozenset[str] = frozenset()  # every format: named by the call that reads it

    def __init__(self, call: TeamCall) -> None:
        try:
            signature = inspect.signature(call)
            signature.bind(None)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"client={call!r}: a function of your own takes one argument (the HTTP client "
                f"over the replay) and yields the text it shows; it cannot be called so: {exc}"
            ) from None
        self.call = call
        self.name = getattr(call, "__qualname__", repr(call))
        (argument, *_) = signature.parameters.values()
        self.module = "httpx2" if "httpx2" in str(argument.annotation) else "httpx"

    def judge(self, recorded: Recorded) -> Conclusion:
        """Run the function over a replay of ``recorded``, within the replay's time."""
        replay = Replay(recorded)
        got = Assembly(self.name, replay.stamp)
        got.conclusion.reasons = False

        def read() -> None:
            with replay.client(importlib.import_module(self.module)) as http:
                for text in self.call(http):
                    got.add("text", text)

        worker = threading.Thread(target=got.run, args=(read,), daemon=True)
        worker.start()
        worker.join(REPLAY_TIMEOUT_S)
        if worker.is_alive():  # its thread still writes to got's conclusion: a new one
            late = f"{self.name} did not return within {REPLAY_TIMEOUT_S:g} s"
            return Conclusion(self.name, defect=late)
        return got.conclusion
