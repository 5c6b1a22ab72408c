"""The client's conclusion becomes the trace's verdict, but where a documented rule is stricter.

After a stream ends, :func:`judge_trace` replays its recorded response into the client that
``client=`` names and rules on the trace:

* The client completed (read to its end without raising, and yielded output): the stream is
  completed, its text of every kind is the client's, and where the reader's tokens differ
  from the client's outputs the chunks become those outputs (each stamped by the read that let
  the client yield it), so TTFT and gaps are what the client saw. Stricter than the client
  only by :data:`STRICTER`: a reader's ``truncated`` (a clean close before the protocol's end,
  which no client but the Responses API's stream helper raises on) stays.
* The client raised (or yielded nothing): the stream is not completed. A reader's own failure
  keeps its kind and message (they say more than the client's exception); where the reader
  saw none, the kind is ``client`` and the message the client's exception.

The reader keeps running: ``trace.client`` names the judge, ``trace.reader_agrees`` says
whether the reader concluded the same (completed, the text of every kind and the end reason),
and where not, ``trace.judged`` says what each concluded and which rule, if any, explains it;
a difference no rule explains is a plugin bug to report. So is a judge defect: an exception the
plugin's own code raised inside a judge (:attr:`~.base.Conclusion.defect`) is no conclusion of
the client's, and the reader's verdict stands (``trace.judged["defect"]`` holds it).
"""

from __future__ import annotations

import contextlib
import gc
import re
from collections.abc import Iterator
from pathlib import Path

from pytest_streamguard.formats import KINDS, TEXT
from pytest_streamguard.judge.base import ClientJudge, Conclusion, Output
from pytest_streamguard.judge.registry import judge_for
from pytest_streamguard.stream.trace import Chunk, StreamTrace

STRICTER: dict[str, str] = {
    "truncated": (
        "a clean close before the protocol's end is truncated; the clients (but the Responses "
        "API's) read it as a whole answer"
    ),
    "protocol": (
        "an answer that is not a stream (a whole JSON answer where a stream was asked) is "
        "protocol, though a client may read it as a stream of one event (an event stream under "
        "a wrong content type is the client's: rule content-type)"
    ),
}
"""The reader's failures kept where the client completed, by ``error_kind``: the documented
rules where the plugin is stricter than the client (docs/protocols.md)."""

# Streams the plugin itself stopped reading: the client's conclusion on a part is no verdict.
_NOT_JUDGED = frozenset({"interrupted"})
# How the reader says an answer is not a stream of its format (formats/base.py).
_NOT_A_STREAM = "not a stream"


def judge_trace(trace: StreamTrace, choice: str) -> None:
    """Judge ``trace`` by the client ``choice`` names for its format (see
    :func:`~pytest_streamguard.judge.registry.judge_for`), and rule on it."""
    judge = judge_of(trace, choice)
    if judge is not None:
        assert trace.recorded is not None
        settle(trace, judge.judge(trace.recorded))


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Judge a load's streams with the cyclic collector paused, as the load reads them
    (:func:`pytest_streamguard.load.arun`): judging leaves no cyclic garbage, and the passes
    it set off over the heap of 200 streams just read took 30 to 270 ms and freed nothing."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def judge_of(trace: StreamTrace, choice: str) -> ClientJudge | None:
    """The judge of ``trace`` under ``choice``, its recorded response told its format; None
    where the reader's verdict stands alone (no judge, nothing recorded, or a read the plugin
    itself stopped)."""
    recorded = trace.recorded
    judge = judge_for(choice, trace.format)
    if judge is None or recorded is None or trace.error_kind in _NOT_JUDGED:
        return None
    recorded.format = trace.format
    return judge


def settle(trace: StreamTrace, conclusion: Conclusion) -> None:
    """Rule on ``trace`` by ``conclusion``, the judge's conclusion on its recorded response."""
    assert trace.recorded is not None
    conclusion.allow_empty = trace.recorded.allow_empty
    rule(trace, conclusion)


def save_disagreement(trace: StreamTrace, folder: Path) -> Path | None:
    """Save the recorded response of ``trace`` in ``folder`` (named for the stream) when its
    reader and client disagree with no rule to explain it, and name the file in
    ``trace.judged["transcript"]``; None (nothing saved) otherwise."""
    judged = trace.judged
    if trace.reader_agrees is not False or judged is None or judged["rule"] is not None:
        return None
    if trace.recorded is None:
        return None
    path = trace.recorded.save(folder / f"{file_name(trace.name)}.json")
    judged["transcript"] = str(path)
    return path


