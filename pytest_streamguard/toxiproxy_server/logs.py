"""zerolog-style JSON log lines on stdout, written by a background thread.

A reader that stops draining our stdout (a parent that only wanted the startup line) must
never stall the proxies, so lines go through a bounded queue to a writer thread and are
dropped, and counted, when that queue is full. ``LOG_LEVEL`` sets the level, as for the real
server.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
from datetime import UTC, datetime
from typing import Final

LEVELS: Final = {"trace": -1, "debug": 0, "info": 1, "warn": 2, "error": 3, "fatal": 4}

_QUEUE_SIZE: Final = 10_000


class _Writer:
    def __init__(self) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue(_QUEUE_SIZE)
        self.dropped = 0
        self.threshold = LEVELS.get(os.environ.get("LOG_LEVEL", "info").lower(), 1)
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="toxiproxy-log", daemon=True)
            self.thread.start()

    def _run(self) -> None:
        while (line := self.lines.get()) is not None:
            try:
                sys.stdout.write(line)
                sys.stdout.flush()
            except (OSError, ValueError):
                return

    def stop(self, timeout: float) -> None:
        if self.thread is not None:
            try:
                self.lines.put(None, timeout=timeout)
            except queue.Full:
                return
            self.thread.join(timeout)
            self.thread = None


_WRITER: Final = _Writer()


def format_line(level: str, message: str, fields: dict[str, object]) -> str:
    """One zerolog-shaped JSON line: level, fields, time, message."""
    record: dict[str, object] = {"level": level, **fields}
    record["time"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    record["message"] = message
    return json.dumps(record, separators=(",", ":"), default=str) + "\n"


def log(level: str, message: str, **fields: object) -> None:
    """Queue one log line if ``level`` is at or above ``LOG_LEVEL``; never blocks."""
    if LEVELS[level] < _WRITER.threshold:
        return
    _WRITER.start()
    try:
        _WRITER.lines.put_nowait(format_line(level, message, fields))
    except queue.Full:
        _WRITER.dropped += 1


def log_now(level: str, message: str, **fields: object) -> None:
    """Write one line synchronously and flush (the startup line a parent waits for)."""
    sys.stdout.write(format_line(level, message, fields))
    sys.stdout.flush()


def flush_logs(timeout: float = 2.0) -> None:
    """Let the writer thread finish the queued lines (at shutdown)."""
    _WRITER.stop(timeout)
