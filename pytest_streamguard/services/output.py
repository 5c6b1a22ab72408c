"""What the processes the plugin starts wrote, and the log files a target given by URL names.

An :class:`OutputLog` keeps a process's output (stdout and stderr share one pipe, so in the
order written) line by line, each line stamped with ``time.perf_counter_ns()`` as the read that
brought it returned: the clock of the streams' own stamps, so a line can be placed in a
stream's window. The reading costs the streams nothing that shows: the pipe is read in blocks,
the lines of a block are kept as bytes with one stamp under one lock (a fraction of a
microsecond a line), and they are decoded only when asked for. Memory is bounded: a line is cut
at :data:`LINE_CAP` bytes (the rest of it is read and dropped, so a 10 MB line costs no more
than a short one), and the oldest lines go once what is kept passes :data:`BYTES_CAP` (a line's
bytes and :data:`LINE_COST`, so that short lines are bounded too); :meth:`OutputLog.losses`
says how many were cut or dropped. Bytes that are not UTF-8 are decoded with replacement
characters; a last line with no newline is kept at EOF.

:func:`follow` tails a file (``streamguard_log_files``) from its end into a log: a file
replaced or truncated (log rotation) is read again from its start, and a file that vanished is
said once in the log (``streamguard: ... vanished``) and read again when it comes back.
"""

from __future__ import annotations

import bisect
import itertools
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import IO

__all__ = ["BYTES_CAP", "LINE_CAP", "LINE_COST", "OutputLog", "follow"]

#: The most bytes one log keeps: each line's bytes and :data:`LINE_COST` (the oldest lines
#: go first).
BYTES_CAP = 1_000_000
#: What a kept line costs besides its bytes: its object's header, its stamp and two slots.
LINE_COST = 100
#: A longer line is cut to this many bytes (and said to be cut).
LINE_CAP = 4096
#: What a cut line ends with.
CUT_MARK = b" [line cut]"
#: The most bytes one read of a pipe or file takes.
READ_SIZE = 64 * 1024
#: How often a followed file is looked at for new lines, rotation or its vanishing.
FOLLOW_POLL_S = 0.05


class OutputLog:
    """The lines one process (or log file) wrote, as ``(stamp_ns, text)``, oldest first."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._stamps: list[int] = []
        # Bytes as read (decoded when asked for), or the plugin's own notes as text.
        self._lines: list[bytes | str] = []
        self._size = 0
        #: Lines added since the start (a reader's place survives the oldest lines going).
        self.count = 0
        self.dropped = 0
        self.cut = 0
        self.changed = threading.Condition()

    def add(self, line: bytes | str, stamp_ns: int | None = None) -> None:
        """Keep one line (its newline stripped), stamped now unless ``stamp_ns`` is given."""
        self.add_lines([line], time.perf_counter_ns() if stamp_ns is None else stamp_ns)

    def add_lines(self, lines: Sequence[bytes | str], stamp_ns: int, *, cut: int = -1) -> None:
        """Keep the lines of one read, all stamped ``stamp_ns``; one longer than
        :data:`LINE_CAP`, and the one at index ``cut`` (the start of a line whose end will not
        be kept), are cut and said to be."""
        if cut >= 0 or max(map(len, lines), default=0) > LINE_CAP:
            long = {i for i, line in enumerate(lines) if i == cut or len(line) > LINE_CAP}
            lines = [_cut(line) if i in long else line for i, line in enumerate(lines)]
            self.cut += len(long)
        with self.changed:
            self._stamps.extend(itertools.repeat(stamp_ns, len(lines)))
            self._lines.extend(lines)
            self._size += sum(map(len, lines)) + LINE_COST * len(lines)
            self.count += len(lines)
            if self._size > BYTES_CAP:
                # Trim to nine tenths at once, so a busy process does not pay a trim per line.
                drop, freed = 0, 0
                while self._size - freed > BYTES_CAP * 9 // 10 and drop < len(self._lines):
                    freed += len(self._lines[drop]) + LINE_COST
                    drop += 1
                del self._stamps[:drop], self._lines[:drop]
                self._size -= freed
                self.dropped += drop
            self.changed.notify_all()

    def between(self, start_ns: int, end_ns: int) -> list[tuple[int, str]]:
        """The lines stamped from ``start_ns`` to ``end_ns``."""
        with self.changed:
            low = bisect.bisect_left(self._stamps, start_ns)
            high = bisect.bisect_right(self._stamps, end_ns)
            stamps, lines = self._stamps[low:high], self._lines[low:high]
        return list(zip(stamps, map(_text, lines), strict=True))

    def lost_before(self, stamp_ns: int) -> bool:
        """Whether lines written after ``stamp_ns`` may have been dropped to bound memory."""
        with self.changed:
            return self.dropped > 0 and (not self._stamps or self._stamps[0] > stamp_ns)

    def since(self, seen: int) -> tuple[list[str], int]:
        """The lines added after the first ``seen`` (those still kept), and the new count."""
        with self.changed:
            kept_from = self.count - len(self._lines)
            lines, count = self._lines[max(seen - kept_from, 0) :], self.count
        return [_text(line) for line in lines], count

    def tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines, as text."""
        with self.changed:
            last = self._lines[-lines:]
        return "\n".join(map(_text, last)) if last else "(no output)"

    @property
    def size(self) -> int:
        """Bytes kept, as the cap counts them (a line's length, and :data:`LINE_COST`)."""
        return self._size

    def losses(self) -> str:
        """What bounding the memory cost, in words (empty when nothing was cut or dropped)."""
        said = [f"{n} {what}" for n, what in ((self.cut, "cut"), (self.dropped, "dropped")) if n]
        return f"{self.name}: lines {', '.join(said)} to bound memory" if said else ""

    def drain(self, stream: IO[bytes]) -> None:
        """Read ``stream`` to its end into this log, a block at a time (a reader thread's
        body): ``read1`` returns what the pipe holds, up to 64 KiB, in one system call."""
        lines = _Lines(self)
        read = getattr(stream, "read1", stream.read)
        while block := read(READ_SIZE):
            lines.feed(block)
        lines.end()
        with self.changed:
            self.changed.notify_all()