def file_name(text: str) -> str:
    """``text`` (a test's node id, a stream's name) as a file name: runs of anything but
    ASCII letters, digits, ``_`` and ``.`` become one ``-``."""
    return re.sub(r"[^A-Za-z0-9_.]+", "-", text).strip("-")


def reader_line(trace: StreamTrace) -> str:
    """What the reader concluded, in one line."""
    head = "completed" if trace.completed else f"{trace.error_kind}: {trace.error}"
    sizes = ", ".join(
        f"{kind} {len(text)} chars" for kind in KINDS if (text := trace.text_of(kind))
    )
    return f"{head} ({sizes or 'no text'})"


def rule(trace: StreamTrace, conclusion: Conclusion) -> None:
    """Make ``conclusion`` the verdict of ``trace`` (but where :data:`STRICTER` keeps the
    reader's), and record whether the reader agreed."""
    parts = {kind: trace.text_of(kind) for kind in KINDS}
    if conclusion.defect is not None:
        trace.client, trace.reader_agrees = conclusion.client, False
        trace.judged = {
            "reader": reader_line(trace),
            "client": f"judge defect: {conclusion.defect}",
            "rule": None,
            "defect": conclusion.defect,
        }
        return
    said = conclusion.parts
    differs = [kind for kind in KINDS if parts[kind] != said[kind]]
    # A team's own function yields text only: it tells no end reason.
    if conclusion.reasons and trace.end_reason != conclusion.end_reason:
        differs.append(f"end reason ({trace.end_reason} vs {conclusion.end_reason})")
    if conclusion.error is not None:
        differs = []  # the client's exception is all it concluded
    if trace.completed != conclusion.completed:
        differs.insert(0, "completed")
    trace.client = conclusion.client
    trace.reader_agrees = not differs
    if not differs:
        return
    stricter = conclusion.completed and _stricter(trace, parts == said)
    trace.judged = {
        "reader": reader_line(trace),
        "client": conclusion.describe(),
        "rule": trace.error_kind if stricter and trace.error_kind is not None else None,
        "differs": ", ".join(differs),
    }
    if conclusion.completed and _refused(trace) and _events(trace):
        # An event stream under a wrong content type: the client reads it; reported, not failed.
        trace.judged["rule"] = "content-type"
        trace.judged["content_type"] = trace.error
    if stricter:
        return
    if conclusion.completed:
        trace.completed = True
        trace.error = None
        trace.error_kind = None
    else:
        trace.completed = False
        if trace.error_kind is None:
            trace.error_kind = "client"
            trace.error = f"the {conclusion.client} client: {conclusion.error or 'no output'}"
    trace.end_reason = conclusion.end_reason
    if parts != said:
        trace.chunks = chunks_of(conclusion.outputs)


def _stricter(trace: StreamTrace, same_text: bool) -> bool:
    """Whether a rule of :data:`STRICTER` keeps the reader's failure of a stream the client
    completed."""
    if trace.error_kind == "truncated":
        return same_text
    return _refused(trace) and not _events(trace)


def _refused(trace: StreamTrace) -> bool:
    """Whether the reader refused the answer as not a stream (by its content type or body)."""
    return trace.error_kind == "protocol" and _NOT_A_STREAM in (trace.error or "")


def _events(trace: StreamTrace) -> bool:
    """Whether the recorded body carries events (two JSON objects or more): an event stream,
    whatever its content type said, not one whole answer."""
    return trace.recorded is not None and len(list(trace.recorded.objects(2))) == 2


def chunks_of(outputs: list[Output]) -> list[Chunk]:
    """The client's outputs as the trace's chunks: the outputs yielded at one read's stamp
    make one chunk (one event may carry several kinds)."""
    chunks: list[Chunk] = []
    for output in outputs:
        if not chunks or chunks[-1].stamp_ns != output.stamp_ns:
            chunks.append(Chunk(len(chunks), output.stamp_ns, output.stamp_ns, 0, "", parts={}))
        chunk = chunks[-1]
        chunk.text += output.text
        assert chunk.parts is not None
        chunk.parts[output.kind] = chunk.parts.get(output.kind, "") + output.text
    for chunk in chunks:
        if chunk.parts is not None and set(chunk.parts) == {TEXT}:
            chunk.parts = None
    return chunks
