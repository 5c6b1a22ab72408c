"""What the processes the plugin starts wrote, and the log files a target given by URL names.

An :class:`OutputLog` keeps a process's output (stdout and stderr share one pipe, so in the
order written) line by line, each line stamped with ``time.perf_counter_ns()`` as it arrived:
the clock of the streams' own stamps, so a line can be placed in a stream's window. Memory is
bounded: a line is cut at :data:`LINE_CAP` characters (the rest of it is read and dropped, so a
10 MB line costs no more than a short one), and the oldest lines go once what is kept passes
:data:`BYTES_CAP` (a line's characters and :data:`LINE_COST`, so that short lines are bounded
too); :meth:`OutputLog.losses` says how many were cut or dropped. Bytes that are not UTF-8 are
decoded with replacement characters; a last line with no newline is kept at EOF.

:func:`follow` tails a file (``streamguard_log_files``) from its end into a log: a file
replaced or truncated (log rotation) is read again from its start, and a file that vanished is
said once in the log (``streamguard: ... vanished``) and read again when it comes back.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from collections.abc import Callable
from typing import IO

__all__ = ["BYTES_CAP", "LINE_CAP", "LINE_COST", "OutputLog", "follow"]

#: The most bytes one log keeps: each line's characters and :data:`LINE_COST` (the oldest lines
#: go first).
BYTES_CAP = 1_000_000
#: What a kept line costs besides its characters: its string's header, its stamp and two slots.
LINE_COST = 100
#: A longer line is cut to this many characters (and said to be cut).
LINE_CAP = 4096
#: How often a followed file is looked at for new lines, rotation or its vanishing.
FOLLOW_POLL_S = 0.05


class OutputLog:
    """The lines one process (or log file) wrote, as ``(stamp_ns, text)``, oldest first."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._stamps: list[int] = []
        self._texts: list[str] = []
        self._size = 0
        #: Lines added since the start (a reader's place survives the oldest lines going).
        self.count = 0
        self.dropped = 0
        self.cut = 0
        self.changed = threading.Condition()

    def add(self, raw: bytes | str, stamp_ns: int | None = None, *, cut: bool = False) -> None:
        """Keep one line (without its newline), stamped now unless ``stamp_ns`` is given."""
        stamp = time.perf_counter_ns() if stamp_ns is None else stamp_ns
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        text = text.rstrip("\r\n")
        if cut or len(text) > LINE_CAP:
            text = text[:LINE_CAP] + " [line cut]"
            self.cut += 1
        with self.changed:
            self._stamps.append(stamp)
            self._texts.append(text)
            self._size += len(text) + LINE_COST
            self.count += 1
            if self._size > BYTES_CAP:
                # Trim to nine tenths at once, so a busy process does not pay a trim per line.
                drop, freed = 0, 0
                while self._size - freed > BYTES_CAP * 9 // 10 and drop < len(self._texts):
                    freed += len(self._texts[drop]) + LINE_COST
                    drop += 1
                del self._stamps[:drop], self._texts[:drop]
                self._size -= freed
                self.dropped += drop
            self.changed.notify_all()

    def between(self, start_ns: int, end_ns: int) -> list[tuple[int, str]]:
        """The lines stamped from ``start_ns`` to ``end_ns``."""
        with self.changed:
            low = bisect.bisect_left(self._stamps, start_ns)
            high = bisect.bisect_right(self._stamps, end_ns)
            return list(zip(self._stamps[low:high], self._texts[low:high], strict=True))

    def lost_before(self, stamp_ns: int) -> bool:
        """Whether lines written after ``stamp_ns`` may have been dropped to bound memory."""
        with self.changed:
            return self.dropped > 0 and (not self._stamps or self._stamps[0] > stamp_ns)

    def since(self, seen: int) -> tuple[list[str], int]:
        """The lines added after the first ``seen`` (those still kept), and the new count."""
        with self.changed:
            kept_from = self.count - len(self._texts)
            return self._texts[max(seen - kept_from, 0) :], self.count

    def tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines, as text."""
        with self.changed:
            last = self._texts[-lines:]
        return "\n".join(last) if last else "(no output)"

    @property
    def size(self) -> int:
        """Bytes kept, as the cap counts them (characters, and :data:`LINE_COST` a line)."""
        return self._size

    def losses(self) -> str:
        """What bounding the memory cost, in words (empty when nothing was cut or dropped)."""
        said = [f"{n} {what}" for n, what in ((self.cut, "cut"), (self.dropped, "dropped")) if n]
        return f"{self.name}: lines {', '.join(said)} to bound memory" if said else ""

    def drain(self, stream: IO[bytes]) -> None:
        """Read ``stream`` to its end, line by line, into this log (a reader thread's body)."""
        pending_cut = False
        while line := stream.readline(LINE_CAP + 1):
            if line.endswith(b"\n"):
                if pending_cut:
                    pending_cut = False  # the end of a line already kept cut
                else:
                    self.add(line)
            elif len(line) > LINE_CAP and not pending_cut:
                self.add(line, cut=True)
                pending_cut = True
            elif not pending_cut:
                self.add(line)  # a last line with no newline, at EOF
        with self.changed:
            self.changed.notify_all()


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
    partial = b""
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
            partial = _read_new(log, file, partial)
            file = _reopened(log, path, file)
        if stop.wait(FOLLOW_POLL_S):
            if file is not None:
                _read_new(log, file, partial)
                file.close()
            return


def _read_new(log: OutputLog, file: IO[bytes], partial: bytes) -> bytes:
    """Add the complete lines written since the last read; return the unfinished one."""
    while chunk := file.read(64 * 1024):
        lines = (partial + chunk).split(b"\n")
        partial = lines.pop()
        for line in lines:
            log.add(line)
        if len(partial) > LINE_CAP:
            log.add(partial, cut=True)
            partial = b""
    return partial


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
