"""A client judge's interface (:class:`ClientJudge`) and what it concludes (:class:`Conclusion`).

A client judge replays a :class:`~pytest_streamguard.stream.recorded.Recorded` response into
one official client library, through that client's public streaming API, and reports what the
client concluded: whether it read the stream to its end without raising, the exception it
raised otherwise, every output it yielded (text of each kind, tool calls) with the arrival
stamp of the read that let it yield, and the end reason it exposes. One module per client
implements it (``openai.py``, ``anthropic.py``, ...);
:func:`pytest_streamguard.register_judge` adds one of the user's own.
"""

from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from pytest_streamguard.formats import KINDS
from pytest_streamguard.stream.recorded import Recorded

#: Seconds a replayed client waits on anything (a replay answers at once; no retries either:
#: a client that retried would read the response twice).
REPLAY_TIMEOUT_S = 10.0

# The plugin's own code: an exception raised there (its innermost frame) is a judge defect, but
# the replay's, which raises the recorded ending as the HTTP library would.
_PACKAGE = Path(__file__).resolve().parent.parent
_REPLAY = _PACKAGE / "judge" / "replay.py"


@dataclass(frozen=True)
class Output:
    """One piece of output a client yielded: its kind (``text``, ``reasoning``, ``tool``,
    ``refusal``), its text, and the arrival stamp of the read that let the client yield it."""

    kind: str
    text: str
    stamp_ns: int


@dataclass
class Conclusion:
    """What one client concluded on one recorded response.

    ``error`` is the exception the client raised (``Type: message``), None when it read the
    stream to its end; ``outputs`` what it yielded, in order; ``calls`` the tool calls it
    assembled (one with empty arguments is output too); ``others`` the outputs it yielded
    without text (an image; output too); ``end_reason`` why generation ended,
    as the client exposes it (the last one the stream sent); ``allow_empty``: the request
    expected that an answer may have no output (``allow_empty=True``), so one without output
    that the client read to its end is completed; ``defect``: an exception the plugin's own
    code raised while the client read (``Type: message``), no conclusion of the client's: the
    reader's verdict stands."""

    client: str
    error: str | None = None
    outputs: list[Output] = field(default_factory=list)
    calls: int = 0
    others: int = 0
    end_reason: str | None = None
    allow_empty: bool = False
    defect: str | None = None
    reasons: bool = True
    """Whether the call tells an end reason (a team's own function yields text only)."""

    @property
    def produced(self) -> bool:
        """Whether the client yielded any output: text of any kind, a tool call, or an output
        without text (an image)."""
        return self.calls > 0 or self.others > 0 or bool(self.outputs)

    @property
    def completed(self) -> bool:
        """The client read the stream to its end without raising, and it answered (or an
        empty answer was allowed)."""
        return self.error is None and self.defect is None and (self.produced or self.allow_empty)

    def text_of(self, kind: str) -> str:
        """Everything of ``kind`` the client yielded, joined."""
        return "".join(output.text for output in self.outputs if output.kind == kind)

    @property
    def parts(self) -> dict[str, str]:
        """The text of every kind (all four kinds, empty ones too)."""
        return {kind: self.text_of(kind) for kind in KINDS}

    def describe(self) -> str:
        """One line: ``completed`` or the exception, and how much of each kind it yielded."""
        # The first line of the exception's message (pydantic's run to several).
        head = "completed" if self.completed else (self.error or "no output").splitlines()[0]
        sizes = ", ".join(f"{kind} {len(text)} chars" for kind, text in self.parts.items() if text)
        calls = f", {self.calls} tool calls" if self.calls else ""
        calls += f", {self.others} other outputs" if self.others else ""
        return f"{head} ({sizes or 'no text'}{calls})"


class Assembly:
    """What an adapter collects while its client reads a replay: each output stamped by
    ``stamp()`` (the arrival stamp of the last read the replay handed the client)."""

    def __init__(self, client: str, stamp: Callable[[], int]) -> None:
        self.conclusion = Conclusion(client)
        self._stamp = stamp

    def add(self, kind: str, text: object) -> None:
        """Keep a non-empty piece of ``kind``; a value the client yielded that is not a string
        (a vendor's tool-call arguments as an object, where OpenAI's type says a JSON string)
        is no text."""
        if isinstance(text, str) and text:
            self.conclusion.outputs.append(Output(kind, text, self._stamp()))

    def call(self, count: int = 1) -> None:
        """The client assembled ``count`` more tool calls."""
        self.conclusion.calls += count

    def other(self) -> None:
        """The client yielded an output without text (an image, a content part of no text)."""
        self.conclusion.others += 1

    def ended(self, reason: Any) -> None:
        """Keep an end reason the client reported (an enum's value, as sent; None and empty
        are not reasons)."""
        value = getattr(reason, "value", reason)
        if isinstance(value, str) and value:
            self.conclusion.end_reason = value

    def text_of(self, kind: str) -> str:
        """What of ``kind`` was kept so far."""
        return self.conclusion.text_of(kind)

    def fail(self, error: str) -> None:
        """The call failed as ``error`` (``Type: message``) where the client yields a failure
        instead of raising it (an ``error`` event): stop reading."""
        raise _Failed(error)

    def run(self, read: Callable[[], None]) -> Conclusion:
        """Run ``read``; an exception the client (or the team's function) raises is its
        conclusion, one the plugin's own code raises a :attr:`Conclusion.defect`."""
        try:
            read()
        except _Failed as failed:
            self.conclusion.error = str(failed)
        except Exception as exc:  # each client raises its own types; which one is the answer
            said = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if _ours(exc.__traceback__):
                self.conclusion.defect = said
            else:
                self.conclusion.error = said
        return self.conclusion


class _Failed(Exception):
    """:meth:`Assembly.fail`'s: the conclusion the judge read from the client's events."""


def _ours(trace: TracebackType | None) -> bool:
    """Whether the innermost frame of ``trace`` is the plugin's own code (not the replay's)."""
    if trace is None:
        return False
    while trace.tb_next is not None:
        trace = trace.tb_next
    where = Path(trace.tb_frame.f_code.co_filename).resolve()
    return where != _REPLAY and where.is_relative_to(_PACKAGE)


class ClientJudge(ABC):
    """One official client library as the judge of the streams of the formats it speaks.

    ``name`` is what ``client=`` and ``--streamguard-client`` accept; ``formats`` the stream
    formats it judges (names of :data:`~pytest_streamguard.formats.BUILTIN_FORMATS`, or of a
    custom format); ``module`` the module to import (imported only when judging)."""

    name: str
    formats: frozenset[str]
    module: str

    def available(self) -> bool:
        """Whether the client library is installed (found without importing it)."""
        try:
            return importlib.util.find_spec(self.module) is not None
        except ModuleNotFoundError:  # a missing parent package (google for google.genai)
            return False

    @abstractmethod
    def judge(self, recorded: Recorded) -> Conclusion:
        """Replay ``recorded`` into the client (see :mod:`pytest_streamguard.judge.replay`)
        and say what it concluded."""
