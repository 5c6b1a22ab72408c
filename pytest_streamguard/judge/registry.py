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
# Each built-in judge: its name, the formats it judges, the module it imports, its adapter.
_BUILTINS = (
    ("openai", "openai openai-responses", "openai", "openai.OpenAIJudge"),
    ("openai.stream", "openai openai-responses", "openai", "openai.OpenAIStreamJudge"),
    ("anthropic", "anthropic", "anthropic", "anthropic.AnthropicJudge"),
    ("anthropic.stream", "anthropic", "anthropic", "anthropic.AnthropicStreamJudge"),
    ("google-genai", "gemini", "google.genai", "google_genai.GoogleGenAIJudge"),
    ("ollama", "ollama", "ollama", "ollama.OllamaJudge"),
    ("huggingface_hub", "tgi", "huggingface_hub", "huggingface_hub.HuggingFaceHubJudge"),
    # OpenAI-compatible vendors' own clients: judges of the openai format by name (auto
    # picks openai's, listed first).
    ("mistralai", "openai", "mistralai.client", "mistralai.MistralAIJudge"),
    ("groq", "openai", "groq", "groq.GroqJudge"),
)
JUDGES: dict[str, ClientJudge] = {
    name: _Builtin(name, frozenset(formats.split()), module, f"{_HERE}.{adapter}")
    for name, formats, module, adapter in _BUILTINS
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
