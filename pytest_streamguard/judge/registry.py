"""Which client judges which stream: the built-in judges, the user's own, and ``client=``.

``client=`` (and ``--streamguard-client``, the ini key ``streamguard_client``) accepts
``auto`` (the default: the official client of the stream's format where it is installed, the
plugin's reader alone otherwise), a judge's name (it judges the streams of its formats; the
others keep the reader's verdict), or ``none`` (the reader alone, as before judges existed).
The built-in judges' modules import their client library, so they are imported only when a
stream is judged (:class:`_Builtin`); ``import pytest_streamguard`` imports no client.
"""

from __future__ import annotations

import importlib
from functools import cached_property

from pytest_streamguard.common.defaults import DEFAULT_CLIENT
from pytest_streamguard.judge.base import ClientJudge, Conclusion
from pytest_streamguard.judge.team import TeamJudge
from pytest_streamguard.stream.recorded import Recorded

AUTO = DEFAULT_CLIENT
NONE = "none"


class _Builtin(ClientJudge):
    """A built-in judge, named without importing its module (nor so its client library)."""

    def __init__(self, name: str, formats: frozenset[str], module: str, adapter: str) -> None:
        self.name = name
        self.formats = formats
        self.module = module
        self._adapter = adapter

    def _judge(self) -> ClientJudge:
        # Looked up on each use, not kept: a process that drops and re-imports modules
        # (pytester's in-process runs) would otherwise judge with the first run's client
        # library against the classes the next run imported again.
        path, _, cls = self._adapter.rpartition(".")
        judge: ClientJudge = getattr(importlib.import_module(path), cls)()
        return judge

    @cached_property
    def _installed(self) -> bool:
        return super().available()

    def available(self) -> bool:
        """Whether the client library is installed (looked up once)."""
        return self._installed

    def judge(self, recorded: Recorded) -> Conclusion:
        """The adapter's conclusion (its module imported on first use)."""
        return self._judge().judge(recorded)


_HERE = __name__.rpartition(".")[0]
JUDGES: dict[str, ClientJudge] = {
    judge.name: judge
    for judge in (
        _Builtin(
            "openai",
            frozenset({"openai", "openai-responses"}),
            "openai",
            f"{_HERE}.openai.OpenAIJudge",
        ),
        _Builtin(
            "openai.stream",
            frozenset({"openai", "openai-responses"}),
            "openai",
            f"{_HERE}.openai.OpenAIStreamJudge",
        ),
        _Builtin(
            "anthropic", frozenset({"anthropic"}), "anthropic", f"{_HERE}.anthropic.AnthropicJudge"
        ),
        _Builtin(
            "anthropic.stream",
            frozenset({"anthropic"}),
            "anthropic",
            f"{_HERE}.anthropic.AnthropicStreamJudge",
        ),
        _Builtin(
            "google-genai",
            frozenset({"gemini"}),
            "google.genai",
            f"{_HERE}.google_genai.GoogleGenAIJudge",
        ),
        _Builtin("ollama", frozenset({"ollama"}), "ollama", f"{_HERE}.ollama.OllamaJudge"),
        _Builtin(
            "huggingface_hub",
            frozenset({"tgi"}),
            "huggingface_hub",
            f"{_HERE}.huggingface_hub.HuggingFaceHubJudge",
        ),
        # OpenAI-compatible vendors' own clients: judges of the openai format by name (auto
        # picks openai's, listed first).
        _Builtin(
            "mistralai",
            frozenset({"openai"}),
            "mistralai.client",
            f"{_HERE}.mistralai.MistralAIJudge",
        ),
        _Builtin("groq", frozenset({"openai"}), "groq", f"{_HERE}.groq.GroqJudge"),
    )
}
"""Every judge by name, the built-in ones first; :func:`register_judge` adds to it."""


def is_builtin(judge: ClientJudge) -> bool:
    """Whether ``judge`` is a built-in one (a process of its own finds it by name)."""
    return isinstance(judge, _Builtin)


def register_judge(judge: ClientJudge) -> ClientJudge:
    """Add ``judge`` (one of the user's own clients) under its name, replacing a judge of that
    name; ``auto`` picks it for its formats after the built-in judges. Returns it."""
    if not isinstance(judge, ClientJudge):
        raise TypeError(f"register_judge({judge!r}): expected a ClientJudge instance")
    JUDGES.pop(judge.name, None)
    JUDGES[judge.name] = judge
    return judge


def check_client(value: object, source: str = "client=") -> str:
    """``value`` if it is ``auto``, ``none`` or a judge's name; for a function of the team's
    own (:mod:`.team`), the name it is registered under; else a ValueError that names it,
    where it came from, and what is accepted."""
    if callable(value) and not isinstance(value, ClientJudge):
        return register_judge(TeamJudge(value)).name
    if isinstance(value, str) and value in (AUTO, NONE):
        return value
    if isinstance(value, str) and value in JUDGES:
        if not JUDGES[value].available():
            raise ValueError(
                f"{source} {value!r}: that client is not installed (its module "
                f"{JUDGES[value].module} is not found); install it, or pass auto or none"
            )
        return value
    accepted = ", ".join([AUTO, NONE, *JUDGES])
    raise ValueError(f"{source} {value!r}: expected one of {accepted}, or a function of your own")


def judge_for(choice: str, format: str) -> ClientJudge | None:
    """The judge of a stream of ``format`` under ``choice``: for ``auto`` the first installed
    judge of that format; for a name, that judge if it speaks the format; None otherwise
    (and for ``none``): the reader's verdict stands alone."""
    if choice == NONE:
        return None
    if choice != AUTO:
        judge = JUDGES[choice]
        # A team's own function (no formats) reads every stream of the call that names it.
        return judge if format in judge.formats or not judge.formats else None
    for judge in JUDGES.values():
        if format in judge.formats and judge.available():
            return judge
    return None