def _cut(line: bytes | str) -> bytes | str:
    if isinstance(line, str):
        return line[:LINE_CAP] + CUT_MARK.decode()
    return line[:LINE_CAP] + CUT_MARK


def _text(line: bytes | str) -> str:
    text = line if isinstance(line, str) else line.decode("utf-8", "replace")
    return text.rstrip("\r\n")


class _Lines:
    """Splits the blocks read from one byte stream into a log's lines: the unfinished last
    line waits for the next block (at most :data:`LINE_CAP` bytes of it: a longer one is kept
    cut at once, and its rest dropped up to its newline)."""

    def __init__(self, log: OutputLog) -> None:
        self.log = log
        self.partial = b""
        self.cutting = False

    def feed(self, block: bytes) -> None:
        stamp = time.perf_counter_ns()
        lines = (self.partial + block).split(b"\n")
        rest = lines.pop()
        if self.cutting and lines:
            del lines[0]  # the end of a line already kept cut
            self.cutting = False
        cut = -1
        if self.cutting:
            rest = b""
        elif len(rest) > LINE_CAP:
            lines.append(rest)
            cut, rest, self.cutting = len(lines) - 1, b"", True
        self.partial = rest
        if lines:
            self.log.add_lines(lines, stamp, cut=cut)

    def end(self) -> None:
        """The stream ended: a last line with no newline is kept."""
        if self.partial:
            self.log.add(self.partial)
        self.partial = b""


def follow(log: OutputLog, path: str, stop: threading.Event) -> Callable[[], None]:
    """Tail ``path`` into ``log`` from the file's end, in a daemon thread, until ``stop`` is set
    (the function returned sets it and waits for the thread)."""
    thread = threading.Thread(
        target=_follow, args=(log, path, stop), name="streamguard-follow", daemon=True
    )
    thread.start()

    def end() -> None:
        stop.set()
        thread.join(2.0)

    return end


def _follow(log: OutputLog, path: str, stop: threading.Event) -> None:
    file: IO[bytes] | None = None
    vanished = False
    at_start = True
    lines = _Lines(log)
    while True:
        if file is None:
            try:
                file = open(path, "rb")  # noqa: SIM115 -- held open across polls
            except OSError:
                if not vanished:
                    log.add(f"streamguard: log file {path} vanished (or is not there yet)")
                    vanished = True
            else:
                if at_start and not vanished:
                    file.seek(0, os.SEEK_END)  # only what is written from now on
                vanished = at_start = False
        if file is not None:
            _read_new(file, lines)
            file = _reopened(log, path, file)
        if stop.wait(FOLLOW_POLL_S):
            if file is not None:
                _read_new(file, lines)
                file.close()
            lines.end()
            return


def _read_new(file: IO[bytes], lines: _Lines) -> None:
    """Add the lines written since the last read (the unfinished one waits in ``lines``)."""
    while block := file.read(READ_SIZE):
        lines.feed(block)


def _reopened(log: OutputLog, path: str, file: IO[bytes]) -> IO[bytes] | None:
    """``file``, or None (closed) where ``path`` is now another file, is gone or was truncated,
    so that the next poll opens it from its start."""
    try:
        now = os.stat(path)
    except OSError:
        file.close()
        return None
    held = os.fstat(file.fileno())
    if now.st_ino != held.st_ino or now.st_dev != held.st_dev or now.st_size < file.tell():
        what = "truncated" if now.st_ino == held.st_ino else "replaced"
        log.add(f"streamguard: log file {path} was {what} (rotated): read from its start")
        file.close()
        return None
    return file
